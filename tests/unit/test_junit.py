"""JUnit from the typed record and its decision (compat.harness.junit.suite) says what it says from the
report's cell (compat.json's JSON, read at report_suite): one file, byte for byte."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from compat.harness.junit import cell_xml, suite
from compat.harness.report import build_report
from compat.harness.verdict import decide
from compat.shared.records import load_record
from test_verdict import BLOCK_HASHER, REF, cell, err, probe, reference


def _xml(tree: ET.ElementTree) -> str:
    return ET.tostring(tree.getroot(), encoding="unicode")


def test_the_typed_suite_and_the_reports_cell_write_the_same_junit():
    broken = probe(REF, "broken", "ok", err("AssertionError", "rows differ", "vllm/x.py:1"), case="batch")
    no_probe = cell([], verdict="install-error", error="no wheel")
    for raw in (cell([BLOCK_HASHER] + reference()), cell([broken] + reference()[1:]), no_probe):
        record = load_record(raw)
        typed = _xml(cell_xml(suite(record, decide(record))))
        assert typed == _xml(cell_xml(build_report([raw])["cells"][0]))
        assert f'name="{record.id}"' in typed
    raw = cell([broken] + reference()[1:])
    record = load_record(raw)
    found = cell_xml(suite(record, decide(record))).getroot().find(f"testcase[@name='{REF}[batch]']/failure")
    assert found is not None and found.get("type") == "AssertionError" and "rows differ" in found.get("message")
