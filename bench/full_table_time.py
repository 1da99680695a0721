"""How long the whole support table takes (issue 30, goal 4), from the measured times of the cells the published
table ran: every CPU record under published/results carries `seconds` (its install and its probes), measured on the
2-core machine that ran it. Nothing runs.

    python bench/full_table_time.py [--runners 20] [--job-setup 120] [--selection 60] [--json OUT]

Prints, per speculators row and for all 13: the cells' sum (one machine, one cell at a time), and the fan-out of
.github/workflows/support-row.yml (one job per cell on `--runners` machines at once, each job `--job-setup` seconds of
checkout, Python and `pip install nox uv` before its cell; the `cells` and `table` jobs each one selection). The
fan-out's makespan is a longest-first list schedule of the measured cells; the job set-up and the selection are
figures given on the command line (GitHub's runners cannot be timed here), so the output names them.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from packaging.version import Version

from compat.shared.results import read_json, record_files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "published" / "results"


def cell_seconds() -> dict[str, list[float]]:
    """Per speculators release, the measured seconds (install + probes) of each CPU cell it ran."""
    by_row: dict[str, list[float]] = defaultdict(list)
    for path in record_files(RESULTS):  # <cell-id>.json.gz, as published/results keeps them
        record = read_json(path, "cell result")
        if record.get("backend") != "cpu":
            continue
        seconds = record.get("seconds")
        if not isinstance(seconds, dict) or not seconds:
            raise SystemExit(f"{path}: no `seconds` (install and probes) to time the cell by")
        by_row[record["speculators"]].append(sum(float(v) for v in seconds.values()))
    if not by_row:
        raise SystemExit(f"{RESULTS}: no CPU result records")
    return by_row


def makespan(jobs: list[float], runners: int) -> float:
    """Longest first, each job to the runner that frees first."""
    free = [0.0] * runners
    for job in sorted(jobs, reverse=True):
        heapq.heapreplace(free, free[0] + job)
    return max(free)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runners", type=int, default=20, help="jobs GitHub runs at once (20: a free account)")
    parser.add_argument("--job-setup", type=float, default=120.0, help="seconds a cell job spends before its cell")
    parser.add_argument("--selection", type=float, default=60.0,
                        help="seconds of the `cells` job and again of the `table` job (set-up and selection)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.runners < 1:
        parser.error(f"--runners {args.runners}: give at least 1")
    by_row = cell_seconds()
    rows: dict[str, Any] = {}
    print(f"| speculators | cells run | one machine (min) | fanned out on {args.runners} runners (min) |")
    print("|---|---|---|---|")
    for release in sorted(by_row, key=Version):
        cells = by_row[release]
        fan = 2 * args.selection + makespan([c + args.job_setup for c in cells], args.runners)
        rows[release] = {"cells": len(cells), "one_machine_s": round(sum(cells)), "fanned_out_s": round(fan),
                         "slowest_cell_s": round(max(cells))}
        print(f"| {release} | {len(cells)} | {sum(cells) / 60:.0f} | {fan / 60:.0f} |")
    every = [c for cells in by_row.values() for c in cells]
    whole = {"cells": len(every), "one_machine_s": round(sum(every)),
             "fanned_out_s": round(2 * args.selection + makespan([c + args.job_setup for c in every], args.runners)),
             "slowest_cell_s": round(max(every))}
    print(f"| all {len(by_row)} | {whole['cells']} | {whole['one_machine_s'] / 60:.0f} | "
          f"{whole['fanned_out_s'] / 60:.0f} |")
    print(f"(every row dispatched at once; assumed, not measured: {args.job_setup:g} s of job set-up, "
          f"{args.selection:g} s for each of the cells and table jobs)")
    if args.json:
        args.json.write_text(json.dumps({"assumed": {"runners": args.runners, "job_setup_s": args.job_setup,
                                                     "selection_s": args.selection},
                                         "rows": rows, "all": whole}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
