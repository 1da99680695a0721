"""compat.cell.reference.compare, the check every data probe runs in its cell, on torch tensors: a row off by more
than the tolerance, a missing layer, a shape mismatch and a missing sequence are each a problem; right rows are none.
Needs torch: run in a cell venv (`nox -s tests` does)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs torch: run tests/cell with a cell venv's interpreter")

from compat.cell.reference import compare  # noqa: E402
from compat.shared.tolerances import tolerance_for  # noqa: E402

FLOAT32 = tolerance_for("float32")


def tables(sequences: int = 2, indexes: int = 4, tokens: int = 5, hidden: int = 8) -> list[list]:
    generator = torch.Generator().manual_seed(0)
    return [[torch.randn(tokens, hidden, generator=generator) * (1 + i) for i in range(indexes)]
            for _ in range(sequences)]


def test_right_rows_are_no_problem_and_match_their_own_index():
    reference = tables()
    result = compare([[t[1], t[3]] for t in reference], reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert result["ok"] and result["problems"] == [] and result["rows_compared"] == 4
    assert {(r["expected_index"], r["matches_index"]) for r in result["rows"]} == {(1, 1), (3, 3)}


def test_a_row_past_the_tolerance_is_a_problem_and_names_where_it_matches():
    reference = tables()
    returned = [[t[1], t[3]] for t in reference]
    returned[1][0] = returned[1][0] + 0.01  # 0.01 against float32's 1e-4 + 1e-4 x scale
    result = compare(returned, reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert not result["ok"] and result["problems"] == [result["problems"][0]]
    assert result["problems"][0].startswith("sequence 1 layer 0: max abs error")
    returned = [[t[2], t[3]] for t in reference]  # the neighbouring layer where layer 1 was asked
    result = compare(returned, reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert not result["ok"] and {r["matches_index"] for r in result["rows"] if r["layer"] == 0} == {2}


def test_a_missing_layer_a_shape_mismatch_and_a_missing_sequence_are_problems():
    reference = tables()
    missing_layer = compare([[t[1]] for t in reference], reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert not missing_layer["ok"] and "1 layers returned, 2 requested" in missing_layer["problems"][0]
    short = [[t[1][:-1], t[3]] for t in reference]
    shape = compare(short, reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert not shape["ok"] and "shape" in shape["problems"][0]
    one = compare([[reference[0][1], reference[0][3]]], reference, expected_index=[1, 3], tolerance=FLOAT32)
    assert not one["ok"] and "1 sequences returned, 2 sent" in one["problems"]
