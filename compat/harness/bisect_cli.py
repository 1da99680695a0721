"""`nox -s bisect -- --speculators S [--probe ID]`: each contract of a speculators release over every
vLLM release (static layer), its flips, the support table, the registry's introduced_in/removed_in
checked against it, and the flips confirmed at runtime on neighbouring CPU builds where stored
cell results exist (`--confirm` runs the missing ones, one cell at a time, ~3 minutes each).

Writes <results>/bisect/speculators-S.json, keeps it in the results store (--store PATH, else
$COMPAT_STORE, else .compat/results.sqlite beside <results>/) with <results>/ imported, and renders
<reports>/ once from what <results>/ holds (the support table is a section of compat.html/md, and in
compat.json under "bisect").

Exit status: 0 the bisect ran and the registry and runtime agree with it; 1 the registry or a
runtime result disagrees with a flip; 2 a release's wheel could not be read; 64 (exit_codes.USAGE)
bad input (a bad command line, an unknown release, a probe id no contract has, a --vllm file that is
not a readable wheel).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from compat.harness import exit_codes
from compat.harness.cell_envs import REPO_ROOT
from compat.harness.static.contract_history import SINCE, bisect
from compat.harness.static.layers import PROBE_CONTRACTS
from compat.harness.static.sources import SourceCache, StaticError, UnknownRelease, local_wheel
from compat.shared.neutral import neutral_terminal
from compat.shared.results import write_json_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bisect's own options (--results and --store are shared: compat.harness.cli)."""
    parser.add_argument("--speculators", action="append", required=True, metavar="S",
                        help="speculators release (repeatable)")
    parser.add_argument("--probe", default=None, metavar="ID",
                        help=f"only the contract a runtime probe observes ({', '.join(PROBE_CONTRACTS)}), "
                             "or any text of a contract id")
    parser.add_argument("--vllm", action="append", default=[], metavar="PATH.whl",
                        help="a local or nightly vLLM wheel to place among the releases (repeatable)")
    parser.add_argument("--since", default=SINCE, help=f"first vLLM release (default {SINCE})")
    parser.add_argument("--until", default=None, help="last vLLM release (default: the newest)")
    parser.add_argument("--reports", type=Path, default=REPO_ROOT / "reports")
    parser.add_argument("--confirm", action="store_true",
                        help="run the runtime cells a flip of a probed contract lacks (one at a time, ~3 min each)")


def options(argv: list[str]) -> argparse.Namespace:
    from compat.harness.cli import command_parser

    return command_parser("bisect").parse_args(argv)


def print_table(result: dict[str, Any]) -> None:
    print(f"speculators {result['speculators']} over vLLM {result['vllm_releases'][0]} … "
          f"{result['vllm_releases'][-1]} ({len(result['vllm_releases'])} releases, {result['seconds']} s)")
    for row in result["contracts"]:
        if not (row["flips"] or row["registry"]):
            continue
        print(f"  {row['contract']}\n    holds on: {row['holds_text']}   (used at {row['site']})")
        for flip in row["flips"]:
            print(f"    {flip['before_release']} -> {flip['release']} {flip['turn']}: {flip['line']}")
            print(f"      {flip['confirmed']}")
        if row["registry"]:
            print(f"    registry {row['registry']['id']}: {row['registry']['verdict']}")
    print(f"  holding on every release: {len(result['always'])} contracts")
    for version, why in result["unreadable"].items():
        print(f"  error: vLLM {version} unreadable: {why}")


def confirm_cells(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Run the runtime cells the probed flips lack; returns how many ran."""
    wanted = []
    for row in result["contracts"]:
        for flip in row["flips"]:
            c = flip["confirmation"]
            if row["probe"] and not c.get("confirmed") and not c.get("disagrees") and c.get("cells"):
                wanted += [v for v in c["cells"] if v not in wanted]
    for version in wanted:
        print(f"[bisect] runtime cell vLLM {version} x speculators {result['speculators']}", flush=True)
        subprocess.run([sys.executable, "-m", "compat", "run", "--vllm", version, "--speculators",
                        result["speculators"],
                        "--results", str(args.results), "--reports", str(args.results / "bisect" / "cell-reports"),
                        *(["--store", str(args.store)] if args.store else [])], check=False)
    return len(wanted)


def main(argv: list[str] | None = None) -> int:
    """`python -m compat.bisect ARGS`: `vllm-spec-compat bisect ARGS`."""
    from compat.harness.cli import run_command

    return run_command("bisect", list(sys.argv[1:] if argv is None else argv))


@neutral_terminal()  # what it prints from a log or a record: compat.shared.neutral
def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Bisect each --speculators release (module docstring); the exit status."""
    for flag, value in (("--since", args.since), ("--until", args.until)):
        try:
            Version(value) if value else None
        except InvalidVersion:
            print(f"bisect: {flag} {value!r} is not a version; expected a vLLM release like 0.16.0", file=sys.stderr)
            return exit_codes.USAGE
    probes = set(PROBE_CONTRACTS)
    cache = SourceCache()
    try:
        wheels = [local_wheel(Path(p)) for p in args.vllm]
    except StaticError as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    code = 0
    for speculators in args.speculators:
        try:
            result = bisect(speculators, cache, args.since, args.until, args.probe, args.results, wheels)
            if args.confirm and confirm_cells(result, args):
                result = bisect(speculators, cache, args.since, args.until, args.probe, args.results, wheels)
        except UnknownRelease as exc:
            print(f"bisect: {exc}", file=sys.stderr)
            return exit_codes.USAGE
        except StaticError as exc:
            print(f"bisect: {exc}", file=sys.stderr)
            return 2
        if args.probe and not result["contracts"]:
            print(f"bisect: --probe {args.probe}: no contract of speculators {speculators} matches; "
                  f"probe ids: {', '.join(sorted(probes))}, or text of a contract id", file=sys.stderr)
            return exit_codes.USAGE
        print_table(result)
        # a filtered table keeps the full one
        suffix = f"--{re.sub(r'[^A-Za-z0-9_.-]', '_', args.probe)}" if args.probe else ""
        out = args.results / "bisect" / f"speculators-{speculators}{suffix}.json"
        write_json_atomic(out, result)
        print(f"[bisect] wrote {out}")
        disagreements = result["registry_disagreements"] + [
            f["confirmed"] for row in result["contracts"] for f in row["flips"] if f["confirmation"].get("disagrees")]
        for line in disagreements:
            print(f"[bisect] disagreement: {line}")
        if result["unreadable"]:
            code = max(code, 2)
        elif disagreements:
            code = max(code, 1) if code != 2 else code
    from compat.harness.report.publish import publish
    from compat.harness.store import Store

    store = Store.open(args.store, args.results)
    try:
        for problem in publish(args.reports, store, [args.results]).problems:
            print(f"bisect: not reported: {problem}", file=sys.stderr)
    finally:
        store.close()
    return code
