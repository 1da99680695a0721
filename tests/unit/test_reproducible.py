"""The same bytes from the same runs (issue 45 item 3): `python -m compat publish` on unchanged results
writes identical files, wherever and whenever it runs; the date and commit a page shows are its newest
record's own; every file the atomic writers leave is mode 0644."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from compat.harness import store as store_module
from compat.harness.published import RESULTS, write_generated
from compat.harness.report.publish import publish
from compat.harness.report.render import write_reports
from compat.harness.store import Store
from compat.shared.results import read_json, record_files, write_bytes_atomic, write_json_atomic, write_text_atomic

REPO = Path(__file__).resolve().parents[2]
# one published row (its support document and its records): one record of it, the first GPU run of 0.24.0, states
# no finished_at or harness_commit (published before the runner stamped them), the others do
ROW = "0.9.0"
UNDATED = ("vllm-0.24.0__speculators-0.9.0__gpu",)


def _row_results(folder: Path, mtime: int) -> Path:
    (folder / "support").mkdir(parents=True)
    shutil.copyfile(RESULTS / "support" / f"speculators-{ROW}.json", folder / "support" / f"speculators-{ROW}.json")
    for path in record_files(RESULTS, f"vllm-*__speculators-{ROW}__*"):  # <cell-id>.json.gz as published
        shutil.copyfile(path, folder / path.name)
    for path in folder.rglob("*.json*"):
        os.utime(path, (mtime, mtime))  # a copy, a checkout: another modification time each time
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _published_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """`write_generated` (what `python -m compat publish` writes) twice, each from its own copy of the
    same records, the copies made at other times, by a harness at another commit."""
    outs = []
    for n, (mtime, commit) in enumerate(((1_700_000_000, "a" * 40), (1_800_000_000, "b" * 40 + "+dirty"))):
        monkeypatch.setattr(store_module, "harness_commit", lambda *a, c=commit, **k: c)
        results = _row_results(tmp_path / f"results{n}", mtime)
        out = tmp_path / f"published{n}"
        out.mkdir()
        docs = out / "support-table.md"
        shutil.copyfile(REPO / "docs" / "support-table.md", docs)
        write_generated(results, out, docs)
        outs.append(out)
    return outs[0], outs[1]


def test_publish_twice_on_the_same_results_writes_the_same_bytes(tmp_path, monkeypatch):
    first, second = _published_twice(tmp_path, monkeypatch)
    files = _files(first)
    assert {"support.json", "compat.md", "compat.html", "support-table.md"} <= set(files)
    assert files == _files(second)
    md = files["compat.md"].decode()
    for cell_id in UNDATED:  # no stand-in for what the record does not state: neither mtime nor the commit here
        assert read_json(RESULTS / f"{cell_id}.json", "cell").get("finished_at") is None
    assert "2023-11-14" not in md and "2027-01-15" not in md and "aaaaaaaaaaaa" not in md and "bbbbbbbbbbbb" not in md
    assert "stored by" not in md and "| undated | 1 | `not recorded` |" in md


def test_the_date_and_commit_shown_are_the_newest_records(tmp_path, monkeypatch):
    first, _ = _published_twice(tmp_path, monkeypatch)
    records = [read_json(p, "cell") for p in record_files(tmp_path / "results0")]
    newest = max((r for r in records if r.get("finished_at")), key=lambda r: r["finished_at"])
    head = (first / "compat.md").read_text().splitlines()[2]
    assert f"from records to {newest['finished_at']} (harness `{newest['harness_commit'][:12]}`)" in head, head
    assert f"{newest['finished_at']} · harness {newest['harness_commit'][:12]}" in (first / "compat.html").read_text()


def test_a_report_of_the_runs_here_still_dates_an_undated_record_by_its_file(tmp_path):
    """`nox -s report` (no fixed generation stamp) keeps the store's dating of an older record: its file's
    time orders the runs of a cell; only a publication shows the records as they are."""
    results = _row_results(tmp_path / "r", 1_700_000_000)
    published = publish(tmp_path / "out", Store.open(tmp_path / "s.sqlite"), [results])
    runs = {c["id"]: c["run"] for c in published.report["cells"]}
    assert runs[UNDATED[0]]["ran_at"] == "2023-11-14T22:13:20Z"


@pytest.fixture
def strict_umask():
    old = os.umask(0o077)  # mkstemp's 0600 would show; so would a writer that leaves the mode to the umask
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_atomic_writers_leave_files_0644(tmp_path, strict_umask):
    write_json_atomic(tmp_path / "a.json", {"a": 1})
    write_text_atomic(tmp_path / "b.md", "b\n")
    write_bytes_atomic(tmp_path / "c.bin", b"c")
    assert {p.name: oct(_mode(p)) for p in tmp_path.iterdir()} == {n: "0o644" for n in ("a.json", "b.md", "c.bin")}


def test_every_report_file_is_0644(tmp_path, strict_umask):
    results = _row_results(tmp_path / "r", 1_700_000_000)
    published = publish(tmp_path / "out", Store.open(tmp_path / "s.sqlite"), [results], generated_at="x")
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert len(written) > 3 and {p.name for p in written} >= {"compat.json", "compat.html", "compat.md"}
    assert {p.relative_to(tmp_path).as_posix(): oct(_mode(p)) for p in written} == \
        {p.relative_to(tmp_path).as_posix(): "0o644" for p in written}
    write_reports(published.report, tmp_path / "again")
    assert all(_mode(p) == 0o644 for p in (tmp_path / "again").rglob("*") if p.is_file())


def test_publish_writes_support_json_0644(tmp_path, monkeypatch):
    first, _ = _published_twice(tmp_path, monkeypatch)
    assert oct(_mode(first / "support.json")) == "0o644"
