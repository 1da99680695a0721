"""The documents the store keeps beside cell runs (compat.harness.documents): the Kimi record and the
support tables, typed and decided again from their evidence, and scoped to the folder a report names.

Each test starts from committed, genuine documents (reports/gpu-h200/*/kimi.json, the published 0.8.1
row and its records), copies them into tmp_path, edits them one way, and reports the folder through
`python -m compat.report_cli --results DIR` (its exit status and compat.json)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from compat.harness.documents import DocumentError, decide_kimi, load_kimi
from compat.harness.report_cli import main as report_main
from compat.shared.results import write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "reports" / "gpu-h200" / "kimi-scale-mla-tp1" / "kimi.json"  # failed: kimi_batch_consistency broken
PUBLISHED = ROOT / "published" / "results"
ROW = PUBLISHED / "support" / "speculators-0.8.1.json"
JAN, MAR = 1767225600, 1772323200  # 2026-01-01 and 2026-03-01, 00:00 UTC


def genuine_kimi() -> dict:
    return json.loads(KIMI.read_text())


def genuine_row() -> dict:
    return json.loads(ROW.read_text())


def record_name(vllm: str) -> str:
    return f"vllm-{vllm}__speculators-0.8.1__cpu__variants-none.json.gz"  # as published/results keeps it


def folder(path: Path, kimi: dict | None = None, row: dict | None = None, records: tuple[str, ...] = ("0.28.0",),
           mtime: int = JAN) -> Path:
    """A results folder: genuine records of the 0.8.1 row (by vLLM release), and the documents given."""
    path.mkdir(parents=True)
    written = []
    for vllm in records:
        shutil.copyfile(PUBLISHED / record_name(vllm), path / record_name(vllm))
        written.append(path / record_name(vllm))
    if kimi is not None:
        write_json_atomic(path / "kimi.json", kimi)
        written.append(path / "kimi.json")
    if row is not None:
        write_json_atomic(path / "support" / ROW.name, row)
        written.append(path / "support" / ROW.name)
    for p in written:
        os.utime(p, (mtime, mtime))
    return path


def report(out: Path, results: Path, *args: str) -> tuple[int, dict]:
    code = report_main(["--results", str(results), "--out", str(out), *args])
    return code, json.loads((out / "compat.json").read_text())


def cell_of(rep: dict, vllm: str) -> dict:
    return next(c for c in rep["support"][0]["cells"] if c["vllm"] == vllm)


# ---- the Kimi record: its status from its checks --------------------------------------------------

def test_a_kimi_record_that_says_ok_beside_its_broken_check_reads_error_with_cause_record(tmp_path, capsys):
    code, control = report(tmp_path / "c", folder(tmp_path / "genuine", kimi=genuine_kimi()))
    assert control["kimi"]["status"] == "failed" and "stored_status" not in control["kimi"] and code == 0
    edited = dict(genuine_kimi(), status="ok", reason=None)  # its kimi_batch_consistency check still broken
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", kimi=edited))
    kimi = rep["kimi"]
    assert (kimi["status"], kimi["stored_status"], kimi["cause"]) == ("error", "ok", "record")
    assert "its status says ok, its checks give failed (kimi_batch_consistency: broken)" in kimi["reason"]
    assert code == 2  # the cell passes; the contradicted document does not
    assert "contradiction: kimi result" in capsys.readouterr().err


def test_a_kimi_record_whose_check_is_edited_to_broken_under_its_ok_no_longer_passes(tmp_path):
    """The other way round: a genuine record with its failing check made ok reads ok (the control);
    then one of its passing checks broken again, while the status still says ok."""
    passing = genuine_kimi()
    for check in passing["probes"]:
        check.update(status="ok", error=None)
    passing.update(status="ok", reason=None)
    assert decide_kimi(load_kimi(passing)).status.value == "ok"
    passing["probes"][2]["status"] = "broken"
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", kimi=passing))
    assert rep["kimi"]["status"] == "error" and code == 2


def test_a_kimi_record_that_says_ok_with_no_check_at_all_reads_error(tmp_path):
    edited = dict(genuine_kimi(), status="ok", reason=None)
    del edited["probes"]
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", kimi=edited))
    assert rep["kimi"]["status"] == "error" and rep["kimi"]["cause"] == "record" and code == 2


def test_a_kimi_record_of_the_wrong_shape_is_refused_naming_the_file_and_field(tmp_path, capsys):
    edited = genuine_kimi()
    edited["probes"][4]["status"] = "passed"
    try:
        load_kimi(edited, "kimi.json")
    except DocumentError as exc:
        assert "kimi.json: probes[4].status: 'passed' is not one of ok, broken" in str(exc)
    else:
        raise AssertionError("a check status outside ProbeStatus was accepted")
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", kimi=edited))
    assert code == 3 and "kimi" not in rep and "probes[4].status" in capsys.readouterr().err


# ---- the support table: each cell from its cell record --------------------------------------------

ROW_RECORDS = ("0.22.0", "0.23.0", "0.25.0", "0.28.0")
PASSING = ("0.22.0", "0.25.0", "0.28.0")  # records that pass the gate: a report of them alone exits 0


def test_a_support_cell_saying_works_beside_its_incompatible_record_reads_what_the_record_decides(tmp_path, capsys):
    code_control, control = report(tmp_path / "c", folder(tmp_path / "genuine", row=genuine_row(),
                                                          records=ROW_RECORDS))
    assert cell_of(control, "0.23.0")["outcome"] == "broken" and "stored_verdict" not in cell_of(control, "0.23.0")
    assert "contradiction" not in capsys.readouterr().err
    row = genuine_row()
    cell = next(c for c in row["cells"] if c["vllm"] == "0.23.0")
    cell.update(outcome="works", verdict="compatible", fix="", nearest="")
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", row=row, records=ROW_RECORDS))
    shown = cell_of(rep, "0.23.0")
    assert (shown["outcome"], shown["verdict"], shown["stored_verdict"]) == ("broken", "incompatible", "compatible")
    assert "its record vllm-0.23.0__speculators-0.8.1__cpu__variants-none decides incompatible" in shown["notes"][0]
    assert code == code_control == 2  # 0.23.0's own record: a with-compat run unsupported on CPU
    assert "contradiction: support table vllm 0.8.1: vLLM 0.23.0" in capsys.readouterr().err


def test_an_inferred_support_cell_reads_its_source_s_verdict(tmp_path):
    row = genuine_row()
    cell = next(c for c in row["cells"] if c["vllm"] == "0.22.1")  # inferred from 0.22.0: with the adapters
    cell.update(outcome="works", verdict="compatible")
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", row=row, records=PASSING))
    shown = cell_of(rep, "0.22.1")
    assert (shown["outcome"], shown["verdict"], shown["stored_outcome"]) == ("adapters", "compatible-with-compat",
                                                                             "works")
    assert code == 2


def test_a_cell_inferred_from_another_row_reads_that_pair_s_record_in_the_folder(tmp_path):
    """speculators 0.4.0's row is inferred from 0.4.0.1's cells, whose row is not in the folder: the
    source's record is (vllm-0.12.0__speculators-0.4.0.1__cpu.json), and decides the inferred cell."""
    row = json.loads((PUBLISHED / "support" / "speculators-0.4.0.json").read_text())
    cell = next(c for c in row["cells"] if c["vllm"] == "0.12.0")
    assert cell["source"] == ["0.12.0", "0.4.0.1"] and cell["outcome"] == "adapters"
    cell.update(outcome="works", verdict="compatible")
    path = tmp_path / "edited"
    write_json_atomic(path / "support" / "speculators-0.4.0.json", row)
    shutil.copyfile(PUBLISHED / "vllm-0.12.0__speculators-0.4.0.1__cpu.json.gz",
                    path / "vllm-0.12.0__speculators-0.4.0.1__cpu.json.gz")
    code, rep = report(tmp_path / "e", path)
    shown = next(c for c in rep["support"][0]["cells"] if c["vllm"] == "0.12.0")
    assert (shown["outcome"], shown["verdict"]) == ("adapters", "compatible-with-compat") and code == 2


