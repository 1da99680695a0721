"""`nox -s explain` on tests/unit/corpus/explain_causes/: how many pastes come out right (the root cause
named and whose fault it is, against each thread's truth), for the harness this file is run from.

    python bench/explain_causes_score.py                 # this checkout
    git worktree add /tmp/old REV && PYTHONPATH=/tmp/old python bench/explain_causes_score.py   # an older one

Prints one line per paste (right/wrong, what was read, the truth) and the total. An older harness without
`crash_line` reads a crash-only paste as `none` (it had no reading of crashes).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "unit" / "corpus" / "explain_causes"


def truth(paste: Path) -> dict:
    return tomllib.loads(paste.with_suffix(".truth.toml").read_text())


def reading(text: str) -> tuple[str, object]:
    """(root, cause) as explain gives them: the last exception that does not relay another (tests/unit/
    test_explain_causes.py holds each paste to it)."""
    from compat.harness.explain import explain_paste
    try:
        from compat.shared.tracebacks import crash_line
    except ImportError:
        def crash_line(_text: str) -> None:
            return None
    explanations, _ = explain_paste(text)
    if not explanations:
        return ("crash" if crash_line(text) else "none"), False
    roots = [ex for ex in explanations if not ex.found.wrapper]
    if not roots:
        return "relay", False
    return roots[-1].found.type, (roots[-1].cause.cause if roots[-1].cause else False)


def main() -> int:
    import compat
    right = 0
    pastes = sorted(CORPUS.glob("*.txt"))
    for paste in pastes:
        t = truth(paste)
        got = reading(paste.read_text())
        ok = got == (t["root"], t["cause"])
        right += ok
        print(f"{'right' if ok else 'WRONG'}  {paste.stem}: read {got}, truth {(t['root'], t['cause'])}")
    print(f"{right} of {len(pastes)} right (harness at {Path(compat.__file__).parent.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
