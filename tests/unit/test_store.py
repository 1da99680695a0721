"""The results store (compat.harness.store) and the report rendered from it (compat.harness.report_cli):
runs kept across commands with their dates, flips between runs, imports idempotent by content,
bad files refused by name, export and re-import, a merged CI fan-out."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from compat.harness.report_cli import main as report_main
from compat.harness.store import Store, StoreError
from compat.shared.records import load_record
from compat.shared.results import read_json, write_json_atomic
from record_factory import complete

JAN, MAR = 1767225600, 1772323200  # 2026-01-01 and 2026-03-01, 00:00 UTC


def record(vllm: str, speculators: str, verdict: str = "compatible") -> dict:
    status = "ok" if verdict == "compatible" else "broken"
    return complete({
        "vllm": vllm, "speculators": speculators, "verdict": verdict,
        "probes": [{"id": pid, "case": case, "status": status, "with_compat": status,
                    "error": None if status == "ok" else {"type": "TypeError", "message": "boom", "where": None},
                    "reason": None, "seconds": 0.1, "detail": {}}
                   for pid, case in (("request_signature", None), ("hidden_states_match_reference", "batch"))]})


def results_dir(folder: Path, *records: dict, mtime: int = JAN) -> Path:
    for rec in records:
        path = folder / f"{rec['id']}.json"
        write_json_atomic(path, rec)
        os.utime(path, (mtime, mtime))
    return folder


def report(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    code = report_main([*args, "--out", str(tmp_path / "out")])
    out = tmp_path / "out"
    return code, json.loads((out / "compat.json").read_text()), (out / "compat.md").read_text()


def test_two_runs_with_different_cells_both_appear_with_their_dates_in_the_history(tmp_path):
    first = results_dir(tmp_path / "a", record("0.16.0", "0.3.0"), mtime=JAN)
    second = results_dir(tmp_path / "b", record("0.17.0", "0.3.0"), mtime=MAR)
    report(tmp_path, "--results", str(first))
    code, rep, _ = report(tmp_path, "--results", str(second))
    assert code == 0 and [c["id"] for c in rep["cells"]] == ["vllm-0.17.0__speculators-0.3.0__cpu"]  # what was asked
    code, rep, md = report(tmp_path, "--results", str(second), "--history")
    assert code == 0
    runs = {c["id"]: c["run"] for c in rep["cells"]}
    assert sorted(runs) == ["vllm-0.16.0__speculators-0.3.0__cpu", "vllm-0.17.0__speculators-0.3.0__cpu"]
    assert runs["vllm-0.16.0__speculators-0.3.0__cpu"]["ran_at"] == "2026-01-01T00:00:00Z"
    assert runs["vllm-0.17.0__speculators-0.3.0__cpu"]["ran_at"] == "2026-03-01T00:00:00Z"
    assert "2026-01-01T00:00:00Z" in md and "2026-03-01T00:00:00Z" in md
    html = (tmp_path / "out" / "compat.html").read_text()
    assert "Newest run 2026-01-01T00:00:00Z of 1 kept" in html
    assert rep["flips"] == []


def test_a_verdict_that_changed_between_runs_is_a_flip_with_both_dates(tmp_path):
    report(tmp_path, "--results", str(results_dir(tmp_path / "a", record("0.16.0", "0.3.0"), mtime=JAN)))
    code, rep, md = report(tmp_path, "--results",
                           str(results_dir(tmp_path / "b", record("0.16.0", "0.3.0", "incompatible"), mtime=MAR)))
    assert [c["verdict"] for c in rep["cells"]] == ["incompatible"]  # the newest run decides
    assert rep["cells"][0]["run"]["runs"] == 2
    assert rep["flips"] == [{"cell": "vllm-0.16.0__speculators-0.3.0__cpu",
                             "label": "vLLM 0.16.0 × speculators 0.3.0 (cpu)",
                             "old": "compatible", "old_at": "2026-01-01T00:00:00Z",
                             "new": "incompatible", "new_at": "2026-03-01T00:00:00Z"}]
    assert "### Verdict flips between runs" in md
    assert "compatible (2026-01-01T00:00:00Z) → incompatible (2026-03-01T00:00:00Z)" in md
    html = (tmp_path / "out" / "compat.html").read_text()
    assert 'id="flips"' in html and "2026-03-01T00:00:00Z" in html
    assert code == 1  # the newest run's NEW TypeError gates


def test_an_identical_import_is_not_a_new_run(tmp_path):
    rec = record("0.16.0", "0.3.0")
    store = Store.open(tmp_path / "s.sqlite")
    first = store.import_dir(results_dir(tmp_path / "a", rec))
    again = store.import_dir(tmp_path / "a")
    elsewhere = store.import_dir(results_dir(tmp_path / "b", rec, mtime=MAR))  # same content, another folder and time
    assert (first.added, again.added, again.known, elsewhere.added) == (1, 0, 1, 0)
    assert len(store.runs()) == 1 and store.runs()[0].ran_at == "2026-01-01T00:00:00Z"
    changed = dict(rec, seconds={"probes": 3.0})
    assert store.add_run(load_record(changed)) is True and len(store.runs(rec["id"])) == 2
    store.close()


def test_a_bad_file_exits_3_naming_it_and_the_others_are_still_reported(tmp_path, capsys):
    folder = results_dir(tmp_path / "a", record("0.16.0", "0.3.0"))
    bad = record("0.17.0", "0.3.0")
    bad["probes"][0]["status"] = "passed"
    write_json_atomic(folder / "bad.json", bad)
    code, rep, _ = report(tmp_path, "--results", str(folder))
    assert code == 3
    err = capsys.readouterr().err
    assert "bad.json" in err and "probes[0].status" in err and "'passed'" in err
    assert [c["id"] for c in rep["cells"]] == ["vllm-0.16.0__speculators-0.3.0__cpu"]


def test_a_merged_fan_out_feeds_one_store_and_exports_back(tmp_path):
    jobs = [results_dir(tmp_path / f"job{i}", record(v, "0.3.0")) for i, v in enumerate(("0.11.0", "0.16.0"))]
    write_json_atomic(jobs[0] / "kimi.json", {"status": "skipped", "reason": "no GPU"})
    write_json_atomic(jobs[1] / "bisect" / "speculators-0.3.0.json",
                      {"speculators": "0.3.0", "vllm_releases": ["0.16.0", "0.17.0"], "always": [], "contracts": []})
    code, rep, _ = report(tmp_path, "--import", str(jobs[0]), "--import", str(jobs[1]),
                          "--export", str(tmp_path / "exported"))
    assert code == 0
    assert [c["vllm"] for c in rep["cells"]] == ["0.11.0", "0.16.0"]
    assert rep["kimi"]["reason"] == "no GPU" and rep["bisect"][0]["speculators"] == "0.3.0"
    exported = sorted(p.relative_to(tmp_path / "exported").as_posix() for p in (tmp_path / "exported").rglob("*.json"))
    assert exported == ["bisect/speculators-0.3.0.json", "kimi.json", "vllm-0.11.0__speculators-0.3.0__cpu.json",
                        "vllm-0.16.0__speculators-0.3.0__cpu.json"]
    again = Store.open(tmp_path / "fresh.sqlite")
    assert again.import_dir(tmp_path / "exported").added == 2
    assert [r.record for r in again.newest()] == [r.record for r in Store.open().newest()]


def test_the_store_option_and_environment_name_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_STORE", str(tmp_path / "from-env.sqlite"))
    report(tmp_path, "--results", str(results_dir(tmp_path / "a", record("0.16.0", "0.3.0"))))
    assert (tmp_path / "from-env.sqlite").is_file()
    report(tmp_path, "--results", str(tmp_path / "a"), "--store", str(tmp_path / "given.sqlite"))
    with sqlite3.connect(tmp_path / "given.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_store_that_is_not_a_database_is_refused_by_name(tmp_path, capsys):
    not_db = tmp_path / "notes.sqlite"
    not_db.write_text("these are notes, not a database " * 100)
    with pytest.raises(StoreError, match="notes.sqlite"):
        Store.open(not_db)
    assert report_main(["--store", str(not_db), "--results", str(tmp_path), "--out", str(tmp_path / "out")]) == 3
    assert "notes.sqlite" in capsys.readouterr().err


def test_a_run_is_dated_by_its_stated_finish_else_by_its_file(tmp_path):
    stated = dict(record("0.16.0", "0.3.0"), finished_at="2026-02-01T12:00:00Z", harness_commit="abc123")
    garbled = dict(record("0.17.0", "0.3.0"), finished_at="yesterday evening")
    store = Store.open(tmp_path / "s.sqlite")
    store.import_dir(results_dir(tmp_path / "a", stated, garbled, mtime=JAN))
    runs = {r.cell_id: r for r in store.runs()}
    assert (runs[stated["id"]].ran_at, runs[stated["id"]].harness_commit) == ("2026-02-01T12:00:00Z", "abc123")
    assert runs[garbled["id"]].ran_at == "2026-01-01T00:00:00Z"
    assert runs[garbled["id"]].harness_commit.startswith("unknown (stored by ")


def test_a_folder_from_another_machine_reports_its_own_runs_not_newer_ones_kept_here(tmp_path, monkeypatch):
    """Two machines' results for the same cell ids: this machine ran both cells later (its store keeps
    them, newer); a folder from elsewhere holds a broken and a passing run of the same ids. The
    folder's report shows its own two runs, as on an empty store, and nothing else the store keeps."""
    ids = ("0.16.0", "0.17.0")
    here = results_dir(tmp_path / "here", *(record(v, "0.3.0") for v in ids), record("0.18.0", "0.3.0"), mtime=MAR)
    report(tmp_path, "--results", str(here))  # this machine's store now keeps 3 newer runs
    elsewhere = {"hostname": "ci-runner-7"}
    theirs = results_dir(tmp_path / "artifact", dict(record("0.16.0", "0.3.0", "incompatible"), machine=elsewhere),
                         dict(record("0.17.0", "0.3.0"), machine=elsewhere), mtime=JAN)
    code, rep, _ = report(tmp_path, "--results", str(theirs))
    empty_code, empty, _ = report(tmp_path / "empty", "--results", str(theirs), "--store",
                                  str(tmp_path / "empty.sqlite"))
    verdicts = {c["id"]: c["verdict"] for c in rep["cells"]}
    assert verdicts == {c["id"]: c["verdict"] for c in empty["cells"]}
    assert verdicts == {"vllm-0.16.0__speculators-0.3.0__cpu": "incompatible",
                        "vllm-0.17.0__speculators-0.3.0__cpu": "compatible"}
    assert code == empty_code == 1
    assert all(c["run"]["ran_at"] == "2026-01-01T00:00:00Z" for c in rep["cells"])  # not this machine's March runs
    monkeypatch.chdir(tmp_path)  # no results/ here to import first
    code, everything, _ = report(tmp_path, "--history")  # asked for: every kept run, the newest of each
    assert len(everything["cells"]) == 3 and code == 0


