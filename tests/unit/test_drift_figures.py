"""16-bit MoE drift in the layer-id check (compat.cell.reference.set_aside_drift + figures): a token
row off by a routing flip within row_consistency.DRIFT is set aside and the figures the harness
re-checks (compat.harness.evidence.figures_pass) pass; a shifted, zeroed, permuted or other-layer
row still fails, as does drift beyond the rule or in float32. Pure numpy: no torch, no vLLM."""

from __future__ import annotations

import numpy as np
import pytest

from compat.cell import reference, row_consistency
from compat.cell.reference import Tolerance, drift_rule_for, drift_total, figures, set_aside_drift, tolerance_for
from record_factory import figures_pass_json

IDS = [1, 3, 4]  # layer ids checked; the table has indices 0..4
BF16 = tolerance_for("bfloat16")


def tables_for(seed: int = 0, sequences: int = 2, length: int = 30, hidden: int = 64) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((length, hidden)).astype(np.float32) for _ in range(5)] for _ in range(sequences)]


def tokens_for(tables) -> list[list[int]]:
    return [[1000 * s + t for t in range(len(table[0]))] for s, table in enumerate(tables)]  # no shared prefix


def compare_np(got, tables, tolerance: Tolerance) -> dict:
    """compare() on numpy arrays (the cell passes torch tensors; the rows it returns are the same)."""
    rows, problems = [], []
    for s, (layers, table) in enumerate(zip(got, tables)):
        for position, (a, index) in enumerate(zip(layers, IDS)):
            b = table[index]
            scale = float(np.abs(b).max())
            max_abs = float(np.abs(a - b).max())
            row = {"sequence": s, "layer": position, "expected_index": index, "max_abs_error": max_abs,
                   "max_rel_error": max_abs / scale, "scale": scale,
                   "matches_index": index if tolerance.allows(max_abs, scale) else None}
            if not tolerance.allows(max_abs, scale):
                problems.append(f"sequence {s} layer {position}: max abs error {max_abs:.3g} "
                                f"(reference index {index}, scale {scale:.3g})")
            rows.append(row)
    return {"ok": not problems, "problems": problems, "max_abs_error": max(r["max_abs_error"] for r in rows),
            "max_rel_error": max(r["max_rel_error"] for r in rows), "rows": rows}


def served(tables, noise: float = 0.01, seed: int = 1) -> list[list[np.ndarray]]:
    """What a bfloat16 server returns: each id's reference row with rounding-sized noise."""
    rng = np.random.default_rng(seed)
    return [[(table[k] + noise * rng.standard_normal(table[k].shape)).astype(np.float32) for k in IDS]
            for table in tables]


def checked(got, tables, dtype: str = "bfloat16"):
    """What check_layer_ids records: the result after drift, and the figures the harness re-checks."""
    rule = drift_rule_for(dtype)
    tolerance = tolerance_for(dtype)
    result = compare_np(got, tables, tolerance)
    if rule is not None:
        result = set_aside_drift(result, got, tables, tokens_for(tables), tolerance, rule)
    made = figures(result, tolerance, dtype, len(tables) * len(IDS), layers=IDS, drift_rule=rule)
    return result, made


def flip(got, tables, s=0, position=1, t=7, relative=0.25, seed=3):
    """A routing flip: token t of (s, id at position) moved by `relative` of its norm, still its own row."""
    rng = np.random.default_rng(seed)
    want = tables[s][IDS[position]][t]
    step = rng.standard_normal(want.shape)
    got[s][position][t] = want + relative * np.linalg.norm(want) * step / np.linalg.norm(step)
    return got


def test_a_drifted_token_within_the_rule_is_set_aside_and_the_harness_believes_it():
    tables = tables_for()
    got = flip(served(tables), tables)
    plain = compare_np(got, tables, BF16)
    assert not plain["ok"], "the flip must exceed the bfloat16 tolerance, or this test proves nothing"
    result, made = checked(got, tables)
    assert result["ok"] and result["problems"] == []
    row = next(r for r in made["rows"] if r["sequence"] == 0 and r["layer"] == IDS[1])
    assert row["drift"]["drifted"] == 1 and row["drift"]["tokens"] == 30
    assert 0.2 < row["drift"]["max_relative"] <= 0.5 and row["drift"]["max_separation"] < 0.9
    assert row["matches_index"] == IDS[1]
    assert made["drift_rule"] == {"relative": 0.5, "separation": 0.9, "fraction": 0.05}
    assert all(r["drift"]["drifted"] == 0 for r in made["rows"] if r is not row)
    within = f"{len(made['rows'])} row(s) within max_abs_error <= 0.05 + 0.02 * scale"
    assert figures_pass_json(made, "llama") == (True, within)


