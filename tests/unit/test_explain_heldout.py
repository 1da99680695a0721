"""`nox -s explain` on held-out pastes (tests/unit/corpus/explain_heldout/): public issues this project's
tests never saw while explain was written, each with its truth committed before explain first ran on it.
They must come out right in the same proportion as the corpus (>= 90 %) with no false known.

Run as a script to print the table: python tests/unit/test_explain_heldout.py
"""

from __future__ import annotations

from pathlib import Path

from test_explain_corpus import CORPUS, judge, truth

HELD_OUT = Path(__file__).parent / "corpus" / "explain_heldout"
PASTES = sorted(HELD_OUT.glob("*.txt"))


def test_held_out_pastes_are_new_and_have_their_truth():
    assert len(PASTES) >= 15
    seen = {truth(p)["source"] for p in CORPUS.glob("*.txt")}
    for paste in PASTES:
        t = truth(paste)
        assert t["source"].startswith("https://github.com/"), paste
        assert t["source"] not in seen, f"{paste.stem} is in the corpus explain was written against"
        assert "versions" in t and "known" in t, paste


def test_held_out_pastes_come_out_right_and_never_falsely_known():
    results = {paste.stem: judge(paste) for paste in PASTES}
    wrong = [f"{name}: {why}" for name, (ok, why) in results.items() if not ok]
    false_known = [p.stem for p in PASTES if not truth(p)["known"] and not results[p.stem][0]]
    assert not false_known, false_known
    assert (len(PASTES) - len(wrong)) / len(PASTES) >= 0.90, "\n".join(wrong)


if __name__ == "__main__":
    right = 0
    for paste in PASTES:
        ok, why = judge(paste)
        right += ok
        print(f"{'ok   ' if ok else 'WRONG'} {paste.stem:24} {why}")
    print(f"\n{right}/{len(PASTES)} right ({100 * right / len(PASTES):.0f} %)")