def test_a_support_cell_whose_outcome_its_own_verdict_cannot_give_reads_untested(tmp_path):
    """No record needed: a resolver cell (pins conflict, install-error) edited to work."""
    row = genuine_row()
    cell = next(c for c in row["cells"] if c["vllm"] == "0.11.0")
    assert cell["provenance"] == "resolver"
    cell["outcome"] = "works"
    code, rep = report(tmp_path / "e", folder(tmp_path / "edited", row=row, records=PASSING))
    shown = cell_of(rep, "0.11.0")
    assert (shown["outcome"], shown["verdict"]) == ("untested", "error") and code == 2


def test_a_measured_cell_whose_record_is_not_in_the_folder_stays_as_stored(tmp_path):
    """The control of the rules above: the genuine row beside the passing records alone exits 0."""
    code, rep = report(tmp_path / "r", folder(tmp_path / "genuine", row=genuine_row(), records=PASSING))
    assert cell_of(rep, "0.23.0")["outcome"] == "broken" and "stored_verdict" not in cell_of(rep, "0.23.0")
    assert code == 0


# ---- scoping: a report of DIR shows DIR's documents ----------------------------------------------

def test_a_report_of_a_folder_shows_its_own_documents_not_newer_copies_the_store_keeps(tmp_path):
    """This machine's store keeps newer copies of kimi.json and the 0.8.1 row (other contents, same
    names); a folder from elsewhere holds the genuine ones. Its report shows its own, as on an empty store."""
    store = str(tmp_path / "busy.sqlite")
    newer_kimi = {"status": "skipped", "reason": "this machine: no GPU"}
    newer_row = genuine_row()
    for cell in newer_row["cells"]:
        cell["notes"] = ["this machine's copy"]
    report(tmp_path / "seed", folder(tmp_path / "here", kimi=newer_kimi, row=newer_row, mtime=MAR), "--store", store)
    theirs = folder(tmp_path / "artifact", kimi=genuine_kimi(), row=genuine_row(), records=ROW_RECORDS, mtime=JAN)
    code, busy = report(tmp_path / "busy", theirs, "--store", store)
    empty_code, empty = report(tmp_path / "empty", theirs, "--store", str(tmp_path / "empty.sqlite"))
    assert busy["kimi"] == empty["kimi"] and busy["kimi"]["status"] == "failed"
    assert busy["support"] == empty["support"] and code == empty_code
    assert all(c["notes"] != ["this machine's copy"] for c in busy["support"][0]["cells"])
    _, everything = report(tmp_path / "all", theirs, "--store", store, "--history")  # asked for: every kept copy
    assert everything["kimi"]["status"] == "skipped"
