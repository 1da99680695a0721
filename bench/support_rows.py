"""The support table's selection for rows (one speculators release x every vLLM release): how many
cells run, are inferred, static only or answered by the resolver, and what a row and the whole
table cost at the measured cell times. Nothing runs at runtime. From the repository root:

    python bench/support_rows.py [--speculators S ...] [--backend cpu] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compat.harness import support  # noqa: E402
from compat.harness.static.sources import SourceCache  # noqa: E402
from compat.harness.static.table import speculators_releases  # noqa: E402
from compat.harness.support_run import gather  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--speculators", action="append", default=[])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cache = SourceCache()
    rows = {}
    for s in args.speculators or speculators_releases(cache):
        started = time.monotonic()
        planned = support.plan(gather("vllm", s, args.backend, cache, echo=lambda _: None).facts, "vllm")
        counts = {k: sum(p.kind == k for p in planned) for k in
                  (support.RUNTIME, support.INFERRED, support.STATIC_ONLY, support.RESOLVER)}
        rows[s] = {"counts": counts, "seconds": round(time.monotonic() - started, 1),
                   "runtime": [p.vllm for p in planned if p.kind == support.RUNTIME],
                   "inferred": {p.vllm: p.inferred_from[0] for p in planned if p.kind == support.INFERRED}}
        print(f"speculators {s}: {counts} (selection {rows[s]['seconds']} s); runtime: "
              f"{', '.join(rows[s]['runtime'])}; inferred: {rows[s]['inferred']}", flush=True)
    total = sum(r["counts"][support.RUNTIME] for r in rows.values())
    print(f"{len(rows)} rows: {total} runtime cells")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
