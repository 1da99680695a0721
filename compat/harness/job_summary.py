"""A report written as a GitHub job summary that fits GitHub's limit (1 MiB per step: a larger summary is
refused and the step's summary is lost): the exit status's meaning first, then the report's Markdown
(reports/compat.md opens with the answer), cut at a line boundary where it would not fit (a table keeps its
header with it), with a line saying where the whole report is. Standard library only, and
compat.harness.exit_codes for what each status means: the workflow runs it without any install
(`python -m compat.harness.job_summary`, .github/workflows/candidate.yml)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from compat.harness import exit_codes

LIMIT = 1024 * 1024  # bytes: GitHub's job summary limit per step


def headline(status: int, what: str) -> str:
    meaning = exit_codes.TABLE["run"].get(status, "the command itself failed (no gate status)")
    return f"**{what}: exit {status}, {meaning}**\n\n"


def cut_note(limit: int, whole: str) -> str:
    return (f"\n\n_The report was cut here to fit GitHub's job summary limit ({limit} bytes); the whole report: "
            f"{whole}._\n")


def fit(text: str, limit: int = LIMIT, whole: str = "the reports artifact") -> str:
    """`text` if it fits in `limit` bytes (UTF-8), else its longest run of whole lines that does (a table
    keeps its header and separator together or goes; a `<details>` left open is closed), and a line naming
    where the whole report is."""
    if len(text.encode()) <= limit:
        return text
    note = cut_note(limit, whole)
    budget = limit - len(note.encode()) - 2 * len("</details>\n") * text.count("<details")
    kept: list[str] = []
    used = 0
    for line in text.splitlines(keepends=True):
        if used + len(line.encode()) > budget:
            break
        kept.append(line)
        used += len(line.encode())
    table = 0  # the table lines the kept text ends in
    while table < len(kept) and kept[len(kept) - 1 - table].lstrip().startswith("|"):
        table += 1
    if table == 1:  # a header without its separator row
        kept.pop()
    body = "".join(kept)
    body += "</details>\n" * max(0, body.count("<details") - body.count("</details>"))
    return body.rstrip("\n") + note


def recorded(path: Path) -> str:
    """The headlines of the exit statuses a workflow recorded, one `STATUS WHAT` line per command (the workflows'
    $RUNNER_TEMP/exit-status, gated after the upload), or why there are none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"**no exit status was recorded ({path}: {exc.strerror or exc})**\n\n"
    heads = []
    for line in lines:
        status, _, what = line.strip().partition(" ")
        if status.lstrip("-").isdigit():
            heads.append(headline(int(status), what or "a command"))
        elif line.strip():
            heads.append(f"**a line that is no exit status: {line.strip()[:200]!r}**\n\n")
    return "".join(heads) or f"**no exit status was recorded ({path} is empty)**\n\n"


def summary(report: Path, status: int | None, what: str, limit: int = LIMIT, whole: str = "the reports artifact",
            statuses: Path | None = None) -> str:
    """The job summary: the status's meaning (or each recorded status's, `statuses`), then the report (or why there
    is none), fitted to `limit`."""
    head = recorded(statuses) if statuses is not None else headline(int(status or 0), what)
    try:
        body = report.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        body = f"No report was written ({report}: {exc.strerror or exc}); the run's log says why.\n"
    return head + fit(body, limit - len(head.encode()), whole)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exit_codes.USAGE, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="python -m compat.harness.job_summary",
                                     description="Write a report as a GitHub job summary within its size limit.")
    parser.add_argument("report", type=Path, help="the Markdown report (reports/compat.md)")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--status", type=int, help="the command's exit status")
    given.add_argument("--statuses", type=Path,
                       help="a file of recorded exit statuses, a `STATUS WHAT` line each ($RUNNER_TEMP/exit-status)")
    parser.add_argument("--what", default="vllm-spec-compat", help="what ran, for the first line")
    parser.add_argument("--whole", default="the reports artifact", help="where the whole report is")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"bytes (default {LIMIT}, GitHub's)")
    args = parser.parse_args(argv)
    sys.stdout.write(summary(args.report, args.status, args.what, args.limit, args.whole, args.statuses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
