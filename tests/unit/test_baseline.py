"""The "what changed" diff against a baseline report."""

from __future__ import annotations

import json

from compat.harness.baseline import diff, is_empty, numeric_leaves
from compat.harness.report import build_report, render_html, render_markdown, write_reports
from compat.shared.results import load_report, write_json_atomic


def probe(pid, status="ok", etype=None, message="", case=None, detail=None, with_compat="ok"):
    return {"id": pid, "case": case, "status": status, "with_compat": with_compat, "advisory": False,
            "error": {"type": etype, "message": message, "where": None} if etype else None,
            "reason": None, "seconds": 0.1, "detail": detail or {}}


def cell(vllm, spec, verdict, probes, backend="cpu"):
    return {"id": f"vllm-{vllm}__speculators-{spec}__{backend}", "vllm": vllm, "speculators": spec,
            "backend": backend, "verdict": verdict, "env": {}, "seconds": {}, "env_shims": [], "probes": probes}


def ref(l1, case="basic", status="ok", **extra):
    return probe("hidden_states_match_reference", status, case=case,
                 detail={"max_abs_error": {"L1": l1, "L3": 4e-7}, "seconds_forward": extra.get("t", 1.0)})


OLD = {
    "generated_at": "2026-01-01T00:00:00Z", "harness_version": "0.0.9",
    "cells": [
        cell("0.16.0", "0.3.0", "compatible-with-compat", [probe("block_hasher", "broken", "AssertionError"),
                                                           probe("request_signature"), ref(3e-7)]),
        cell("0.11.0", "0.3.0", "compatible", [probe("block_hasher"), ref(2.4e-7)]),
        cell("0.10.0", "0.3.0", "compatible", [probe("block_hasher")]),
    ],
}


def new_cells():
    return [
        cell("0.16.0", "0.3.0", "incompatible", [probe("block_hasher"),
                                                 probe("request_signature", "broken", "TypeError", "eos_token_id",
                                                       with_compat="broken"),
                                                 ref(0.46, t=9.0)]),
        cell("0.11.0", "0.3.0", "compatible", [probe("block_hasher"), ref(2.5e-7, t=3.0)]),
        cell("0.17.1", "0.3.0", "incompatible", [probe("request_signature", "broken", "TypeError", "x")]),
    ]


def test_diff_finds_every_kind_of_change():
    d = diff(OLD, new_cells())
    assert d["baseline"] == {"generated_at": "2026-01-01T00:00:00Z", "harness_version": "0.0.9"}
    assert d["verdict_changes"] == [{"cell": "vLLM 0.16.0 × speculators 0.3.0 (cpu)",
                                     "old": "compatible-with-compat", "new": "incompatible"}]
    assert [(c["cell"].split(" ×")[0], c["probe"], c["old_status"]) for c in d["new_breakages"]] == [
        ("vLLM 0.16.0", "request_signature", "ok"), ("vLLM 0.17.1", "request_signature", None)]
    assert [(f["probe"], f["old_status"], f["status"]) for f in d["fixes"]] == [("block_hasher", "broken", "ok")]
    # 3e-7 -> 0.46 is a change; 2.4e-7 -> 2.5e-7 is noise; timings are ignored
    assert [(f["probe"], f["key"], f["old"], f["new"]) for f in d["figure_changes"]] == [
        ("hidden_states_match_reference[basic]", "max_abs_error.L1", 3e-7, 0.46)]
    assert d["cells_added"] == ["vLLM 0.17.1 × speculators 0.3.0 (cpu)"]
    assert d["cells_removed"] == ["vLLM 0.10.0 × speculators 0.3.0 (cpu)"]
    assert not is_empty(d)
    json.dumps(d)


def test_same_results_give_an_empty_diff():
    d = diff(OLD, OLD["cells"])
    assert is_empty(d)


def test_cells_without_backend_match_by_versions():
    old = {"cells": [dict(cell("0.16.0", "0.3.0", "compatible", [probe("block_hasher")]), backend=None)]}
    d = diff(old, [cell("0.16.0", "0.3.0", "incompatible", [probe("block_hasher", "broken", "AssertionError")])])
    assert not d["cells_added"] and not d["cells_removed"]
    assert len(d["verdict_changes"]) == 1 and len(d["new_breakages"]) == 1


def test_other_status_changes_are_listed():
    old = {"cells": [cell("0.16.0", "0.3.0", "compatible",
                          [probe("block_hasher"), probe("embed_input_ids", "broken", "X")])]}
    new = [cell("0.16.0", "0.3.0", "error", [probe("block_hasher", "error")])]
    d = diff(old, new)
    assert {(c["probe"], c["old"], c["new"]) for c in d["status_changes"]} == {
        ("block_hasher", "ok", "error"), ("embed_input_ids", "broken", None)}


def test_numeric_leaves():
    assert numeric_leaves({"a": 1, "b": {"c": 2.5, "d": "x", "e": True}, "f": [1, 2]}) == {
        "a": 1.0, "b.c": 2.5, "f[0]": 1.0, "f[1]": 2.0}


def test_baseline_renders_in_all_outputs(tmp_path):
    baseline_path = tmp_path / "old" / "compat.json"
    write_json_atomic(baseline_path, OLD)
    report = build_report(new_cells(), baseline=load_report(baseline_path))
    assert "changes" in report and report["changes"]["fixes"]
    html = render_html(report)
    assert "What changed" in html and "max_abs_error.L1" in html
    assert "compatible-with-compat → " in html.replace("◐ ", "").replace("✖ ", "")
    md = render_markdown(report)
    assert "### Changes vs baseline" in md
    assert "new breakage" in md and "fixed:" in md and "verdict:" in md and "figure:" in md
    paths = write_reports(report, tmp_path / "reports")
    assert json.loads(paths["json"].read_text())["changes"]["cells_removed"]


def test_cli_with_baseline(tmp_path):
    from compat.harness.report_cli import main

    results = tmp_path / "results"
    for c in new_cells():
        write_json_atomic(results / f"{c['id']}.json", c)
    write_json_atomic(tmp_path / "old.json", OLD)
    rc = main(["--results", str(results), "--out", str(tmp_path / "reports"), "--baseline", str(tmp_path / "old.json"),
               "--no-gate"])
    assert rc == 0
    assert "changes" in json.loads((tmp_path / "reports" / "compat.json").read_text())
    rc = main(["--results", str(results), "--out", str(tmp_path / "r2"), "--baseline", str(tmp_path / "missing.json")])
    assert rc == 3


def test_a_bfloat16_run_is_compared_with_its_own_baseline_not_the_float32_one():
    f32 = cell("0.24.0", "0.9.0", "compatible", [probe("block_hasher")], backend="gpu")
    bf16 = dict(cell("0.24.0", "0.9.0", "error", [probe("block_hasher", "error")], backend="gpu"),
                id="vllm-0.24.0__speculators-0.9.0__gpu__bfloat16")
    d = diff({"cells": [f32]}, [bf16])
    assert not d["status_changes"], d
    from compat.harness.baseline import cell_label
    assert cell_label(bf16) == "vLLM 0.24.0 × speculators 0.9.0 (gpu, bfloat16)"
