"""Where a probe run's time goes: each engine or server start, client run, reference and teardown, timed as it
happens (compat.shared.records.StepKind); the plugin writes the ledger beside the probes."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from compat.shared.records import StepKind

LEDGER: list[dict[str, Any]] = []


@contextmanager
def timed(kind: StepKind, what: str) -> Iterator[None]:
    """Time the block as one step, also when it raises (a failed start took its time too)."""
    started, began = time.monotonic(), time.time()
    try:
        yield
    finally:
        LEDGER.append({"step": kind.value, "what": what, "seconds": round(time.monotonic() - started, 2),
                       "started": began})
