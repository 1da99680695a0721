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
(compat.cell.workload), never from what it asked for; compat.shared.schedule_steps reads the scheduler's
outputs. Only the vLLM server imports this module.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from compat.shared.schedule_steps import StepReader, engine_line, finished_line, queues_of
from compat.worker.cpu_connector_shim import ExampleHiddenStatesConnector as _Connector

LOG_ENV = "COMPAT_SCHEDULE_LOG"
_write_lock = threading.Lock()


def _emit(line: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with _write_lock, open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def _scheduler_queues() -> dict[str, int]:
    """The queues of the Scheduler that is building this step (found up the stack: the connector is given no handle
    to it)."""
    frame = sys._getframe(2)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "waiting") and hasattr(owner, "running"):
            return queues_of(owner)
        frame = frame.f_back
    return {}


class ExampleHiddenStatesConnector(_Connector):  # type: ignore[misc, valid-type]
    __doc__ = "vLLM's connector (on a CPU, the connector shim's): its scheduler-side steps written down."

    def __init__(self, vllm_config, role, *args, **kwargs):
        super().__init__(vllm_config, role, *args, **kwargs)
        self._reader = StepReader()
        if "SCHEDULER" in str(role).upper():
            size = getattr(self, "_block_size", None)  # the hidden-states group's own, where the release has one
            _emit(engine_line(vllm_config, int(size) if size else None))

    def build_connector_meta(self, scheduler_output, *args, **kwargs):
        try:
            _emit(self._reader.step_line(scheduler_output, _scheduler_queues()))
        except Exception as exc:  # noqa: BLE001 - an observer never changes what vLLM does
            _emit({"kind": "observer_error", "where": "build_connector_meta", "error": f"{type(exc).__name__}: {exc}"})
        return super().build_connector_meta(scheduler_output, *args, **kwargs)

    def request_finished(self, request, *args, **kwargs):
        try:
            _emit(finished_line(request))
        except Exception as exc:  # noqa: BLE001
            _emit({"kind": "observer_error", "where": "request_finished", "error": f"{type(exc).__name__}: {exc}"})
        return super().request_finished(request, *args, **kwargs)
