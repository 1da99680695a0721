"""The published support table (compat.harness.published): its generated files equal what its evidence
gives, every measured cell's verdict is its record's, a published row is answered with nothing run,
the one-pair check: tests/unit/test_check.py."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from compat.harness import published, settings, support_run
from compat.harness.documents import load_support
from compat.harness.verdict import GATE_WORDS, decide
from compat.shared.results import read_json

ROWS = published.load_rows()


def test_every_published_row_is_there_and_every_cell_has_an_answer():
    assert {"0.3.0", "0.4.0.1", "0.8.1", "0.9.0"} <= set(ROWS)
    for spec, doc in ROWS.items():
        assert doc["cells"], spec
        for cell in doc["cells"]:
            assert cell["outcome"] in published.OUTCOME_WORDS and cell["verdict"], (spec, cell["vllm"])


def test_support_json_and_the_docs_answer_are_what_the_published_results_give():
    records = published.load_records()
    assert json.loads(published.SUPPORT_JSON.read_text()) == \
        json.loads(json.dumps(published.support_json(ROWS, records)))
    text = published.DOCS.read_text()
    assert published.with_answer_section(text, published.answer_markdown(ROWS, records)) == text, \
        "docs/support-table.md's answer is not the published table's: run python -m compat publish"


def test_each_measured_cell_says_what_its_record_decides():
    records = published.load_records()
    for spec, doc in ROWS.items():
        for cell in doc["cells"]:
            if cell["provenance"] != "measured":
                continue
            assert cell["cell_id"] in records, f"{spec} x {cell['vllm']}: its record is not published"
            assert decide(records[cell["cell_id"]]).verdict == cell["verdict"], (spec, cell["vllm"])


def test_an_edited_record_disagrees_with_its_published_cell(tmp_path):
    """The check above can fail: a measured cell's record edited to break its reference case."""
    doc = ROWS["0.8.1"]
    cell = next(c for c in doc["cells"] if c["provenance"] == "measured" and c["verdict"] == "compatible")
    record = read_json(published.RESULTS / f"{cell['cell_id']}.json", "cell result")  # kept as its .json.gz
    probe = next(p for p in record["probes"] if p["status"] == "ok" and p["id"] != "worker_logging")
    probe.update(status="broken", with_compat="broken",
                 error={"type": "AssertionError", "message": "rows differ", "where": None})
    assert decide(record).verdict != cell["verdict"]


def test_published_records_are_kept_gzipped_and_publish_add_keeps_them_so(tmp_path):
    """Every published record is <cell-id>.json.gz (the tracked bound: tests/unit/test_evidence_size.py); a row
    run's plain records added by `publish --add` are written compressed, their bytes exactly, the same record
    giving the same file, and a plain copy of the same cell there is removed; a folder holding both is refused."""
    assert not list(published.RESULTS.glob("*.json")), "a published record kept uncompressed"
    assert len(list(published.RESULTS.glob("*.json.gz"))) >= 200
    cell_id = next(c["cell_id"] for c in ROWS["0.8.1"]["cells"] if c["provenance"] == "measured")
    run = tmp_path / "run"
    (run / "support").mkdir(parents=True)
    plain = json.dumps(read_json(published.RESULTS / f"{cell_id}.json.gz", "cell result"), indent=1).encode()
    (run / f"{cell_id}.json").write_bytes(plain)
    shutil.copy(published.RESULTS / "support" / "speculators-0.8.1.json", run / "support")
    target = tmp_path / "published"
    (target / "support").mkdir(parents=True)
    (target / f"{cell_id}.json").write_bytes(plain)  # an older plain copy: replaced, not kept beside
    assert published.add_folder(run, target) == [cell_id, "support/speculators-0.8.1.json"]
    packed = target / f"{cell_id}.json.gz"
    assert not (target / f"{cell_id}.json").exists() and gzip.decompress(packed.read_bytes()) == plain
    first = packed.read_bytes()
    published.add_folder(run, target)
    assert packed.read_bytes() == first  # no time or name in the gzip header
    assert list(published.load_records(target)) == [cell_id]
    (target / f"{cell_id}.json").write_bytes(plain)
    with pytest.raises(published.PublishedError, match=f"cell {cell_id} is kept twice"):
        published.load_records(target)


