"""CPU environment shim for vLLM's ExampleHiddenStatesConnector (an env shim, not a vLLM adapter).

Loaded by vLLM through kv_transfer_config {"kv_connector": "ExampleHiddenStatesConnector",
"kv_connector_module_path": "compat.worker.cpu_connector_shim"}. With a GPU it is vLLM's class
unchanged. Without one, the connector's write path (vLLM 0.22+) calls CUDA-only pieces:
`torch.empty_like(..., pin_memory=True)`, `torch.cuda.Stream()`, `torch.cuda.stream(s)`,
`torch.cuda.Event()` with record/query/synchronize and `Stream.wait_event`. On CPU every tensor
is already on the host, so those only order work that is already ordered: the shim swaps them
for host equivalents while the connector's worker-side methods run, and changes nothing else
(the extraction, file names, locks and the write itself stay vLLM's).
Only the vLLM server imports this module.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector as _VllmConnector,
)

SHIM_ID = "cpu_hidden_states_connector"
# Worker-side methods that reach the CUDA pieces in some release (0.22: save_kv_layer and
# wait_for_save; 0.26/0.32: _submit_async_write from get_finished).
_WORKER_METHODS = ("save_kv_layer", "wait_for_save", "get_finished", "_submit_async_write")
_patch_lock = threading.RLock()


class HostEvent:
    """A CUDA event on a machine where every copy is synchronous: always complete."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def query(self) -> bool:
        return True

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass


class HostStream:
    """A CUDA stream on the host: work runs in program order, nothing to wait for."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass

    def record_event(self, event=None):
        return event or HostEvent()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _empty_like_unpinned(original):
    @functools.wraps(original)
    def empty_like(*args, **kwargs):
        kwargs.pop("pin_memory", None)  # no pinned-memory allocator without an accelerator
        return original(*args, **kwargs)

    return empty_like


@contextlib.contextmanager
def host_cuda():
    """torch.cuda's stream/event API and pinned allocation answered on the host, for the block."""
    with _patch_lock:
        saved = {name: getattr(torch.cuda, name, None) for name in ("Stream", "Event", "stream")}
        saved_empty_like = torch.empty_like
        torch.cuda.Stream = HostStream
        torch.cuda.Event = HostEvent
        torch.cuda.stream = lambda stream=None: contextlib.nullcontext(stream)
        torch.empty_like = _empty_like_unpinned(saved_empty_like)
        try:
            yield
        finally:
            torch.empty_like = saved_empty_like
            for name, value in saved.items():
                setattr(torch.cuda, name, value)


def _on_host(method):
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with host_cuda():
            return method(self, *args, **kwargs)

    return run


if torch.cuda.is_available():
    ExampleHiddenStatesConnector = _VllmConnector
else:
    ExampleHiddenStatesConnector = type(
        "ExampleHiddenStatesConnector",
        (_VllmConnector,),
        {name: _on_host(getattr(_VllmConnector, name)) for name in _WORKER_METHODS if hasattr(_VllmConnector, name)}
        | {"__module__": __name__, "__doc__": "vLLM's connector, its worker-side methods run under host_cuda()."},
    )
