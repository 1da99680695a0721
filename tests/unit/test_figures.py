"""The figures a data check records (compat.cell.reference.figures) and how the plugin stores them
(detail["figures"] lifted to the record's `figures`, the adapted run's to `with_compat_figures`)."""

import json

import numpy as np

from compat.cell import pytest_plugin
from compat.cell.reference import TOLERANCE_RULE, Tolerance, figures
from record_factory import figures_pass_json

BF16 = Tolerance(atol=0.05, rtol=0.02)


def compare_row(sequence, layer, expected_index, max_abs, scale, matches, **extra):
    """A row as compare returns it (numpy scalars, as a tensor's .max() would give after float())."""
    return {"sequence": sequence, "layer": layer, "expected_index": expected_index,
            "shape": [4, 8], "expected_shape": [4, 8], "max_abs_error": max_abs,
            "max_rel_error": None if max_abs is None else max_abs / scale, "scale": scale,
            "matches_index": matches, **extra}


ROWS = [
    compare_row(0, 0, 2, np.float64(2.5e-6), np.float64(3.1), 2),
    compare_row(0, 1, 4, 0.31, 2.0, None),  # off by a wrong row's margin
    compare_row(1, 0, 2, 1e-7, 4.0, 2),
    {**compare_row(1, 1, 4, None, None, None), "shape": [3, 8]},  # a shape mismatch
]


def within(row, tolerance):
    """The harness's rule, recomputed from the figures alone (null: not within)."""
    return (row["max_abs_error"] is not None and row["scale"] is not None
            and row["max_abs_error"] <= tolerance["atol"] + tolerance["rtol"] * row["scale"])


def test_figures_name_the_requested_layer_and_the_reference_index():
    out = figures(ROWS, Tolerance(), "float32", rows_expected=6, layers=[1, 3])
    assert out["dtype"] == "float32" and out["rows_expected"] == 6
    assert out["tolerance"] == {"atol": 1e-4, "rtol": 1e-4, "rule": TOLERANCE_RULE}
    assert [(r["sequence"], r["layer"], r["reference_index"]) for r in out["rows"]] == \
        [(0, 1, 2), (0, 3, 4), (1, 1, 2), (1, 3, 4)]
    assert out["rows"][0] == {"sequence": 0, "layer": 1, "reference_index": 2, "max_abs_error": 2.5e-6,
                              "scale": 3.1, "allowed": 1e-4 + 1e-4 * 3.1, "matches_index": 2}
    assert out["rows"][3]["allowed"] is None  # no scale: nothing allowed
    assert (out["rows"][3]["max_abs_error"], out["rows"][3]["scale"], out["rows"][3]["matches_index"]) == \
        (None, None, None)


def test_without_layers_a_row_names_its_position():
    out = figures({"rows": ROWS[:1], "ok": True}, {"atol": 0.05, "rtol": 0.02}, "bfloat16", rows_expected=1)
    assert out["rows"][0]["layer"] == 0 and out["tolerance"]["atol"] == 0.05 and out["dtype"] == "bfloat16"


def test_the_recomputed_rule_agrees_with_the_tolerance_the_probe_applied():
    for tolerance in (Tolerance(), BF16):
        out = json.loads(json.dumps(figures(ROWS, tolerance, "float32", rows_expected=4, layers=[1, 3])))
        for row, raw in zip(out["rows"], ROWS):
            decided = raw["max_abs_error"] is not None and tolerance.allows(raw["max_abs_error"], raw["scale"])
            assert within(row, out["tolerance"]) == decided


def test_figures_are_plain_json_and_survive_the_round_trip_exactly():
    out = figures(ROWS, Tolerance(), "float32", rows_expected=np.int64(4), layers=[np.int64(1), np.int64(3)])
    text = json.dumps(out)  # numpy scalars would raise here
    assert json.loads(text) == out
    assert all(type(r["max_abs_error"]) is float for r in out["rows"][:3])


def test_rows_of_several_cases_keep_their_case():
    rows = [{**ROWS[0], "case": "batch"}, {**ROWS[2], "sequence": 3, "case": "repeated"}]
    out = figures(rows, Tolerance(), "float32", rows_expected=12, layers=[1, 3])
    assert [(r["sequence"], r["case"]) for r in out["rows"]] == [(0, "batch"), (3, "repeated")]


# -- the plugin's storage, on plain records -----------------------------------------------------
def record(status="ok", detail=None, **extra):
    base = {"id": "hidden_states_match_reference", "case": "batch", "status": status, "with_compat": None,
            "advisory": False, "error": None, "reason": None, "seconds": 1.0, "detail": detail or {},
            "figures": None, "with_compat_figures": None}
    return {**base, **extra}


