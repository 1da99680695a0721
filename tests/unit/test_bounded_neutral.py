"""Bounded, neutral input and output (issue 43 item 4).

Input: a result folder's names are read only where they are regular files within
compat.shared.results.MAX_INPUT_BYTES; a link to /dev/zero, a FIFO or a larger file is refused by name
(what it is, what would be accepted), `nox -s report` exits 3 as for any unreadable result file, and
the folder's other results are still reported. The endless inputs run in a child process under a
memory and a time limit, so that a reader without the rule fails the test instead of the machine.

Output: a record's text (an exception message, a file name) reaches compat.html, compat.md, the JUnit
XML and the terminal with its control and bidirectional characters as visible escapes
(compat.shared.neutral).
"""

from __future__ import annotations

import html
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from compat.harness.explain import main as explain_main
from compat.harness.report import build_report, render_html, render_markdown
from compat.harness.report_cli import main as report_main
from compat.shared.markdown import md_code, md_escape
from compat.shared.neutral import BIDI_CONTROLS, neutral
from compat.shared.results import MAX_INPUT_BYTES, ResultFileError, read_bounded, write_json_atomic
from test_evidence import SEEDS, SERVER, real
from test_report import cell, probe

ROOT = Path(__file__).resolve().parents[2]
RLO = "\u202e"


def _limited() -> None:  # the child's address space: enough to report, not enough to read /dev/zero whole
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def report_child(results: Path, out: Path) -> subprocess.CompletedProcess:
    """`python -m compat.report_cli` (what `nox -s report` runs) under a memory and a time limit."""
    try:
        return subprocess.run([sys.executable, "-m", "compat.report_cli", "--results", str(results),
                               "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the report of {results} did not finish in 120 s: an input read without end")


def _folder(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    write_json_atomic(results / f"{SERVER}.json", real(SERVER))
    return results


def _dev_zero(results: Path) -> tuple[str, str]:
    (results / "zero.json").symlink_to("/dev/zero")
    return "zero.json", "is a character device, a link to /dev/zero, not read"


def _fifo(results: Path) -> tuple[str, str]:
    os.mkfifo(results / "pipe.json")
    return "pipe.json", "is a FIFO (named pipe), not read"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("make", [_dev_zero, _fifo], ids=["link-to-dev-zero", "fifo"])
def test_an_endless_input_is_refused_named_and_the_rest_reported(tmp_path, make):
    results = _folder(tmp_path)
    name, why = make(results)
    done = report_child(results, tmp_path / "out")
    assert done.returncode == 3, (done.returncode, done.stderr[-3000:])
    assert f"{name} {why}; expected a regular file of at most 64 MiB" in done.stderr, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "compat.json").read_text())
    assert [c["id"] for c in report["cells"]] == [SERVER]  # the finished result is still reported
    assert (tmp_path / "out" / "compat.md").is_file() and (tmp_path / "out" / "compat.html").is_file()


