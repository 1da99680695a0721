"""What the scheduler did, step by step, read where the hidden-states connector sees it (an observer, not a shim).

Loaded by vLLM through kv_transfer_config {"kv_connector": "ExampleHiddenStatesConnector",
"kv_connector_module_path": "compat.worker.schedule_observer"} in the workload run only
(compat.cell.server_mode_runs). Its class is the connector that run would load otherwise (vLLM's, or on
a CPU the connector shim's), with two scheduler-side methods wrapped: each calls vLLM's own and
returns its answer untouched; before that, one JSON line is appended to the file named by
COMPAT_SCHEDULE_LOG:
- at start (scheduler role): the block size the connector uses, the scheduler's budget and KV blocks;
- per step (`build_connector_meta`): every request scheduled, with its prompt length and the tokens
  computed before this step and scheduled in it, its prompt digest (how the cell maps it back to the
  prompt it sent), whether vLLM says it resumed from preemption, the queue lengths;
- per finished request (`request_finished`): its preemption count where the release keeps one.
The cell derives chunked steps, prefix hits, preemptions and batch sizes from these lines
(compat.cell.workload), never from what it asked for. Only the vLLM server imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from typing import Any

from compat.worker.cpu_connector_shim import ExampleHiddenStatesConnector as _Connector

LOG_ENV = "COMPAT_SCHEDULE_LOG"
_write_lock = threading.Lock()


def prompt_digest(token_ids) -> str:
    """The same digest compat.cell.workload gives the prompt it sent."""
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids).encode()).hexdigest()[:16]


def _emit(line: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with _write_lock, open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def _scheduler_queues() -> dict[str, int]:
    """The waiting and running queue lengths of the Scheduler that is building this step (found up the stack:
    the connector is given no handle to it)."""
    frame = sys._getframe(2)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "waiting") and hasattr(owner, "running"):
            try:
                return {"waiting": len(owner.waiting), "running": len(owner.running)}
            except TypeError:
                return {}
        frame = frame.f_back
    return {}


def _block_size(connector, vllm_config) -> int | None:
    size = getattr(connector, "_block_size", None)
    return int(size) if size else getattr(getattr(vllm_config, "cache_config", None), "block_size", None)


class ExampleHiddenStatesConnector(_Connector):  # type: ignore[misc, valid-type]
    __doc__ = "vLLM's connector (on a CPU, the connector shim's): its scheduler-side steps written down."

    def __init__(self, vllm_config, role, *args, **kwargs):
        super().__init__(vllm_config, role, *args, **kwargs)
        self._seen: dict[str, dict[str, Any]] = {}
        if "SCHEDULER" not in str(role).upper():
            return
        scheduler = getattr(vllm_config, "scheduler_config", None)
        cache = getattr(vllm_config, "cache_config", None)
        _emit({"kind": "engine", "block_size": _block_size(self, vllm_config),
               "cache_block_size": getattr(cache, "block_size", None),
               "num_blocks": getattr(cache, "num_gpu_blocks", None) or getattr(cache, "num_gpu_blocks_override", None),
               "max_num_batched_tokens": getattr(scheduler, "max_num_batched_tokens", None),
               "max_num_seqs": getattr(scheduler, "max_num_seqs", None),
               "max_model_len": getattr(getattr(vllm_config, "model_config", None), "max_model_len", None),
               "chunked_prefill": getattr(scheduler, "enable_chunked_prefill", None),
               "prefix_caching": getattr(cache, "enable_prefix_caching", None)})

    def build_connector_meta(self, scheduler_output, *args, **kwargs):
        try:
            _emit(self._step(scheduler_output))
        except Exception as exc:  # noqa: BLE001 - an observer never changes what vLLM does
            _emit({"kind": "observer_error", "where": "build_connector_meta", "error": f"{type(exc).__name__}: {exc}"})
        return super().build_connector_meta(scheduler_output, *args, **kwargs)

    def request_finished(self, request, *args, **kwargs):
        try:
            _emit({"kind": "finished", "req": str(request.request_id),
                   "num_preemptions": getattr(request, "num_preemptions", None)})
        except Exception as exc:  # noqa: BLE001
            _emit({"kind": "observer_error", "where": "request_finished", "error": f"{type(exc).__name__}: {exc}"})
        return super().request_finished(request, *args, **kwargs)

    def _step(self, out) -> dict[str, Any]:
        scheduled = dict(getattr(out, "num_scheduled_tokens", {}) or {})
        requests = []
        for new in getattr(out, "scheduled_new_reqs", []) or []:
            prompt = list(getattr(new, "prompt_token_ids", None) or [])
            known = self._seen.get(new.req_id)
            if known is None:
                known = self._seen[new.req_id] = {"prompt_len": len(prompt), "digest": prompt_digest(prompt)}
            requests.append({"req": new.req_id, "new": True, "prompt_len": known["prompt_len"],
                             "digest": known["digest"], "computed": int(new.num_computed_tokens),
                             "scheduled": int(scheduled.get(new.req_id, 0))})
        cached = getattr(out, "scheduled_cached_reqs", None)
        ids = list(getattr(cached, "req_ids", []) or [])
        computed = list(getattr(cached, "num_computed_tokens", []) or [])
        resumed_ids = set(getattr(cached, "resumed_req_ids", None) or ())
        resumed_flags = list(getattr(cached, "resumed_from_preemption", None) or [])
        for i, req in enumerate(ids):
            known = self._seen.get(req, {})
            resumed = req in resumed_ids or (i < len(resumed_flags) and bool(resumed_flags[i]))
            requests.append({"req": req, "new": False, "prompt_len": known.get("prompt_len"),
                             "digest": known.get("digest"), "computed": int(computed[i]) if i < len(computed) else None,
                             "scheduled": int(scheduled.get(req, 0)), "resumed": resumed})
        preempted = getattr(out, "preempted_req_ids", None)
        return {"kind": "step", "requests": requests, "batch": len(scheduled),
                "tokens": int(getattr(out, "total_num_scheduled_tokens", 0) or 0),
                "preempted": sorted(map(str, preempted)) if preempted else [], **_scheduler_queues()}
