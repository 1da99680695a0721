"""Time the full static table (every vLLM release since 0.11 x every speculators release since 0.3)
on this machine: cold (an empty cache: every wheel's sources fetched by range requests) and warm
(the cache from the cold run). Run from the repository root:

    python bench/static_table.py [--cache DIR] [--json OUT]

Prints the figures and the table (one verdict symbol per pair); writes them as JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compat.harness.static import api  # noqa: E402
from compat.harness.static.sources import SourceCache  # noqa: E402
from compat.harness.static.table import static_table  # noqa: E402

SYMBOL = {"api-compatible": "+", "api-incompatible": "x", "error": "!"}


def run(cache_dir: Path) -> dict:
    for memo in (api._PARSED, api._DEFINED, api._SELF_ATTRS):  # a new process starts without them
        memo.clear()
    started = time.monotonic()
    table = static_table(SourceCache(cache_dir=cache_dir))
    table["wall_seconds"] = round(time.monotonic() - started, 1)
    return table


def show(table: dict) -> str:
    specs = table["speculators"]
    lines = ["vllm \\ speculators " + " ".join(s.rjust(7) for s in specs)]
    for v in table["vllm"]:
        lines.append(f"{v:>19} " + " ".join(SYMBOL[table["rows"][v][s]["verdict"]].rjust(7) for s in specs))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=Path, default=None, help="cache folder (default: a new temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="static-bench-"))
    try:
        cold = run(cache)
        warm = run(cache)
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    pairs = len(cold["vllm"]) * len(cold["speculators"])
    print(show(cold))
    for name, t in (("cold", cold), ("warm", warm)):
        print(f"{name}: {t['wall_seconds']} s for {pairs} pairs ({len(t['vllm'])} vLLM x {len(t['speculators'])} "
              f"speculators); phases {t['seconds']}; fetched {t['fetch']['bytes'] / 2**20:.0f} MiB in "
              f"{t['fetch']['requests']} range requests, {t['fetch']['fetched']} wheels read, "
              f"{t['fetch']['whole_wheels']} downloaded whole")
    if args.json:
        args.json.write_text(json.dumps({"cold": cold, "warm": warm}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
