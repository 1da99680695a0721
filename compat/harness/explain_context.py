"""The text a paste shows around each exception, for registry entries whose message alone is too generic.

A user symptom with a `context` (compat.shared.breakages.Symptom) is matched against this text only:
where the exception ends a traceback, the innermost frame it shows and the source lines under it (the
place that raised it, not an outer caller that happens to name the right words); a one-line error with
no frames, the text leading to it since the exception before. So `RuntimeError: Boolean value of Tensor
...` counts as speculators' check of its captured states only where the frame or the prose around it is
that check, never for the same message raised in vLLM's linear layer or a training script.
"""

from __future__ import annotations

import re
from typing import Sequence

# A frame line in any of the shapes pastes carry: CPython's, IPython's, pytest's location line.
_FRAME_LINE = re.compile(r'File "[^"]+", line \d+|\bFile\s+[~/]\S+\.py\b|\S+\.py:\d+:')


def surroundings(text: str, line: int, previous: int = 0) -> str:
    """The context of the exception at 1-based input `line`, the exception before it standing at `previous`
    (0: none): from the innermost frame line up to the exception, or all of that stretch without frames."""
    stretch = text.splitlines()[previous:line]
    frames = [i for i, s in enumerate(stretch) if _FRAME_LINE.search(s)]
    return "\n".join(stretch[frames[-1]:] if frames else stretch)


def contexts(text: str, lines: Sequence[int]) -> list[str | None]:
    """The context of each exception standing at the given input lines (0: not from this text, no context)."""
    placed = sorted({n for n in lines if n > 0})
    out: list[str | None] = []
    for n in lines:
        if n <= 0:
            out.append(None)
            continue
        before = [p for p in placed if p < n]
        out.append(surroundings(text, n, before[-1] if before else 0))
    return out