def _options(tmp_path: Path, speculators: str = "0.8.1", *given: str) -> settings.Settings:
    return settings.parse(["--speculators", speculators, "--all-vllm", "--results", str(tmp_path / "results"),
                           "--reports", str(tmp_path / "reports"), "--store", str(tmp_path / "s.sqlite"), *given])


def test_a_published_row_is_answered_with_nothing_run(tmp_path, monkeypatch, capsys):
    def no_static_layer(*a, **k):
        raise AssertionError("the static layer ran: a published row needs no index and no wheel")

    monkeypatch.setattr(support_run, "gather", no_static_layer)
    code = support_run.run_support(_options(tmp_path, "0.8.1"))
    out = capsys.readouterr().out
    assert "the published row" in out and "works: 0.25.0 – 0.32.0" in out
    assert "0.26.0: published (2026-12-02" in out and "harness 87d084fc7965" in out
    report = json.loads((tmp_path / "reports" / "compat.json").read_text())
    ids = {c["cell_id"] for c in ROWS["0.8.1"]["cells"] if c.get("cell_id")}
    gpu = {"vllm-0.22.1__speculators-0.8.1__gpu"} | {f"vllm-{v}__speculators-0.8.1__gpu__variants-none"
                                                     for v in ("0.23.0", "0.24.0", "0.26.0")}
    assert {c["id"] for c in report["cells"]} == ids | gpu  # the row's cells and its pairs' GPU runs, nothing else
    assert [d["fixed"] for d in report["support"]] == ["0.8.1"]
    md = (tmp_path / "reports" / "compat.md").read_text()
    # the row's report keeps the whole table's last column (issue 45), and its gate line is the exit status
    assert "| measured on the other backend |" in md and "gpu: 0.22.1 ◐, 0.23.0 ◐, 0.24.0 ✔, 0.26.0 ✔" in md
    gate = report["summary"]["exit_code"]
    assert code == gate == 2  # cells of the row are untested (0.19.1 - 0.21.0, 0.24.0 on the CPU build)
    assert f"gate: **{GATE_WORDS[code]}**" in md.splitlines()[2] and f"(exit {code})" in out


def test_a_cell_run_here_is_named_as_such_and_a_missing_one_as_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(support_run, "gather", lambda *a, **k: pytest.fail("the static layer ran"))
    doc = ROWS["0.9.0"]
    measured = [c for c in doc["cells"] if c["provenance"] == "measured"]
    here, gone = measured[0], measured[1]
    kept = tmp_path / "published"  # the published folder without gone's record: a cell not measured yet
    shutil.copytree(published.RESULTS, kept, ignore=shutil.ignore_patterns(f"{gone['cell_id']}.json*"))
    monkeypatch.setattr(published, "RESULTS", kept)
    shutil.copy(kept / f"{here['cell_id']}.json.gz", (tmp_path / "results").mkdir() or tmp_path / "results")
    assert support_run.run_support(_options(tmp_path, "0.9.0")) == 2  # a missing cell is untested
    out = capsys.readouterr().out
    assert "the published row" in out
    assert f"{here['vllm']}: ran here" in out and f"{gone['vllm']}: missing" in out
    assert f"{measured[2]['vllm']}: published (" in out


def test_other_settings_than_the_published_rows_are_not_answered_from_them(tmp_path):
    assert support_run.published_settings(_options(tmp_path, "0.8.1", "--dtype", "bfloat16"), "0.8.1") is None
    assert support_run.published_settings(_options(tmp_path, "0.8.1", "--variants", "hybrid"), "0.8.1") is None
    assert support_run.published_settings(_options(tmp_path), "0.0.1") is None  # no published row
    options = _options(tmp_path)
    answered = support_run.published_settings(options, "0.8.1")
    assert answered is not None and answered.cell.variants == () and options.cell.variants is None
    assert support_run.published_settings(_options(tmp_path, "0.8.1", "--variants", "none"), "0.8.1") is not None


