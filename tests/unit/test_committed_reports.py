"""Every committed report under reports/ re-renders from its results/ (through the store, as
`nox -s report` does) to the verdicts and gates it was committed with (its verdicts.json: the rendered
pages themselves are not kept in git, compat.harness.evidence_pack); and a report decides (classifies)
each cell exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.harness import verdict
from compat.harness.report import build_report
from compat.harness.report.publish import publish
from compat.harness.store import Store
from record_factory import complete

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reports"
# every committed report with its results (the published table's is checked by tests/unit/test_published.py)
COMMITTED = sorted(p.parent for p in REPORTS.glob("**/verdicts.json") if (p.parent / "results").is_dir())


def test_there_are_committed_reports_to_check():
    assert len(COMMITTED) >= 10


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.relative_to(REPO).as_posix())
def test_a_committed_report_renders_the_same_verdicts_and_gates(folder, tmp_path):
    committed = json.loads((folder / "verdicts.json").read_text())
    # a report rendered with other folders imported beside its own results names them in imports.txt
    listed = (folder / "imports.txt").read_text().split() if (folder / "imports.txt").is_file() else []
    published = publish(tmp_path / "out", Store.open(tmp_path / "store.sqlite"),
                        [folder / "results", *(REPO / path for path in listed)])
    assert published.problems == []
    again = published.report
    assert {c["id"]: {"verdict": c["verdict"], "gate": c["gate"]} for c in again["cells"]} == committed["cells"]
    assert again["summary"]["exit_code"] == committed["exit_code"]
    assert again["summary"]["verdicts"] == committed["verdicts"]
    assert published.gate() == committed["exit_code"]


def test_a_report_decides_and_classifies_each_cell_once(monkeypatch):
    """Also a cell whose failure the environment caused (a missing module: `error`, not `broken`):
    only that probe is classified again, never the whole cell."""
    failures = {"0.11.0": ("TypeError", "boom"), "0.16.0": ("TypeError", "boom"),
                "0.17.0": ("ModuleNotFoundError", "No module named 'flashinfer'")}
    cells = [complete({"vllm": v, "speculators": "0.3.0", "verdict": "compatible", "probes": [
        {"id": "request_signature", "status": "broken", "with_compat": "broken", "seconds": 0.1, "detail": {},
         "error": {"type": etype, "message": message, "where": None}}]}) for v, (etype, message) in failures.items()]
    calls = {"decide": 0, "classify_cell": 0}
    real_decide, real_classify = verdict.decide, verdict.classify_cell

    def counted_decide(*a, **k):
        calls["decide"] += 1
        return real_decide(*a, **k)

    def counted_classify(*a, **k):
        calls["classify_cell"] += 1
        return real_classify(*a, **k)

    monkeypatch.setattr(verdict, "classify_cell", counted_classify)
    monkeypatch.setattr("compat.harness.report.build.decide", counted_decide)
    monkeypatch.setattr("compat.harness.classify.classify_cell", counted_classify)
    report = build_report(cells)
    assert calls == {"decide": 3, "classify_cell": 3}
    assert [c["verdict"] for c in report["cells"]] == ["incompatible", "incompatible", "error"]
