"""A vLLM release's extraction-path fingerprint: a hash of the code hidden-state extraction runs
through that the static layer cannot judge (behaviour, not signatures), read from the wheel sources
the static layer already fetched.

Two releases with the same fingerprint (and the same static findings) run the same code on the
extraction path, so one runtime cell can stand for the other (compat.harness.support infers it).
Which code, and why (the silent faults of the registry live there):

- the scheduler and the KV-cache manager (`vllm/v1/core/sched/scheduler.py`,
  `kv_cache_manager.py`, `kv_cache_utils.py`, `kv_cache_planning.py`, `block_pool.py`,
  `single_type_kv_cache_manager.py`) and `vllm/v1/request.py`: what a step schedules, chunked
  prefill, prefix-cache hits, block hashing: rows missing or reordered, the prefix-cache rows of
  the connector;
- the model runner's hidden-state path: in `gpu_model_runner.py` (the CPU runner inherits it) the
  functions that step the model (`execute_model`, `sample_tokens`, `_dummy_run`, `load_model`) and
  every function naming aux hidden states or the KV connector; `cpu_model_runner.py` whole (what
  the CPU build refuses or switches on);
- in-process generators (speculators < 0.5) also drive the executor and worker directly:
  `vllm/v1/executor/{multiproc_executor,abstract,uniproc_executor}.py` (collective_rpc replies,
  execute_model/sample_tokens) and `vllm/v1/worker/worker_base.py` (the worker extension);
- the server era (speculators >= 0.5, `extract_hidden_states` with `ExampleHiddenStatesConnector`):
  the proposer `vllm/v1/spec_decode/extract_hidden_states.py`, the connector
  `.../kv_connector/v1/example_hidden_states_connector.py`, Model Runner V2's
  `vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py`.

Normalised: each module is parsed and dumped by `ast` without line numbers, comments, formatting or
docstrings, so a release whose only change there is a docstring, a comment or layout keeps its
fingerprint. A module absent from a release counts as absent (its path is part of the hash).
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

from compat.harness.static.sources import WheelSources
from compat.shared.profiles import profile_for

FORMAT = 1  # bump when the modules or the normalisation change: stored fingerprints are then read again
SCHEDULING = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/kv_cache_planning.py",
    "vllm/v1/core/block_pool.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/request.py",
)
CPU_RUNNER = ("vllm/v1/worker/cpu_model_runner.py",)
IN_PROCESS = (
    "vllm/v1/executor/multiproc_executor.py",
    "vllm/v1/executor/abstract.py",
    "vllm/v1/executor/uniproc_executor.py",
    "vllm/v1/worker/worker_base.py",
)
SERVER = (
    "vllm/v1/spec_decode/extract_hidden_states.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py",
    "vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py",
)
# Of the model runner only its hidden-state path: it is the largest file on the path and changes in
# every release for reasons (new models, attention backends) the extraction never meets.
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
RUNNER_FUNCTIONS = ("execute_model", "sample_tokens", "_dummy_run", "load_model")
RUNNER_WORDS = ("aux_hidden", "kv_connector", "extract_hidden_states")


def path_modules(speculators: str) -> tuple[str, ...]:
    """The whole modules on this speculators release's extraction path (the runner's functions aside)."""
    era = SERVER if profile_for(speculators).name == "server" else IN_PROCESS
    return SCHEDULING + CPU_RUNNER + era


def era(speculators: str) -> str:
    return "server" if profile_for(speculators).name == "server" else "in-process"


class StripDocstrings(ast.NodeTransformer):
    def _strip(self, node: Any) -> Any:
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _strip


def normalised(source: str) -> str:
    """The module's code as `ast` sees it: no comments, layout, line numbers or docstrings. A file
    that does not parse is kept as its text (a hash still tells releases apart)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    return ast.dump(StripDocstrings().visit(tree), include_attributes=False)


def runner_path(source: str) -> str:
    """The model runner's functions on the hidden-state path, normalised, in file order (one parse;
    a function is kept by its name or by a path word among the names it uses)."""
    try:
        tree = StripDocstrings().visit(ast.parse(source))
    except SyntaxError:
        return source
    kept = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dumped = ast.dump(node, include_attributes=False)
            if node.name in RUNNER_FUNCTIONS or any(word in dumped for word in RUNNER_WORDS):
                kept.append(f"{node.name}:{dumped}")
    return "\n".join(kept)


def module_digests(sources: WheelSources, speculators: str) -> dict[str, str]:
    """{path: short digest} of each module on the path (`absent` where the release has none)."""
    out = {}
    for path in path_modules(speculators):
        out[path] = _digest(normalised(sources.read(path))) if path in sources.paths else "absent"
    out[RUNNER + " (hidden-state path)"] = (_digest(runner_path(sources.read(RUNNER))) if RUNNER in sources.paths
                                            else "absent")
    return out


def fingerprint(sources: WheelSources, speculators: str, cache_dir: Path | None = None) -> dict[str, Any]:
    """The release's fingerprint for this speculators release's path: the digest and its parts.
    Kept beside the wheel's sources (`cache_dir`, the SourceCache's root): a wheel never changes."""
    stored = Path(cache_dir) / f"{sources.filename}.fingerprint-{FORMAT}-{era(speculators)}.json" if cache_dir else None
    if stored is not None and stored.is_file():
        try:
            cached: dict[str, Any] = json.loads(stored.read_text())
            return cached
        except (OSError, ValueError):
            pass
    parts = module_digests(sources, speculators)
    whole = _digest("\n".join(f"{path}={digest}" for path, digest in sorted(parts.items())))
    out = {"vllm": sources.version, "era": era(speculators), "digest": whole, "modules": parts}
    if stored is not None:
        try:
            stored.write_text(json.dumps(out))
        except OSError:
            pass
    return out


SPECULATORS_PATH = ("speculators/data_generation/",)  # the release's own extraction code (generator or client)


def speculators_fingerprint(sources: WheelSources, companions: tuple[WheelSources, ...] = ()) -> str:
    """The speculators side of a pair's key (a column of the table varies it): the release's own
    extraction code (`speculators/data_generation/`, normalised as above) and its hs-connectors
    release, whose connectors run inside vLLM."""
    parts = [f"{path}={_digest(normalised(sources.read(path)))}" for path in sorted(sources.paths)
             if path.endswith(".py") and path.startswith(SPECULATORS_PATH)]
    parts += [f"{c.dist}=={c.version}" for c in companions]
    return _digest("\n".join(parts))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