def test_the_answer_names_the_probe_set_each_rows_measured_cells_ran():
    """A row whose cells predate the newest probes says so (refresh re-runs it); a row that mixes sets counts each."""
    records = published.load_records()
    doc = ROWS["0.8.1"]
    measured = [c for c in doc["cells"] if c["provenance"] == "measured"]
    sets = {published.evidence(records[c["cell_id"]])["probe_set"] for c in measured}
    line = next(x for x in published.answer_markdown(ROWS, records).splitlines() if x.startswith("| 0.8.1 |"))
    assert f"{len(measured)} measured (probe set" in line and all(str(s) in line for s in sets)
    first = records[measured[0]["cell_id"]]
    assert first.manifest is not None
    newer = replace(first, manifest=replace(first.manifest, probe_set=max(s for s in sets if s is not None) + 1))
    mixed = {**records, measured[0]["cell_id"]: newer}
    line = next(x for x in published.answer_markdown(ROWS, mixed).splitlines() if x.startswith("| 0.8.1 |"))
    assert "(probe sets " in line and f": {len(measured) - 1}" in line and ": 1" in line


def test_a_range_rows_document_is_not_published_over_the_whole_row(tmp_path):
    """--vllm-range A..B writes the row's document with its range only: added, it would replace the published row."""
    run = tmp_path / "run"
    (run / "support").mkdir(parents=True)
    doc = json.loads((published.RESULTS / "support" / "speculators-0.9.0.json").read_text())
    (run / "support" / "speculators-0.9.0.json").write_text(json.dumps(dict(doc, vllm_range=["0.31.0", "0.32.0"])))
    target = tmp_path / "published"
    with pytest.raises(published.PublishedError, match="--vllm-range run, part of the row"):
        published.add_folder(run, target)
    assert not (target / "support" / "speculators-0.9.0.json").exists()


def test_a_row_measured_here_keeps_the_other_backend_column_and_its_page_states_its_exit(tmp_path):
    """runner.finish with the row's pairs' GPU runs beside its own cells (support_run passes
    other_backend_ids): the report shows them, as a published row's does, and the exit is the page's gate."""
    from compat.harness.runner import finish
    from compat.harness.store import SUPPORT
    from compat.harness.verdict import GATE_WORDS
    from compat.shared.records import to_json
    from compat.shared.results import load_cell

    results = tmp_path / "results"
    (results / "support").mkdir(parents=True)
    doc = ROWS["0.8.1"]
    own = [c["cell_id"] for c in doc["cells"] if c["provenance"] == "measured"]
    for cell_id in own:  # the row's cells, as a run here leaves them
        shutil.copy(published.RESULTS / f"{cell_id}.json.gz", results)
    shutil.copy(published.RESULTS / "support" / "speculators-0.8.1.json", results / "support")
    options = _options(tmp_path, "0.8.1").output
    beside = support_run.other_backend_ids(load_support(doc), "cpu")
    assert beside and all("__gpu" in i for i in beside)
    records = [to_json(load_cell(results / f"{i}.json.gz")) for i in own]
    code = finish(records, options, documents=frozenset({(SUPPORT, "speculators-0.8.1")}), beside=beside)
    report = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert {c["id"] for c in report["cells"]} == set(own) | beside
    md = (tmp_path / "reports" / "compat.md").read_text()
    assert "| measured on the other backend |" in md and "gpu: 0.22.1 ◐, 0.23.0 ◐, 0.24.0 ✔, 0.26.0 ✔" in md
    assert code == report["summary"]["exit_code"] and f"gate: **{GATE_WORDS[code]}**" in md.splitlines()[2]
