"""The cell process's zmq shim (compat.cell.process_shims): contexts made after it give their sockets
linger 0 unless a linger is set, once however often it is applied, and it says so for the record. (Checked
against real pyzmq 27 in a cell venv: LINGER -1 before, 0 after, and destroy() with an unsent message
returns at once; the unit suite's venv has no pyzmq, so a stand-in module carries the same interface.)"""

from __future__ import annotations

import sys
import types


def _stand_in_zmq():
    zmq = types.ModuleType("zmq")
    zmq.LINGER = 17

    class Context:
        def __init__(self, io_threads=1):
            self.sockopts = {}
            self.io_threads = io_threads

    zmq.Context = Context
    return zmq


def test_contexts_made_after_the_shim_default_their_sockets_to_linger_zero(monkeypatch):
    zmq = _stand_in_zmq()
    monkeypatch.setitem(sys.modules, "zmq", zmq)
    from compat.cell.process_shims import zmq_linger_zero

    before = zmq.Context()
    assert zmq.LINGER not in before.sockopts
    shims = zmq_linger_zero()
    zmq_linger_zero()  # applied again by every generator's bind(): one wrapper only
    assert [s["id"] for s in shims] == ["zmq_linger_0"] and "Context.term()" in shims[0]["why"]
    after = zmq.Context(io_threads=2)
    assert after.sockopts == {zmq.LINGER: 0} and after.io_threads == 2
    set_by_vllm = zmq.Context()
    set_by_vllm.sockopts[zmq.LINGER] = 5000
    assert set_by_vllm.sockopts[zmq.LINGER] == 5000


def test_no_zmq_no_shim(monkeypatch):
    monkeypatch.setitem(sys.modules, "zmq", None)  # import zmq raises ImportError
    from compat.cell.process_shims import zmq_linger_zero

    assert zmq_linger_zero() == []
