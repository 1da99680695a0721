"""What the published table lacks, for the scheduled refresh (.github/workflows/support-refresh.yml).

    python -m compat refresh --json          # {"rows": {speculators: why}, "vllm": [...], "speculators": [...]}

A row is stale where the index lists a speculators release (since 0.3.0) with no published row, or a
vLLM release (since 0.11) its published row does not cover. The workflow then lists each stale row's
runtime cells that no published record holds (`--all-vllm --list-cells`), runs them one job each,
re-plans the rows over the merged results and opens a pull request with `python -m compat publish`'s
files. `$COMPAT_RELEASES` (a JSON file `{"vllm": [...], "speculators": [...]}`, a recorded index)
replaces the index: the workflow's tests run its steps on recorded events that way.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from packaging.version import Version

from compat.harness.published import RESULTS, load_rows

RELEASES_ENV = "COMPAT_RELEASES"
VLLM_SINCE, SPECULATORS_SINCE = "0.11.0", "0.3.0"


def stale_rows(rows: dict[str, dict[str, Any]], vllm: list[str], speculators: list[str],
               probe_sets: dict[str, int | None] | None = None) -> dict[str, str]:
    """speculators release -> why its row must be measured or planned again (in release order). `probe_sets`: the
    probe set each published record's runner had (cell id -> set); a row whose measured cells ran an older one than
    this harness's is run again with the probes added since."""
    from compat.shared.manifest import PROBE_SET

    out = {}
    for spec in sorted(speculators, key=Version):
        doc = rows.get(spec)
        if doc is None:
            out[spec] = "no published row"
            continue
        covered = {Version(c["vllm"]) for c in doc.get("cells") or []}
        new = [v for v in vllm if Version(v) not in covered]
        if new:
            out[spec] = f"its row lacks vLLM {', '.join(new)}"
            continue
        older = sorted({held for c in doc.get("cells") or [] if c.get("provenance") == "measured"
                        for held in [(probe_sets or {}).get(str(c.get("cell_id")))]
                        if held is not None and held < PROBE_SET})
        if older:
            out[spec] = (f"its measured cells ran probe set {', '.join(map(str, older))}; this harness's is "
                         f"{PROBE_SET} (probes added since: docs/probes.md)")
    return out


def record_probe_sets(results: Path) -> dict[str, int | None]:
    """cell id -> the probe set its published record's runner had."""
    from compat.harness.evidence import record_probe_set
    from compat.harness.published import load_records

    return {cell_id: record_probe_set(record) for cell_id, record in load_records(results).items()}


def listed_releases() -> dict[str, list[str]]:
    """The final releases the index lists (or the recorded index in $COMPAT_RELEASES)."""
    recorded = os.environ.get(RELEASES_ENV)
    if recorded:
        data = json.loads(Path(recorded).read_text())
        listed = {"vllm": list(data["vllm"]), "speculators": list(data["speculators"])}
    else:
        from compat.harness.static.sources import SourceCache

        cache = SourceCache()
        listed = {"vllm": cache.releases("vllm"), "speculators": cache.releases("speculators")}
    since = {"vllm": Version(VLLM_SINCE), "speculators": Version(SPECULATORS_SINCE)}
    return {name: sorted((r for r in releases if not Version(r).is_prerelease and not Version(r).is_devrelease
                          and Version(r) >= since[name]), key=Version)
            for name, releases in listed.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """refresh's options."""
    parser.add_argument("--json", action="store_true", help="print the stale rows as JSON (the workflow reads it)")


def main(argv: list[str]) -> int:
    """`vllm-spec-compat refresh ARGS` from a list."""
    from compat.harness.cli import run_command

    return run_command("refresh", argv)


def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """The stale rows, printed (or as JSON)."""
    releases = listed_releases()
    stale = stale_rows(load_rows(RESULTS), releases["vllm"], releases["speculators"], record_probe_sets(RESULTS))
    if args.json:
        print(json.dumps({"rows": stale, **releases}))
    else:
        for spec, why in stale.items():
            print(f"speculators {spec}: {why}")
        if not stale:
            print("the published table covers every release the index lists")
    return 0