def test_a_run_reports_its_own_cells_not_what_an_earlier_import_left_in_the_store(tmp_path):
    from compat.harness.runner import finish
    from compat.harness.settings import Output

    report(tmp_path, "--results", str(results_dir(tmp_path / "other", record("0.20.0", "0.3.0", "incompatible"))))
    own = record("0.16.0", "0.3.0")
    results = results_dir(tmp_path / "results", own, record("0.15.0", "0.3.0", "incompatible"))  # an older run's file
    assert finish([own], Output(results=results, reports=tmp_path / "reports")) == 0
    rep = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert [c["id"] for c in rep["cells"]] == [own["id"]]


def test_the_default_store_lives_beside_the_results_folder(tmp_path, monkeypatch):
    from compat.harness.store import default_store_path, store_path

    monkeypatch.delenv("COMPAT_STORE")
    assert default_store_path(tmp_path / "results") == tmp_path / ".compat" / "results.sqlite"
    assert store_path("user").name == "results.sqlite" and ".compat" not in store_path("user").parts
    monkeypatch.setenv("COMPAT_STORE", "user")
    assert default_store_path() == store_path("user")


def test_genuine_records_edited_one_way_read_the_same_beside_other_runs_of_their_ids(tmp_path):
    """Genuine records of the published 0.8.1 row, each edited one way (and one control left alone),
    reported from their own folder: on a store that keeps this machine's newer runs of the same cell
    ids they give the verdicts they give on an empty store, and those are the rule's own decision."""
    from compat.harness.verdict import decide

    published = Path(__file__).resolve().parents[2] / "published" / "results"
    picked = {v: read_json(published / f"vllm-{v}__speculators-0.8.1__cpu__variants-none.json", "cell result")
              for v in ("0.26.0", "0.28.0", "0.23.0", "0.20.0")}
    edited = json.loads(json.dumps(picked))
    ref = next(p for p in edited["0.26.0"]["probes"] if p["id"] == "hidden_states_match_reference")
    ref["figures"]["rows"][0]["max_abs_error"] = 0.37  # far outside atol + rtol x scale
    edited["0.23.0"]["verdict"] = "compatible"  # the stored word, against its probes
    schema = next(p for p in edited["0.20.0"]["probes"] if p["status"] == "unsupported-on-cpu")
    schema["status"] = "ok"  # an `ok` with the refusal still in its reason
    folder = results_dir(tmp_path / "artifact", *edited.values(), mtime=JAN)  # 0.28.0: the control
    here = [dict(r, machine={"hostname": "this-machine", "cpu_count": 2}, finished_at="2026-12-03T00:00:00Z")
            for r in picked.values()]
    store = tmp_path / "busy.sqlite"
    report(tmp_path / "seed", "--results", str(results_dir(tmp_path / "here", *here, mtime=MAR)), "--store", str(store))
    code, busy, _ = report(tmp_path / "busy", "--results", str(folder), "--store", str(store))
    empty_code, empty, _ = report(tmp_path / "empty", "--results", str(folder), "--store", str(tmp_path / "e.sqlite"))
    read = {c["id"]: c["verdict"] for c in busy["cells"]}
    assert read == {c["id"]: c["verdict"] for c in empty["cells"]} and code == empty_code
    assert read == {r["id"]: decide(r).verdict for r in edited.values()}
    assert read[picked["0.28.0"]["id"]] == "compatible"  # the control
    assert read[picked["0.26.0"]["id"]] != "compatible"  # the edited figure is caught
