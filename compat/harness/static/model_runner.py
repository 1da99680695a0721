"""Which model runner serves `extract_hidden_states` in a vLLM release, read from its wheel (issue 22
item 5): no CPU run can tell, since the CPU builds have no Triton and always take V1.

Feature detection on the sources, not a table of versions:
- Model Runner V2 exists where `vllm/v1/worker/gpu/model_runner.py` does;
- how it is chosen: `VllmConfig.use_v2_model_runner` in `vllm/config/vllm.py` (auto) or, before it,
  only `VLLM_USE_V2_MODEL_RUNNER=1` (`vllm/envs.py`'s default "0": opt-in);
- for which models by default: `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` where the auto rule reads it
  (`_is_default_v2_model_runner_model`), else every model;
- whether it needs Triton (`HAS_TRITON` in the auto rule: the CPU builds fall back to V1);
- whether V2 takes the `extract_hidden_states` method: the speculative-method allow list (`method
  not in (...)`) or deny list (`method in (...)`) of `_get_v2_model_runner_unsupported_features`.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from compat.harness.static.sources import WheelSources

V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
CONFIG = "vllm/config/vllm.py"
ENVS = "vllm/envs.py"
METHOD = "extract_hidden_states"
MODEL = "LlamaForCausalLM"  # the tiny model the cells serve (not MoE)
NON_MOE = "every non-MoE model"


def _function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _strings(node: ast.AST) -> list[str]:
    return [e.value for e in getattr(node, "elts", []) if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def v2_method_rule(config_source: str) -> tuple[str, list[str]] | None:
    """("allow", methods) or ("deny", methods): the speculative methods the V2 runner takes or
    refuses, from the `if method [not] in (...)` whose branch adds "speculative method '...'"."""
    try:
        function = _function(ast.parse(config_source), "_get_v2_model_runner_unsupported_features")
    except SyntaxError:
        return None
    if function is None:
        return None
    for node in ast.walk(function):
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if not (isinstance(test.left, ast.Attribute) and test.left.attr == "method" and len(test.ops) == 1
                and isinstance(test.comparators[0], (ast.Tuple, ast.List, ast.Set))):
            continue
        if "speculative method '" not in ast.unparse(ast.Module(body=node.body, type_ignores=[])):
            continue
        kind = "allow" if isinstance(test.ops[0], ast.NotIn) else "deny" if isinstance(test.ops[0], ast.In) else None
        if kind:
            return kind, _strings(test.comparators[0])
    return None


def default_architectures(config_source: str, auto_rule: str) -> list[str] | None:
    """The architectures V2 is the default for, where the auto rule limits it; None: every model.
    Where the model rule also takes every non-MoE model (`... or not model_config.is_moe`), the list
    holds "every non-MoE model" first, then the MoE architectures it names."""
    if "_is_default_v2_model_runner_model" not in auto_rule:
        return None
    try:
        rule = _function(ast.parse(config_source), "_is_default_v2_model_runner_model")
    except SyntaxError:
        rule = None
    non_moe = rule is not None and re.search(r"\bor not model_config\.is_moe\b", ast.unparse(rule)) is not None
    match = re.search(r"DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES\s*=\s*frozenset\(\s*([\[{(][^)]*?[\]})])\s*\)",
                      config_source, re.S)
    listed = sorted(set(re.findall(r'"([A-Za-z0-9_]+)"', match[1]))) if match else []
    return [NON_MOE, *listed] if non_moe else listed


def read_model_runner(texts: dict[str, str], has_v2: bool, version: str = "") -> dict[str, Any]:
    """The runner facts from the sources (`texts`: path -> source of CONFIG and ENVS)."""
    config, envs = texts.get(CONFIG, ""), texts.get(ENVS, "")
    out: dict[str, Any] = {"vllm": version, "v2_present": has_v2,
                           "read_from": [p for p in (CONFIG, ENVS) if p in texts]}
    if not has_v2:
        out.update(selection="none", v2_serves_extract=False, default_gpu="V1", default_cpu="V1",
                   text="V1 (no Model Runner V2 in this release)")
        return out
    try:
        auto = _function(ast.parse(config), "use_v2_model_runner") if config else None
    except SyntaxError:
        auto = None
    auto_rule = ast.unparse(auto) if auto else ""
    rule = v2_method_rule(config)
    if rule is None:  # before the unsupported-features list no speculative method is admitted by name
        serves = None
    else:
        kind, methods = rule
        serves = (METHOD in methods) if kind == "allow" else (METHOD not in methods)
    out["v2_method_rule"] = {"kind": rule[0], "methods": rule[1]} if rule else None
    out["v2_serves_extract"] = serves
    if not auto:
        env_default = re.search(r'getenv\(\s*"VLLM_USE_V2_MODEL_RUNNER"\s*,\s*("?[^")]*"?)\s*\)', envs)
        out.update(selection="opt-in (VLLM_USE_V2_MODEL_RUNNER=1; default "
                             f"{env_default[1] if env_default else 'unknown'})",
                   default_gpu="V1", default_cpu="V1")
    else:
        archs = default_architectures(config, auto_rule)
        needs_triton = "HAS_TRITON" in auto_rule
        out.update(selection="auto", default_architectures=archs if archs is not None else "every model",
                   needs_triton=needs_triton)
        for_model = archs is None or MODEL in archs or NON_MOE in archs
        out["default_gpu"] = "V2" if for_model and serves else "V1"
        out["default_cpu"] = "V1" if needs_triton else out["default_gpu"]
    out["text"] = runner_text(out)
    return out


def runner_text(facts: dict[str, Any]) -> str:
    serves = facts.get("v2_serves_extract")
    v2 = ("V2 serves extract_hidden_states" if serves else
          "V2 refuses extract_hidden_states (falls back to V1)" if serves is False else
          "V2 names no speculative methods (opt-in, untried here)")
    archs = facts.get("default_architectures")
    scope = ("" if facts.get("selection") != "auto" else
             " for every model" if archs == "every model" else f" for {', '.join(archs or ()) or 'no architecture'}")
    triton = "; CPU builds (no Triton): V1" if facts.get("needs_triton") else ""
    return (f"GPU default for {METHOD}: {facts['default_gpu']}; V2 selection {facts['selection']}{scope}; "
            f"{v2}{triton} (read from the wheel, not run)")


def model_runner(sources: WheelSources) -> dict[str, Any]:
    texts = {p: sources.read(p) for p in (CONFIG, ENVS) if p in sources.paths}
    return read_model_runner(texts, V2_RUNNER in sources.paths, sources.version)
