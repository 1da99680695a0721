"""Render the reports from result files.

    python -m compat.report_cli [--results DIR] [--out DIR] [--baseline OLD.json] [--no-gate]

Reads results/<cell>.json (every *.json except kimi*.json, which is the Kimi section; and
results/bisect/speculators-*.json, the support tables of `nox -s bisect`; results/support/*.json, the
rows and columns of `nox -s compat -- --all-vllm` / `--all-speculators`, the report's first section), writes
<out>/compat.json, compat.html, compat.md and junit/<cell-id>.xml.

Every cell's verdict is derived again from its probe records (compat.harness.verdict); where the stored
verdict disagrees, the report says so.

Exit status: the gate of compat.harness.verdict (0 pass, 1 NEW breakage or adapter regression, 2 something
could not be tested; also two result files with one cell id: both are reported, the second renamed
`<id>@<file>`) unless --no-gate (then 0); 3 when an input could not be read or fails the record
schema (docs/record.schema.json; the message names the file and the field; the reports are still
written from the files that could be read), or when there is no result file at all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compat.harness.report import build_report, write_reports
from compat.harness.verdict import UNTESTED, worst_gate
from compat.shared.results import ResultFileError, load_cell, load_report, read_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.report_cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"), help="directory of <cell>.json files (default: results)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default: reports)")
    parser.add_argument("--baseline", type=Path, default=None, help="an older compat.json to compare with")
    parser.add_argument("--no-gate", action="store_true", help="exit 0 even when there is a NEW breakage or a probe error")
    args = parser.parse_args(argv)

    problems: list[str] = []
    untested: list[str] = []  # not unreadable, but the gate may not pass: duplicate cell ids
    cells = []
    sources: dict[str, Path] = {}
    kimi = None
    files = sorted(p for p in args.results.glob("*.json") if not p.name.startswith(".")) if args.results.is_dir() else []
    if not args.results.is_dir():
        problems.append(f"results directory {args.results} does not exist")
    for path in files:
        try:
            if path.name.startswith("kimi"):
                kimi = read_json(path, "kimi result")
            else:
                cell = load_cell(path)
                if cell["id"] in sources:
                    renamed = f"{cell['id']}@{path.name}"
                    untested.append(f"two result files hold cell {cell['id']}: {sources[cell['id']]} and {path}; "
                                    f"both are reported, the second as {renamed}")
                    cell = dict(cell, id=renamed, duplicate_of=str(sources[cell["id"]]))
                sources.setdefault(cell["id"], path)
                cells.append(cell)
        except ResultFileError as exc:
            problems.append(str(exc))

    bisect = []
    for path in sorted((args.results / "bisect").glob("speculators-*.json")) if args.results.is_dir() else []:
        try:
            bisect.append(read_json(path, "bisect result"))
        except ResultFileError as exc:
            problems.append(str(exc))

    support = []  # the support tables of `nox -s compat -- ... --all-vllm` (compat.harness.support_run)
    for path in sorted((args.results / "support").glob("*.json")) if args.results.is_dir() else []:
        try:
            support.append(read_json(path, "support table"))
        except ResultFileError as exc:
            problems.append(str(exc))

    baseline = None
    if args.baseline is not None:
        try:
            baseline = load_report(args.baseline)
        except ResultFileError as exc:
            problems.append(str(exc))

    if not cells and not problems:
        problems.append(f"no cell result files in {args.results}")

    report = build_report(cells, kimi=kimi, baseline=baseline, bisect=bisect or None)
    if support:
        report["support"] = support
    paths = write_reports(report, args.out)
    summary = report["summary"]
    print(
        f"wrote {paths['json']}, {paths['html']}, {paths['md']} and {len(paths['junit'])} junit file(s): "
        f"{len(cells)} cell(s), {summary['probes']['known']} known, {summary['probes']['new']} NEW, "
        f"{summary['probes']['fixed']} fixed, {summary['probes']['error']} error"
    )
    for cell in report["cells"]:
        if cell.get("stored_verdict"):
            print(f"note: {cell.get('id') or cell['vllm'] + ' x ' + cell['speculators']}: the result file says "
                  f"{cell['stored_verdict']}, its probes give {cell['verdict']}", file=sys.stderr)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    for problem in untested:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 3
    if args.no_gate:
        return 0
    return worst_gate([summary["exit_code"]] + [UNTESTED] * bool(untested))


if __name__ == "__main__":
    sys.exit(main())