RAW_FIGURES = figures(ROWS[:1], Tolerance(), "float32", rows_expected=1, layers=[1])
ADAPTED_FIGURES = figures(ROWS[2:3], Tolerance(), "float32", rows_expected=1, layers=[1])


def test_the_lift_moves_the_figures_out_of_detail():
    raw = pytest_plugin._lift_figures(record(detail={"max_abs_error": 2.5e-6, "figures": RAW_FIGURES}))
    assert raw["figures"] == RAW_FIGURES and "figures" not in raw["detail"]
    assert raw["detail"] == {"max_abs_error": 2.5e-6} and raw["with_compat_figures"] is None


def test_a_record_without_figures_keeps_null():
    bare = {k: v for k, v in record(detail={"seen": 1}).items() if k not in ("figures", "with_compat_figures")}
    lifted = pytest_plugin._lift_figures(bare)
    assert lifted["figures"] is None and lifted["with_compat_figures"] is None and lifted["detail"] == {"seen": 1}


def test_the_adapted_run_figures_go_to_with_compat_figures():
    raw = pytest_plugin._lift_figures(record(status="broken", detail={"figures": RAW_FIGURES}))
    records = [raw]
    adapted = record(detail={"max_abs_error": 1e-7, "figures": ADAPTED_FIGURES})
    merged = pytest_plugin._merge_with_compat(records, adapted)
    assert merged is raw and raw["with_compat"] == "ok"
    assert raw["figures"] == RAW_FIGURES and raw["with_compat_figures"] == ADAPTED_FIGURES
    assert raw["detail"]["with_compat"]["detail"] == {"max_abs_error": 1e-7}  # stored once


def test_an_adapted_run_without_a_raw_record_does_not_lend_it_its_figures():
    records = []
    merged = pytest_plugin._merge_with_compat(records, record(detail={"figures": ADAPTED_FIGURES}))
    assert records == [merged] and merged["status"] == "error"
    assert merged["figures"] is None and merged["with_compat_figures"] == ADAPTED_FIGURES


def test_the_other_suites_na_adapted_run_leaves_the_raw_figures_alone():
    raw = pytest_plugin._lift_figures(record(detail={"figures": RAW_FIGURES}))
    assert pytest_plugin._merge_with_compat([raw], record(status="n/a")) is None
    assert raw["figures"] == RAW_FIGURES and raw["with_compat_figures"] is None


PROBES = '''
import pytest

@pytest.mark.probe("data")
@pytest.mark.parametrize("compat_mode", ["raw", "with_compat"])
def test_data(compat_mode, probe_detail):
    probe_detail["max_abs_error"] = 0.5
    probe_detail["figures"] = {"dtype": "float32", "mode": compat_mode}

@pytest.mark.probe("plain")
def test_plain(probe_detail):
    probe_detail["seen"] = 1
'''


def test_the_result_file_carries_figures_at_the_top_level(pytester):
    pytester.makepyfile(test_probes=PROBES)
    out = pytester.path / "result.json"
    pytester.runpytest_subprocess("-p", "compat.cell.pytest_plugin", f"--compat-result={out}",
                                  "-p", "no:cacheprovider")
    probes = {p["id"]: p for p in json.loads(out.read_text())["probes"]}
    data, plain = probes["data"], probes["plain"]
    assert data["figures"] == {"dtype": "float32", "mode": "raw"}
    assert data["with_compat_figures"] == {"dtype": "float32", "mode": "with_compat"}
    assert "figures" not in data["detail"] and "figures" not in data["detail"]["with_compat"]["detail"]
    assert data["detail"]["max_abs_error"] == 0.5
    assert (plain["figures"], plain["with_compat_figures"], plain["detail"]) == (None, None, {"seen": 1})


def test_the_harness_reads_the_figures_as_the_probe_decided():
    """What compat.shared.records validates and compat.harness.evidence recomputes, on these figures."""
    from compat.shared.records import Figures, parse

    passing = figures([ROWS[0], ROWS[2]], Tolerance(), "float32", rows_expected=2, layers=[1, 3])
    failing = figures(ROWS, Tolerance(), "float32", rows_expected=4, layers=[1, 3])
    short = figures([ROWS[0]], Tolerance(), "float32", rows_expected=2, layers=[1, 3])
    for made in (passing, failing, short):
        parse(Figures, json.loads(json.dumps(made)))
    assert figures_pass_json(passing, "llama")[0] is True
    assert figures_pass_json(failing, "llama")[0] is False and figures_pass_json(short, "llama")[0] is False