@pytest.mark.parametrize("wrong", ["shifted", "zeroed", "permuted", "other_layer"])
def test_a_wrong_row_is_never_drift(wrong):
    tables = tables_for()
    got = served(tables)
    if wrong == "shifted":  # id at position 1 of sequence 0, token 7 carries token 8's row
        got[0][1][7] = tables[0][IDS[1]][8]
    elif wrong == "zeroed":
        got[0][1][7] = 0.0
    elif wrong == "permuted":  # the two sequences' rows swapped
        got = [got[1], got[0]]
    else:  # id 3 returned the row of reference index 2
        got[0][1] = tables[0][IDS[1] - 1].copy()
    result, made = checked(got, tables)
    assert not result["ok"]
    passed, why = figures_pass_json(made, "llama")
    assert passed is False, why
    assert all((r["drift"]["drifted"] == 0) for r in made["rows"])


def test_a_wrong_token_beside_a_drifted_one_still_fails():
    tables = tables_for()
    got = flip(served(tables), tables)
    got[0][1][20] = 0.0
    result, made = checked(got, tables)
    assert not result["ok"] and figures_pass_json(made, "llama")[0] is False


def test_drift_beyond_the_relative_bound_is_not_set_aside():
    tables = tables_for()
    got = flip(served(tables), tables, relative=0.7)  # still nearest its own row, but too far off
    result, made = checked(got, tables)
    assert not result["ok"] and figures_pass_json(made, "llama")[0] is False


def test_too_many_drifted_tokens_are_no_batch_noise():
    tables = tables_for()
    got = served(tables)
    for t in range(12):  # 12 of 180 token rows > 5%
        flip(got, tables, s=t % 2, position=t % 3, t=t, seed=t)
    result, made = checked(got, tables)
    drifted, tokens, problem = drift_total(result["rows"], drift_rule_for("bfloat16"))
    assert drifted == 12 and tokens == 180 and "not batch noise" in problem
    passed, why = figures_pass_json(made, "llama")
    assert passed is False and "more than 0.05" in why


def test_float32_has_no_drift():
    tables = tables_for()
    assert drift_rule_for("float32") is None
    got = flip(served(tables, noise=1e-6), tables)
    result, made = checked(got, tables, dtype="float32")
    assert not result["ok"] and "drift_rule" not in made and figures_pass_json(made, "llama")[0] is False
    with pytest.raises(ValueError, match="16-bit runs only"):
        figures(result, tolerance_for("float32"), "float32", 6, layers=IDS,
                drift_rule=row_consistency.DRIFT["bfloat16"])


def test_the_rule_applied_is_row_consistencys(monkeypatch):
    """A tighter rule (here relative 0.1) no longer sets the 0.25 flip aside: the rule decides."""
    tables = tables_for()
    got = flip(served(tables), tables)
    monkeypatch.setitem(row_consistency.DRIFT, "bfloat16", row_consistency.Drift(0.1, 0.9, 0.05))
    result, made = checked(got, tables)
    assert not result["ok"] and made["drift_rule"]["relative"] == 0.1 and figures_pass_json(made, "llama")[0] is False
    assert reference.drift_rule_for("bfloat16").relative == 0.1


def correlated_tables(seed: int = 5, sequences: int = 2, length: int = 30, hidden: int = 64):
    """Hidden states as a residual stream makes them: neighbouring tokens and layers close, so a
    wrong row can sit within the relative bound and only separation tells it apart."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sequences):
        base = rng.standard_normal(hidden) + 0.15 * rng.standard_normal((length, hidden))
        layers = [base]
        for _ in range(4):
            layers.append(layers[-1] + 0.1 * rng.standard_normal((length, hidden)))
        out.append([x.astype(np.float32) for x in layers])
    return out


@pytest.mark.parametrize("wrong", ["shifted", "other_layer"])
def test_a_wrong_row_within_the_relative_bound_is_caught_by_separation(wrong):
    tables = correlated_tables()
    got = served(tables)
    if wrong == "shifted":
        got[0][1][7] = tables[0][IDS[1]][8]
        want, bad = tables[0][IDS[1]][7], got[0][1][7]
    else:  # token 7 of id 3 carries reference index 2's row
        got[0][1][7] = tables[0][IDS[1] - 1][7]
        want, bad = tables[0][IDS[1]][7], got[0][1][7]
    relative = np.linalg.norm(bad - want) / np.linalg.norm(want)
    assert relative <= 0.5, "within the relative bound: only separation can catch it"
    assert not compare_np(got, tables, BF16)["ok"]
    result, made = checked(got, tables)
    assert not result["ok"] and figures_pass_json(made, "llama")[0] is False
