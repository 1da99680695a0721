"""Where cells' time went (issue 30): the steps each result record carries (record key `steps`, written by
compat.harness.cell_run.cell_steps), summed by kind over one or more results folders, with each cell's total and its
floor (its `vllm serve` or engine starts), so that two runs of the same cells (before and after a change) compare
step by step. Nothing runs.
From the repository root:

    python bench/cell_steps.py RESULTS_DIR [RESULTS_DIR ...] [--label NAME ...] [--json OUT]

A folder whose records carry no steps (written before the steps were recorded) counts only the cells' totals.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STARTS = ("server_start", "engine_start")


def cells(folder: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "id" in record and "probes" in record:
            found.append(record)
    if not found:
        raise SystemExit(f"{folder}: no result records (<cell>.json) found")
    return found


def cell_summary(record: dict[str, Any]) -> dict[str, Any]:
    steps = record.get("steps") or []
    by_kind: dict[str, float] = defaultdict(float)
    for step in steps:
        by_kind[step["step"]] += float(step["seconds"])
    starts = [float(s["seconds"]) for s in steps if s["step"] in STARTS]
    total = sum(float(v) for v in (record.get("seconds") or {}).values()) or sum(by_kind.values())
    return {"cell": record["id"], "verdict": record.get("verdict"), "total": round(total, 1),
            "steps": {k: round(v, 1) for k, v in by_kind.items()},
            "first_start": starts[0] if starts else None, "starts": len(starts),
            "ratio": round(total / starts[0], 2) if starts else None}


def folder_summary(folder: Path) -> dict[str, Any]:
    summaries = [cell_summary(r) for r in cells(folder)]
    kinds: dict[str, float] = defaultdict(float)
    for s in summaries:
        for kind, seconds in s["steps"].items():
            kinds[kind] += seconds
    return {"folder": str(folder), "cells": summaries, "total": round(sum(s["total"] for s in summaries), 1),
            "by_kind": {k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--label", action="append", default=[], help="a name per folder, in order")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    labels = args.label + [str(f) for f in args.folders[len(args.label):]]
    out = {}
    for label, folder in zip(labels, args.folders):
        summary = out[label] = folder_summary(folder)
        print(f"== {label}: {len(summary['cells'])} cells, {summary['total']:.0f} s "
              f"({summary['total'] / 60:.1f} min) in cells")
        print("   by step: " + ", ".join(f"{k} {v:.0f} s" for k, v in summary["by_kind"].items()))
        for s in summary["cells"]:
            floor = (f"; first start {s['first_start']:.0f} s, {s['starts']} start(s), total/first start "
                     f"{s['ratio']}" if s["first_start"] else "")
            detail = " ".join(f"{k}={v:.0f}" for k, v in s["steps"].items())
            print(f"   {s['cell']}: {s['verdict']}, {s['total']:.0f} s{floor}\n      {detail}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