def test_a_file_over_the_bound_is_refused_named_and_the_rest_reported(tmp_path, capsys):
    """A valid record padded past MAX_INPUT_BYTES (JSON allows the whitespace): refused, though it parses."""
    results = _folder(tmp_path)
    text = json.dumps(real(SEEDS))
    (results / "big.json").write_text(text + " " * (MAX_INPUT_BYTES + 1 - len(text.encode())))
    assert report_main(["--results", str(results), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert (f"big.json holds {MAX_INPUT_BYTES + 1} bytes, over the bound of {MAX_INPUT_BYTES} "
            f"(compat.shared.results.MAX_INPUT_BYTES), not read; expected a regular file of at most 64 MiB") in err, err
    report = json.loads((tmp_path / "out" / "compat.json").read_text())
    assert [c["id"] for c in report["cells"]] == [SERVER]


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("{}")
    (tmp_path / "b.json").symlink_to(target)
    assert read_bounded(target, "x") == read_bounded(tmp_path / "b.json", "x") == b"{}"
    with pytest.raises(ResultFileError, match="holds 2 bytes, over the bound of 1 .*at most 1 bytes"):
        read_bounded(target, "x", limit=1)
    with pytest.raises(ResultFileError, match="is a directory, not read"):
        read_bounded(tmp_path, "x")


@pytest.mark.timeout(120)
def test_explain_refuses_an_endless_input_with_the_usage_exit_64(tmp_path):
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    done = subprocess.run([sys.executable, "-m", "compat.explain", str(tmp_path / "zero.log")], cwd=ROOT,
                          capture_output=True, text=True, timeout=100, preexec_fn=_limited)
    assert done.returncode == 64, done.stderr[-3000:]  # bad input (issue 44), not "no exception found" (2)
    assert "zero.log is a character device, a link to /dev/zero, not read" in done.stderr, done.stderr[-3000:]


# --------------------------------------------------------------------------- neutral output

def test_neutral_writes_each_control_and_bidi_character_as_an_escape():
    assert neutral("plain text, ünïcödé → ✔\nline two\tcolumn") == "plain text, ünïcödé → ✔\nline two\tcolumn"
    for char in BIDI_CONTROLS:
        assert neutral(f"a{char}b") == f"a\\u{ord(char):04x}b"
    assert neutral("a\x1b[31mred\rover\x00\x7f\x85") == "a\\x1b[31mred\\rover\\x00\\x7f\\x85"
    assert neutral("a\nb\tc", keep="") == "a\\nb\\tc"
    assert set(BIDI_CONTROLS) == {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                                     0x200E, 0x200F, 0x061C)}


MESSAGE = f"shape {RLO}(0, 256) expected\u2066 got\x1b[2K\rall fine\u200f"


def test_a_right_to_left_override_in_a_record_reaches_no_report(tmp_path, capsys):
    """An exception message with bidi controls, an escape sequence and a carriage return, and a file name
    with a right-to-left override: none reaches compat.html, compat.md, the JUnit XML or the terminal."""
    results = tmp_path / "results"
    record = cell("0.16.0", "0.3.0", "incompatible", [
        probe("kv_cache_config_api", "broken", "ValueError", MESSAGE, "vllm/x.py:1", with_compat="broken")])
    write_json_atomic(results / f"{record['id']}.json", record)
    (results / f"evil{RLO}nosj.json").write_text("{")  # unreadable: its name is printed (exit 3)
    out = tmp_path / "out"
    assert report_main(["--results", str(results), "--out", str(out)]) == 3
    terminal = capsys.readouterr()
    outputs = {"compat.html": (out / "compat.html").read_text(encoding="utf-8"),
               "compat.md": (out / "compat.md").read_text(encoding="utf-8"),
               **{f"junit/{p.name}": p.read_text(encoding="utf-8") for p in (out / "junit").glob("*.xml")},
               "terminal": terminal.out + terminal.err}
    assert len(outputs) == 4, list(outputs)
    for name, text in outputs.items():
        assert not set(text) & set(BIDI_CONTROLS + "\x1b\r"), name
    shown = {"compat.html": outputs["compat.html"], f"junit/{record['id']}.xml": outputs[f"junit/{record['id']}.xml"],
             "compat.md": MarkdownIt("commonmark").enable(["table"]).render(outputs["compat.md"])}
    for name, text in shown.items():  # what a reader sees: the message, its controls as escapes (Markdown
        # keeps a message on one line: there the carriage return is whitespace, one space)
        cr = " " if name == "compat.md" else "\\r"
        assert f"shape \\u202e(0, 256) expected\\u2066 got\\x1b[2K{cr}all fine\\u200f" in html.unescape(text), name
    assert "evil\\u202enosj.json" in outputs["terminal"], outputs["terminal"]


def test_explain_prints_a_log_neutral(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/x/site-packages/vllm/v1/request.py", line 60, in __init__\n'
                   f"TypeError: Request.__init__() got an unexpected keyword argument 'x{RLO}y'\n")
    explain_main([str(log)])
    shown = capsys.readouterr().out
    assert RLO not in shown and "x\\u202ey" in shown, shown


def test_the_markdown_escape_is_neutral_wherever_it_is_used():
    """md_escape and md_code (the report, `explain --format markdown`, the issue bot's comment)."""
    assert md_escape(f"a{RLO}b\x1bc") == "a\\\\u202eb\\\\x1bc"  # the backslash escaped: it shows as \u202e
    assert md_code(f"a{RLO}b") == "`a\\u202eb`"  # a code span shows its text as it is


def test_text_that_bypasses_the_escapes_is_neutral_in_both_documents():
    """A support table's notes reach compat.md through its own escape and compat.html through Markup:
    the documents pass whole through compat.shared.neutral as they are rendered."""
    record = cell("0.16.0", "0.3.0", "compatible", [probe("kv_cache_config_api")])
    doc = json.loads((ROOT / "published" / "results" / "support" / "speculators-0.3.0.json").read_text())
    doc["cells"][0]["notes"] = [f"note {RLO}desrever\u2067 \x1b[2J"]
    report = dict(build_report([record]), support=[doc])
    for text in (render_html(report), render_markdown(report)):
        assert not set(text) & set(BIDI_CONTROLS + "\x1b"), text
        assert "note \\u202edesrever\\u2067 \\x1b" in text.replace("\\\\", "\\").replace("\\[", "[")


def test_a_file_that_says_it_is_empty_is_still_read_only_to_the_bound():
    """/proc files are regular and report size 0 whatever they hold: the read itself stops at the bound."""
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("no /proc here")
    assert os.stat(status).st_size == 0
    with pytest.raises(ResultFileError, match="holds more than 16 bytes, over the bound of 16"):
        read_bounded(status, "x", limit=16)
