"""The executed-code inference over every recorded row (issue 30): one line per speculators release from the
committed bench/executed_inference-S.json files (bench/executed_inference.py), and the totals.

    python bench/executed_inference_rows.py            # a markdown table; exit 1 where a row is missing

A row's runtime cells under the module fingerprint (what the published table runs) and under the executed-code key,
the releases the key infers, and its checks (pairs of measured cells the key calls the same, whose outcomes must
agree). Rows whose speculators extraction code equals a sibling's (0.7.0.2, 0.6.0.2, 0.4.0) record only the cell
the runner checked: they count 0 runtime cells under either key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "published" / "results" / "support"


def rows() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(ROOT.glob("bench/executed_inference-*.json")):
        summary = json.loads(path.read_text())["summary"]
        found[summary["speculators"]] = summary
    return found


def sibling(release: str) -> str | None:
    """The speculators release every runnable cell of the published row stands on, where that is one other release
    (the static layer found the same extraction code): such a row runs no cell of its own under either key, and its
    recorded cell is the runner's check of the inference."""
    plan = json.loads((SUPPORT / f"speculators-{release}.json").read_text())["plan"]
    sources = {cell["inferred_from"][1] if cell.get("inferred_from") else None
               for cell in plan if cell["kind"] in ("runtime", "inferred")}
    return next(iter(sources)) if len(sources) == 1 and None not in sources and release not in sources else None


def main() -> int:
    measured = rows()
    releases = sorted((p.stem.removeprefix("speculators-") for p in SUPPORT.glob("speculators-*.json")), key=Version)
    print("| speculators | runtime cells (fingerprint) | runtime cells (executed key) | saved | key infers | "
          "key checks agree |")
    print("|---|---|---|---|---|---|")
    totals = {"fingerprint": 0, "key": 0, "checks": 0, "agree": 0}
    for release in releases:
        row = measured.get(release)
        if row is None:
            print(f"| {release} | not recorded | | | | |")
            continue
        source = sibling(release)
        if source is not None:
            same = ", ".join(f"{pair.split(' -> ')[0]}: {k['of'] - k['functions_differ']} of {k['of']} functions "
                             "the same" for pair, k in row["fingerprint_pairs_under_the_key"].items())
            print(f"| {release} | 0 | 0 | 0 | every cell ← {source}'s (the same extraction code; checked cell {same}) "
                  "| (the runner's check) |")
            continue
        # a cell the plan infers from a sibling release's cell of the same vLLM (an "X -> X" pair): the per-row bench
        # models one row, so it counts it as runtime under the key; where the sibling's cell ran the same functions
        # unchanged, the key infers it as the fingerprint does
        across = [pair.split(" -> ")[0] for pair, k in row["fingerprint_pairs_under_the_key"].items()
                  if len(set(pair.split(" -> "))) == 1 and k["functions_differ"] == 0]
        key_runtime = row["executed_key_runtime"] - len(across)
        inferred = ", ".join([f"{y} ← {x}" for y, x in row["executed_key_inferred"].items()]
                             + [f"{y} ← the sibling's {y}" for y in across]) or "none"
        print(f"| {release} | {row['fingerprint_runtime']} | {key_runtime} | "
              f"{row['fingerprint_runtime'] - key_runtime} | {inferred} | "
              f"{row['agree']} of {row['checks']} |")
        totals["fingerprint"] += row["fingerprint_runtime"]
        totals["key"] += key_runtime
        totals["checks"] += row["checks"]
        totals["agree"] += row["agree"]
    missing = [r for r in releases if r not in measured]
    print(f"\n{len(releases) - len(missing)} of {len(releases)} rows recorded; runtime cells {totals['fingerprint']} "
          f"(fingerprint) vs {totals['key']} (executed key): {totals['fingerprint'] - totals['key']} saved; "
          f"key checks {totals['agree']} of {totals['checks']} agree"
          + (f"; not recorded: {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
