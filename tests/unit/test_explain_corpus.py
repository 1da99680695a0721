"""`nox -s explain` on real pastes from public issues (tests/unit/corpus/explain/): every paste has a
sidecar NAME.truth.toml written before the matcher was changed (source URL, repository, issue, the
versions the issue states, and `known`: the registry entry it is, or false). At least 90 % must come
out right and no paste whose truth is `known = false` may be called known.

Right: truth `known = "<id>"` and explain exits 0 naming `known breakage <id>:`; truth `known = false`
and explain names no known breakage (exit 1, or 2 when the paste holds no exception).

Run as a script to print the table: python tests/unit/test_explain_corpus.py
"""

from __future__ import annotations

import io
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from compat.harness.explain import main

CORPUS = Path(__file__).parent / "corpus" / "explain"
PASTES = sorted(CORPUS.glob("*.txt"))


def truth(paste: Path) -> dict:
    return tomllib.loads(paste.with_suffix(".truth.toml").read_text())


def answer(paste: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(paste)], stdin=io.StringIO(""))
        except SystemExit as exc:  # a tool that exits instead of returning
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue() + err.getvalue()


def judge(paste: Path) -> tuple[bool, str]:
    """(right, why) for one paste."""
    want = truth(paste)["known"]
    code, text = answer(paste)
    named = sorted({line.split("known breakage ", 1)[1].split(":", 1)[0]
                    for line in text.splitlines() if line.strip().startswith("known breakage ")})
    if want:
        ok = code == 0 and want in named
        return ok, f"want {want}, exit {code}, named {named or 'none'}"
    ok = not named and code in (1, 2)
    return ok, f"want not known, exit {code}, named {named or 'none'}"


def score() -> tuple[int, int, list[str], list[str]]:
    right, wrong, false_known = 0, [], []
    for paste in PASTES:
        ok, why = judge(paste)
        right += ok
        if not ok:
            wrong.append(f"{paste.stem}: {why}")
            if not truth(paste)["known"]:
                false_known.append(paste.stem)
    return right, len(PASTES), wrong, false_known


def test_every_paste_has_its_truth_and_source():
    assert len(PASTES) >= 30
    for paste in PASTES:
        t = truth(paste)
        assert t["source"].startswith("https://github.com/"), paste
        assert t["repository"] and isinstance(t["issue"], int), paste
        assert "versions" in t and "known" in t, paste


def test_the_corpus_comes_out_right_and_never_falsely_known():
    right, total, wrong, false_known = score()
    assert not false_known, false_known
    assert right / total >= 0.90, f"{right}/{total} right; wrong:\n" + "\n".join(wrong)


@pytest.mark.parametrize("paste", [p for p in PASTES if truth(p)["known"]], ids=lambda p: p.stem)
def test_each_known_paste_names_its_entry(paste):
    ok, why = judge(paste)
    assert ok, why


if __name__ == "__main__":
    right, total, wrong, false_known = score()
    for paste in PASTES:
        ok, why = judge(paste)
        print(f"{'ok   ' if ok else 'WRONG'} {paste.stem:22} {why}")
    print(f"\n{right}/{total} right ({100 * right / total:.0f} %), false known among negatives: {len(false_known)}")
