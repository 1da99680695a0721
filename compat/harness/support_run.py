"""`nox -s compat -- --speculators S --all-vllm` (a row) and `--vllm V --all-speculators` (a column):
the static layer over every release, the runtime cells compat.harness.support chooses, every
other cell inferred or static-only, then the support table (results/support/<row>.json and the
report's first section).

A row the repository publishes (compat.harness.published: published/results/support/) is answered
from it without running anything, naming which cells are published (date, machine), ran here, or
are missing; `--rerun` measures again (`--rerun --only ID` one cell, the others reused). Stored
results are reused: a runtime cell whose results/<id>.json, else published/results/<id>.json,
exists is not run again unless --rerun (so a CI fan-out's merged artifacts, then this command, give
the table without a run).
`--plan-only` prints and writes the choice and runs nothing; `--list-cells --json` prints the ids
to run (a CI job matrix). `--check-inferred K [--seed N]` also runs K cells it inferred.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from packaging.version import Version

from compat.harness import exit_codes, support
from compat.harness.documents import SupportDocument, load_support
from compat.harness.matrix import Cell, CellSettings, MatrixError
from compat.harness.settings import ROW, Settings
from compat.shared.axes import DEFAULT_DTYPE, VLLM_DIST
from compat.shared.profiles import profile_for
from compat.shared.records import CellRecord, Verdict, load_record, to_json
from compat.shared.results import evidence_path, read_json, write_json_atomic


def _echo(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class Gathered:
    """What the static layer gives a row or column (gather): each pair's facts, the static table (static_table's
    document), the fingerprints per (vLLM release, speculators era), each vLLM release's model runner in words, the
    facts of the releases with the same extraction code (a row's siblings) and the seconds it took."""
    facts: list[support.PairFacts]
    table: dict[str, Any]
    fingerprints: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    runners: dict[str, str] = field(default_factory=dict)
    siblings: list[support.PairFacts] = field(default_factory=list)
    seconds: float = 0.0


def gather(axis: str, fixed: str, backend: str, cache: Any = None, index: Any = None,
           echo: Callable[[str], None] = _echo, vllm_range: tuple[str, str] | None = None,
           candidate: str = "") -> Gathered:
    """The static table, fingerprints, runtime builds and pin conflicts of the row or column.
    `vllm_range`: a row's vLLM releases from A to B only; `candidate`: the wheel of a candidate build whose
    version is `fixed` (its cells infer only from its own runs: no other release's code stands for it)."""
    from compat.harness.static.check import load_release
    from compat.harness.static.contract_history import vllm_releases
    from compat.harness.static.fingerprint import era, fingerprint, speculators_fingerprint
    from compat.harness.static.model_runner import model_runner
    from compat.harness.static.sources import SourceCache, StaticError
    from compat.harness.static.table import speculators_releases, static_table

    cache = cache or SourceCache()
    started = time.monotonic()
    vllm_all = vllm_releases(cache)
    spec_all = speculators_releases(cache)
    known = vllm_all if axis == "speculators" else spec_all
    if candidate:
        cache.add_local(Path(candidate))
    elif Version(fixed) not in {Version(r) for r in known}:
        what = "vLLM" if axis == "speculators" else "speculators"
        raise MatrixError(f"{what} {fixed} is not a release the table covers; releases: {', '.join(known)}")
    vllm = [fixed] if axis == "speculators" else in_range(vllm_all, vllm_range)
    speculators = spec_all if axis == "speculators" else [fixed]
    table = static_table(cache, vllm, speculators, detail=True)
    echo(f"[support] static layer: {len(vllm)} vLLM x {len(speculators)} speculators in {table['seconds']['total']} s")
    builds = {r for r in cache.releases(VLLM_DIST[backend]) if not Version(r).is_postrelease}
    fingerprints: dict[tuple[str, str], dict[str, Any]] = {}
    runners: dict[str, str] = {}
    for v in vllm:
        try:
            sources = cache.get("vllm", v)
        except StaticError as exc:
            runners[v] = f"not read: {exc}"
            continue
        runners[v] = model_runner(sources)["text"]
        for s in speculators:
            key = (v, era(s))
            if key not in fingerprints:
                fingerprints[key] = fingerprint(sources, s, cache.root)
    spec_fingerprints = {}
    for s in speculators:
        try:
            release = load_release(s, cache)
            spec_fingerprints[s] = speculators_fingerprint(release.speculators, tuple(release.companions))
        except StaticError:
            spec_fingerprints[s] = ""
    siblings = same_code_releases(fixed, spec_all, spec_fingerprints, cache) if axis == "vllm" and not candidate \
        else []
    conflicts = pin_conflicts(vllm, speculators, backend, builds, index, candidate)
    echo(f"[support] fingerprints, model runners and pins read in {time.monotonic() - started:.0f} s")
    facts = []
    for v in vllm:
        for s in speculators:
            row = table["rows"][v][s]
            fp = fingerprints.get((v, era(s)))
            facts.append(support.PairFacts(
                vllm=v, speculators=s, static_verdict=row["verdict"],
                broken_contracts=tuple(row.get("broken_contracts") or ()), fingerprint=fp["digest"] if fp else "",
                profile=profile_for(s).name, runtime_build=v in builds, conflict=conflicts.get((v, s), ""),
                speculators_fingerprint=spec_fingerprints[s]))
    sibling_facts = []
    if siblings:
        sibling_table = static_table(cache, vllm, siblings, detail=True)
        for v in vllm:
            fp = fingerprints.get((v, era(fixed)))
            for s in siblings:
                row = sibling_table["rows"][v][s]
                sibling_facts.append(support.PairFacts(
                    vllm=v, speculators=s, static_verdict=row["verdict"],
                    broken_contracts=tuple(row.get("broken_contracts") or ()), fingerprint=fp["digest"] if fp else "",
                    profile=profile_for(s).name, runtime_build=v in builds,
                    speculators_fingerprint=spec_fingerprints[fixed]))
        echo(f"[support] releases with the same extraction code as {fixed}: {', '.join(siblings)} "
             "(their measured cells can stand for this row's)")
    return Gathered(facts, table, fingerprints, runners, sibling_facts, round(time.monotonic() - started, 1))


def in_range(releases: list[str], vllm_range: tuple[str, str] | None) -> list[str]:
    """The releases from A to B (both included) of `--vllm-range A..B`; all of them without one."""
    if vllm_range is None:
        return releases
    low, high = Version(vllm_range[0]), Version(vllm_range[1])
    chosen = [r for r in releases if low <= Version(r) <= high]
    if not chosen:
        raise MatrixError(f"--vllm-range {vllm_range[0]}..{vllm_range[1]}: no vLLM release the table covers lies "
                          f"in it; releases: {', '.join(releases)}")
    return chosen


def same_code_releases(fixed: str, releases: list[str], known: dict[str, str], cache: Any) -> list[str]:
    """The other speculators releases with this one's profile and extraction-code fingerprint."""
    from compat.harness.static.check import load_release
    from compat.harness.static.fingerprint import speculators_fingerprint
    from compat.harness.static.sources import StaticError

    mine = known.get(fixed, "")
    if not mine:
        return []
    out = []
    for other in releases:
        if other == fixed or profile_for(other).name != profile_for(fixed).name:
            continue
        try:
            release = load_release(other, cache)
            digest = known.get(other) or speculators_fingerprint(release.speculators, tuple(release.companions))
        except StaticError:
            continue
        if digest == mine:
            out.append(other)
    return out


def pin_conflicts(vllm: list[str], speculators: list[str], backend: str, builds: set[str],
                  index: Any = None, candidate: str = "") -> dict[tuple[str, str], str]:
    """{(v, s): message} where the pair's published pins cannot be installed together: the install
    recipe's own check (compat.harness.recipe), from the packages' metadata, in seconds. A release
    with no runtime build is checked as the official vllm wheel."""
    from functools import lru_cache

    from compat.harness.pypi import PackageIndex, PackageIndexError
    from compat.harness.recipe import RecipeError, derive_recipe, uv_finds_python

    index = index or PackageIndex()
    finds = lru_cache(maxsize=None)(uv_finds_python)  # the machine's interpreters, asked once a row
    out = {}
    for v in vllm:
        for s in speculators:
            try:
                derive_recipe(Cell(v, s, backend if v in builds else "gpu", speculators_wheel=candidate), index,
                              finds=finds)
            except (RecipeError, PackageIndexError) as exc:
                out[(v, s)] = str(exc).split(": ", 1)[-1] if "cannot be installed" in str(exc) else str(exc)
    return out


def measured_from(records: list[CellRecord]) -> dict[tuple[str, str], support.Measured]:
    """Decided runtime records by pair (the verdict rule, the registry's fix of each known breakage)."""
    from compat.harness.nearest_kernels import record_label
    from compat.harness.verdict import decide

    out: dict[tuple[str, str], support.Measured] = {}
    for record in sorted(records, key=lambda r: bool(record_label(r))):  # genuine builds first
        if record.verdict is Verdict.UNTESTED_AT_RUNTIME:
            continue
        decision = decide(record)
        pair, label = (record.vllm, record.speculators), record_label(record)
        if label and pair in out and out[pair].provenance == support.MEASURED:
            continue  # the release's own build ran this pair: a nearest-kernel cell of it is validation, not the answer
        out[pair] = support.Measured(
            decision.verdict, record.id, decision.reasons, decision.known_fixes,
            provenance=support.NEAREST_KERNELS if label else support.MEASURED, label=label)
    return out


def _kept(cells: list[Cell], results: Path) -> dict[str, CellRecord]:
    """The cells' records kept here (results/), else published (published/results/)."""
    from compat.harness.published import RESULTS as PUBLISHED_RESULTS

    return {**stored_records(cells, PUBLISHED_RESULTS), **stored_records(cells, results)}


def kept_kernel_records(planned: list[support.Planned], cell_settings: CellSettings, backend: str,
                        results: Path) -> list[CellRecord]:
    """The kept nearest-kernel records (here, else published) of the pairs the row answers static only, the
    nearest build's last: a row plans no such cell (the scheduled day-it-ships job runs them, issue 46), but
    answers with one where it is kept (support.answer)."""
    from compat.harness.nearest_kernels import record_kernels, with_record_kernels
    from compat.harness.published import RESULTS as PUBLISHED_RESULTS
    from compat.shared.results import ResultFileError, load_cell, record_files, record_stem

    found: dict[str, CellRecord] = {}
    for p in planned:
        if p.kind != support.STATIC_ONLY:
            continue
        cell = cell_settings.apply(Cell(p.vllm, p.speculators, backend))
        for folder in (PUBLISHED_RESULTS, results):  # a record here replaces the published one of its id
            for path in record_files(folder, f"vllm-{p.vllm}__speculators-{p.speculators}__{backend}__kernels-*"):
                try:
                    record = load_cell(path)
                except ResultFileError:
                    continue
                if with_record_kernels(cell, record).id == record_stem(path) == record.id:
                    found[record_stem(path)] = record
    return sorted(found.values(), key=lambda r: Version(record_kernels(r)))


def older_probe_set(record: CellRecord) -> bool:
    """Whether the record's runner had an older probe set than this harness (probes were added since)."""
    from compat.harness.evidence import record_probe_set
    from compat.shared.manifest import PROBE_SET

    held = record_probe_set(record)
    return held is not None and held < PROBE_SET


def stored_records(cells: list[Cell], results: Path) -> dict[str, CellRecord]:
    """The cells' records kept in `results`."""
    from compat.shared.results import ResultFileError, evidence_path, load_cell

    out = {}
    for cell in cells:
        path = evidence_path(results / f"{cell.id}.json")  # or its .json.gz (published/results)
        if path.is_file():
            try:
                out[cell.id] = load_cell(path)
            except ResultFileError:
                continue
    return out


def published_settings(settings: Settings, fixed: str) -> Settings | None:
    """The published rows are measured with `--variants none`, float32, the tiny Llama: only a request
    that asks for nothing else is answered from (or measured beside) them; None for any other. A
    request for a published row that names no variants takes theirs, so its cell ids are the
    published ones (the settings returned)."""
    from compat.harness import published

    if not (published.RESULTS / "support" / f"{published.row_name(fixed)}.json").is_file():
        return None
    if settings.cell.dtype not in (None, DEFAULT_DTYPE) or settings.cell.model:
        return None
    if settings.cell.variants is None:
        return replace(settings, cell=replace(settings.cell, variants=()))
    return settings if settings.cell.variants == () else None


def answer_from_published(fixed: str, backend: str, settings: Settings) -> int | None:
    """The row from the published table (or one built here), printed with where each runtime cell's
    evidence comes from, and the report of it; None when neither holds the row."""
    from compat.harness import published
    from compat.harness.report.publish import Selection, publish
    from compat.harness.store import SUPPORT, Store

    name = published.row_name(fixed)
    output = settings.output
    local = output.results / "support" / f"{name}.json"
    source = local if local.is_file() else published.RESULTS / "support" / f"{name}.json"
    if not source.is_file():
        print(f"[support] speculators {fixed}: no published row (published/results/support/); measuring it", flush=True)
        return None
    doc = read_json(source, "support row")
    row = load_support(doc, str(source))
    if row.backend != backend:
        print(f"[support] the published row of speculators {fixed} is {row.backend}'s; measuring on {backend}",
              flush=True)
        return None
    where = "built here" if source == local else "published"
    print(f"[support] speculators {fixed} x every vLLM release: the {where} row ({source}); nothing runs "
          f"(--rerun measures again, --rerun --only ID one cell)", flush=True)
    print("[support] runtime cells:\n" + "\n".join(published.provenance_lines(doc, here=output.results)), flush=True)
    print(summary_text(doc), flush=True)
    ids = frozenset(c.cell_id for c in row.cells if c.cell_id) | other_backend_ids(row, backend)
    store = Store.open(output.store, output.results)
    try:
        imports = [published.RESULTS] + ([output.results] if output.results.is_dir() else [])
        report = publish(output.reports, store, imports, Selection(cells=ids, documents=frozenset({(SUPPORT, name)})))
    finally:
        store.close()
    # the exit status is the gate the report's page states (its cells' worst: a row with untested cells is 2)
    code = exit_codes.UNREADABLE if report.problems else report.gate()
    print(f"[support] the report: {output.reports}/compat.html (the answer first); gate: "
          f"{gate_words(code)} (exit {code})", flush=True)
    return code


def gate_words(code: int) -> str:
    from compat.harness.verdict import GATE_WORDS

    return GATE_WORDS.get(code) or exit_codes.TABLE["report"].get(code, str(code))


def other_backend_ids(row: SupportDocument, backend: str) -> frozenset[str]:
    """The published runs of the row's pairs on another backend (the H200's), so that its report keeps the
    answer's "measured on the other backend" column as the whole table's does."""
    from compat.harness import published
    from compat.shared.results import record_files, record_stem

    releases = {c.vllm for c in row.cells}
    found = set()
    for path in record_files(published.RESULTS, f"vllm-*__speculators-{row.fixed}__*"):
        parts = record_stem(path).split("__")
        if len(parts) >= 3 and parts[0].removeprefix("vllm-") in releases and parts[2] != backend:
            found.add(record_stem(path))
    return frozenset(found)


def run_support(settings: Settings) -> int:
    """A row or a column of the support table (settings.support), its runtime cells run with settings.cell."""
    from compat.harness.runner import finish, resolve_model, run_matrix

    request, selection = settings.support, settings.selection
    if request is None:
        raise ValueError("run_support: the settings ask for no row or column (--all-vllm / --all-speculators)")
    axis, fixed, backend = request.axis, request.fixed, request.backend
    try:
        fresh = request.rerun or request.plan_only or selection.list_cells or selection.only or request.check_inferred
        # a candidate is no published row; a range is a part of one, measured (its stored cells reused)
        if axis == ROW and not request.candidate and (as_published := published_settings(settings, fixed)) is not None:
            settings = as_published
            if not fresh and request.vllm_range is None \
                    and (answered := answer_from_published(fixed, backend, settings)) is not None:
                return answered
        gathered = gather(axis, fixed, backend, vllm_range=request.vllm_range, candidate=request.candidate)
        planned = support.plan(gathered.facts, axis)
        sibling_cells = {(f.vllm, f.speculators): settings.cell.apply(Cell(f.vllm, f.speculators, backend))
                         for f in gathered.siblings}
        sibling_records = _kept(list(sibling_cells.values()), settings.output.results)
        support.infer_across(planned, gathered.facts, gathered.siblings,
                             [pair for pair, cell in sibling_cells.items() if cell.id in sibling_records])
        seed = request.seed if request.seed is not None else random.SystemRandom().randrange(10**6)
        checks = support.pick_checks(planned, request.check_inferred, seed) if request.check_inferred else []
    except (MatrixError, support.SupportError) as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except Exception as exc:  # the index or a wheel could not be read
        print(f"compat: the support table needs the static layer, which failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    results = settings.output.results
    cells = {pair: settings.cell.apply(Cell(pair[0], pair[1], backend, speculators_wheel=request.candidate))
             for pair in support.runtime_pairs(planned)}
    if selection.list_cells:  # the cells still to run: none kept here or published (every one with --rerun), or
        # kept from an older probe set (the scheduled refresh runs them again with the probes added since)
        kept = {} if request.rerun else _kept(list(cells.values()), results)
        ids = [c.id for c in cells.values() if c.id not in kept or older_probe_set(kept[c.id])]
        print(json.dumps(ids) if selection.json else "\n".join(ids))
        return 0
    name = f"speculators-{fixed}" if axis == ROW else f"vllm-{fixed}"
    if request.candidate:
        from compat.harness import candidate

        name = candidate.row_name(fixed)
        print(f"[support] speculators {fixed} is a candidate ({request.candidate}): its row stands apart from the "
              f"released rows ({settings.output.results / 'support' / name}.json), and infers only from its own "
              "runs", flush=True)
    print(describe_plan(planned, axis, fixed, checks, seed if request.check_inferred else None, request.vllm_range),
          flush=True)
    stored = _kept(list(cells.values()), results)
    if request.rerun:  # measure again: every runtime cell, or only those named
        stored = {i: r for i, r in stored.items() if selection.only and i not in selection.only}
    unknown = [i for i in selection.only if i not in {c.id for c in cells.values()}]
    if unknown:
        print(f"compat: --only {', '.join(unknown)}: not a cell this table runs; its cells: "
              f"{', '.join(c.id for c in cells.values())}", file=sys.stderr)
        return exit_codes.USAGE
    to_run = [c for c in cells.values() if c.id not in stored and (not selection.only or c.id in selection.only)]
    records = list(stored.values()) + [r for r in sibling_records.values() if r.id not in stored]
    records += kept_kernel_records(planned, settings.cell, backend, results)
    from compat.harness import published

    for cell_id in stored:
        here = evidence_path(results / f"{cell_id}.json")
        where = here if here.is_file() else evidence_path(published.RESULTS / f"{cell_id}.json")
        print(f"[support] {cell_id}: stored result reused ({where}; --rerun runs it again)", flush=True)
    if to_run and not request.plan_only:
        from compat.harness.pypi import PackageIndex

        started = time.monotonic()
        # the runner holds and writes records as their JSON: the kept ones join it so, and come back typed
        ran = run_matrix(to_run, PackageIndex(), settings, resolve_model(settings.model_dir),
                         prior=[to_json(r) for r in records])
        records = [load_record(r) for r in ran]
        print(f"[support] {len(to_run)} runtime cell(s) in {time.monotonic() - started:.0f} s", flush=True)
    elif to_run:
        print(f"[support] --plan-only: {len(to_run)} runtime cell(s) not run: {', '.join(c.id for c in to_run)}")
    answers = support.answer(planned, measured_from(records),
                             {(v, s): gathered.table["rows"][v][s].get("broken_lines") or []
                              for v in gathered.table["rows"] for s in gathered.table["rows"][v]}, axis)
    table = support_document(axis, fixed, backend, planned, answers, gathered, seed if checks else None)
    if request.vllm_range is not None:
        table["vllm_range"] = list(request.vllm_range)
    if request.candidate:
        from compat.harness.candidate import describe

        table["candidate"] = describe(request.candidate)
    write_json_atomic(results / "support" / f"{name}.json", table)
    print(summary_text(table), flush=True)
    from compat.harness.store import SUPPORT

    # a row's report keeps the answer's other-backend column, as a published row's does (the H200's runs of its pairs)
    beside = other_backend_ids(load_support(table), backend) if axis == "vllm" and not request.candidate \
        else frozenset()
    return finish([to_json(r) for r in records], settings.output, documents=frozenset({(SUPPORT, name)}), beside=beside)


def support_document(axis: str, fixed: str, backend: str, planned: list[support.Planned],
                     answers: list[support.Answer], gathered: Gathered, seed: int | None) -> dict[str, Any]:
    """What results/support/<row>.json holds and the report's support section reads."""
    counts: dict[str, int] = {}
    for p in planned:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    return {
        "axis": axis, "fixed": fixed, "backend": backend,
        "cells": [a.as_dict() for a in answers],
        "plan": [p.as_dict() for p in planned],
        "counts": counts,
        "ranges": {k: v for k, v in support.ranges(answers, axis).items()},
        "agreement": support.agreement(answers), "seed": seed,
        "contracts": support.contract_support(_outcomes_along(axis, fixed, gathered.table)),
        "model_runners": dict(gathered.runners),
        "fingerprints": {f"{v}|{e}": fp for (v, e), fp in gathered.fingerprints.items()},
        "seconds_static": gathered.seconds,
    }


def _outcomes_along(axis: str, fixed: str, table: dict[str, Any]) -> dict[str, dict[str, str]]:
    """release along the axis -> {contract id: outcome}, in order (a row: vLLM releases)."""
    if axis == "vllm":
        return {v: table["rows"][v][fixed].get("outcomes") or {} for v in table["vllm"]
                if table["rows"][v][fixed]["verdict"] != "error"}
    return {s: table["rows"][fixed][s].get("outcomes") or {} for s in table["speculators"]
            if table["rows"][fixed][s]["verdict"] != "error"}


def describe_plan(planned: list[support.Planned], axis: str, fixed: str, checks: list[support.Planned],
                  seed: int | None, vllm_range: tuple[str, str] | None = None) -> str:
    releases = f"vLLM {vllm_range[0]} – {vllm_range[1]}" if vllm_range else "every vLLM release"
    what = (f"speculators {fixed} x {releases}" if axis == "vllm"
            else f"vLLM {fixed} x every speculators release")
    lines = [f"[support] {what}: {len(planned)} cells"]
    for p in planned:
        label = getattr(p, axis)
        if p.kind == support.RUNTIME:
            lines.append(f"[support]   {label}: runtime ({'; '.join(p.reasons)})")
        elif p.kind == support.INFERRED and p.inferred_from:
            src = p.inferred_from[0] if axis == "vllm" else p.inferred_from[1]
            if axis == "vllm" and p.inferred_from[1] != p.speculators:
                src = f"vLLM {p.inferred_from[0]} x speculators {p.inferred_from[1]} (the same extraction code)"
            lines.append(f"[support]   {label}: inferred from {src} (fingerprint {p.fingerprint})"
                         + (" [checked: runs too]" if p.check else ""))
        else:
            lines.append(f"[support]   {label}: {p.kind} ({'; '.join(p.reasons)})")
    if seed is not None:
        lines.append(f"[support] --check-inferred: {len(checks)} inferred cell(s) run to check the inference "
                     f"(seed {seed}; --seed {seed} picks them again): {', '.join(getattr(c, axis) for c in checks)}")
    counts = {k: sum(p.kind == k for p in planned) for k in (support.RUNTIME, support.INFERRED, support.STATIC_ONLY,
                                                             support.RESOLVER)}
    lines.append("[support] " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return "\n".join(lines)


def summary_text(document: dict[str, Any]) -> str:
    axis = document["axis"]
    lines = [f"[support] {o}: " + (", ".join(
        (r["version_added"] if r["version_added"] == r["version_last"]
         else f"{r['version_added']} – {r['version_last']}")
        for r in rs) or "none") for o, rs in document["ranges"].items()]
    agreement = document["agreement"]
    if agreement["checked"]:
        lines.append(f"[support] inference checked on {agreement['checked']} cell(s): {agreement['agree']} agree"
                     + "".join(f"\n[support]   {d}" for d in agreement["disagreements"]))
    del axis
    return "\n".join(lines)
