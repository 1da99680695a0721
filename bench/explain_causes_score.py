"""`nox -s explain` on tests/unit/corpus/explain_causes/: how many pastes come out right (the root cause
named and whose fault it is, against each thread's truth), for the harness this file is run from.

    python bench/explain_causes_score.py                 # this checkout
    git worktree add /tmp/old REV && PYTHONPATH=/tmp/old python bench/explain_causes_score.py   # an older one

Prints one line per paste (right/wrong, what was read, the truth) and the total. An older harness without
`crash_line` reads a crash-only paste as `none` (it had no reading of crashes).

Right: the root and the cause as the truth says, and where the truth states the paste's setting, that too:
`backend` (the platform read: rocm, cuda, cpu, npu, ...; "none"), `vllm` and `torch` (the versions read),
`candidates` (the registry entries explain shows as candidates only: observed on another backend than the
paste's, or a silent fault a report in words describes). An older harness that reads no setting
(no compat.harness.paste_setting) gets every such paste wrong.
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


SETTING_KEYS = ("backend", "vllm", "torch", "candidates")


def setting(text: str) -> dict:
    """What explain reads of the paste's setting, in the truth files' terms ({} from a harness that reads none)."""
    try:
        from compat.harness.explain import described_faults, explain_paste
        from compat.harness.paste_setting import read_setting
    except ImportError:
        return {}
    read = read_setting(text)
    explanations, _ = explain_paste(text)
    candidates = [e.id for ex in explanations for e, _ in ex.candidates]
    if not explanations:
        candidates = [d.entry.id for d in described_faults(text, read) if d.why_not is None]
    return {"backend": read.backend or "none", "vllm": [v for v, _ in read.vllm], "torch": [v for v, _ in read.torch],
            "candidates": list(dict.fromkeys(candidates))}


def judge(paste: Path) -> tuple[bool, str]:
    """(right, what was read against the truth) for one paste."""
    t = truth(paste)
    text = paste.read_text()
    got = reading(text)
    read = setting(text) if any(k in t for k in SETTING_KEYS) else {}
    wrong = [k for k in SETTING_KEYS if k in t and read.get(k) != t[k]]
    said = "".join(f"; {k} {read.get(k, 'not read')!r}, truth {t[k]!r}" for k in SETTING_KEYS if k in t)
    return got == (t["root"], t["cause"]) and not wrong, f"read {got}, truth {(t['root'], t['cause'])}{said}"


def main() -> int:
    import compat
    right = 0
    pastes = sorted(CORPUS.glob("*.txt"))
    for paste in pastes:
        ok, said = judge(paste)
        right += ok
        print(f"{'right' if ok else 'WRONG'}  {paste.stem}: {said}")
    print(f"{right} of {len(pastes)} right (harness at {Path(compat.__file__).parent.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
