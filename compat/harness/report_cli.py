"""Render the reports from the results store.

    vllm-spec-compat report [--results DIR] [--import DIR ...] [--history] [--store PATH|user]
                            [--export DIR] [--out DIR] [--baseline OLD.json] [--no-gate]

Imports `--results DIR` and every `--import DIR` (a CI fan-out's downloaded artifacts, each a
results folder) into the store (compat.harness.store: SQLite, `--store PATH`, `--store user` for the
per-user one, else $COMPAT_STORE, else .compat/results.sqlite beside results/), then renders
<out>/compat.json, compat.html, compat.md and junit/<cell-id>.xml from exactly the runs those folders
hold (a newer run of the same cell id kept from another folder or machine is not shown; earlier
runs are, as flips with both dates), their Kimi record (kimi*.json) and bisect tables
(<folder>/bisect/speculators-*.json), those folders' own copies (never a newer one kept from elsewhere
under the same name). With no folder named, or with `--history`, it reports every run the
store keeps (results/ imported first where it exists): every cell id, the newest run of each.
An identical file imported again is not a new run. `--export DIR` writes the newest run of every
cell back as <cell-id>.json (and kimi.json, bisect/).
The support tables of `nox -s compat -- --all-vllm` / `--all-speculators` (results/support/*.json)
are kept likewise and open the report.

Every cell's verdict is derived again from its probe records (compat.harness.verdict); where the stored
verdict disagrees, the report says so. The Kimi record's status is derived again from its checks and
each support cell from its cell record in the report (compat.harness.documents); a document its
evidence contradicts is shown as the evidence reads, named (`contradiction:`), and never passes.

Exit status: the gate of compat.harness.verdict over every cell of the report (0 pass, 1 NEW
breakage or adapter regression, 2 something could not be tested; also two result files of one
folder with one cell id: both are reported, the second renamed `<id>@<file>`; also a document its
evidence contradicts) unless --no-gate
(then 0); 3 when an input could not be read or fails the record schema (docs/record.schema.json;
the message names the file and the field; the reports are still written from everything else), or
when there is no cell at all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compat.harness.report.publish import Selection, publish
from compat.harness.store import Store, StoreError
from compat.shared.neutral import neutral_terminal
from compat.shared.results import ResultFileError, load_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """report's own options (--results and --store are shared: compat.harness.cli)."""
    parser.add_argument("--import", dest="imports", type=Path, action="append", default=[], metavar="DIR",
                        help="another results folder to import (repeatable: a merged CI fan-out)")
    parser.add_argument("--history", action="store_true",
                        help="report every run the store keeps, not only those of the folders named")
    parser.add_argument("--export", type=Path, default=None, metavar="DIR",
                        help="also write the newest run of every cell as DIR/<cell-id>.json")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default: reports)")
    parser.add_argument("--baseline", type=Path, default=None, help="an older compat.json to compare with")
    parser.add_argument("--no-gate", action="store_true",
                        help="exit 0 even when there is a NEW breakage or a probe error")


def main(argv: list[str] | None = None) -> int:
    """`python -m compat.report_cli ARGS`: `vllm-spec-compat report ARGS`."""
    from compat.harness.cli import run_command

    return run_command("report", sys.argv[1:] if argv is None else argv)


@neutral_terminal()  # what it prints from a log or a record: compat.shared.neutral
def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Import, render and gate (module docstring)."""
    problems: list[str] = []
    imports = list(args.imports)
    if args.results is not None:
        imports.insert(0, args.results)
    everything = args.history or not imports
    if not imports and Path("results").is_dir():
        imports.insert(0, Path("results"))

    baseline = None
    if args.baseline is not None:
        try:
            baseline = load_report(args.baseline)
        except ResultFileError as exc:
            problems.append(str(exc))

    try:
        store = Store.open(args.store)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    try:
        published = publish(args.out, store, imports, Selection(everything=everything), baseline=baseline)
        exported = store.export_dir(args.export) if args.export is not None else []
    finally:
        store.close()
    problems += published.problems
    report, paths = published.report, published.paths
    if not report["cells"]:
        problems.append(f"no cell result in {', '.join(map(str, imports)) or 'any folder'} nor in the store "
                        f"{store.path}")
    summary = report["summary"]
    print(
        f"wrote {paths['json']}, {paths['html']}, {paths['md']} and {len(paths['junit'])} junit file(s) "
        f"from the store {store.path}: {len(report['cells'])} cell(s), {summary['probes']['known']} known, "
        f"{summary['probes']['new']} NEW, {summary['probes']['fixed']} fixed, {summary['probes']['error']} error, "
        f"{len(report.get('flips') or [])} flip(s)"
    )
    if args.export is not None:
        print(f"exported {len(exported)} file(s) to {args.export}")
    for cell in report["cells"]:
        if cell.get("stored_verdict"):
            print(f"note: {cell.get('id') or cell['vllm'] + ' x ' + cell['speculators']}: the result file says "
                  f"{cell['stored_verdict']}, its probes give {cell['verdict']}", file=sys.stderr)
    for contradiction in published.contradictions:
        print(f"contradiction: {contradiction}", file=sys.stderr)
    for flip in report.get("flips") or []:
        print(f"flip: {flip['cell']}: {flip['old']} ({flip['old_at']}) -> {flip['new']} ({flip['new_at']})")
    for problem in problems + list(published.duplicates.values()):
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 3
    if args.no_gate:
        return 0
    return published.gate()


if __name__ == "__main__":
    sys.exit(main())
