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

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

from packaging.version import Version

from compat.harness import support
from compat.harness.matrix import VLLM_DIST, Cell, MatrixError, check_version
from compat.shared.profiles import profile_for
from compat.shared.results import read_json, write_json_atomic


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nox -s compat -- (--all-vllm | --all-speculators)", add_help=False)
    parser.add_argument("--vllm", action="append", default=[])
    parser.add_argument("--speculators", action="append", default=[])
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--list-cells", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", action="append", default=[], metavar="CELL_ID",
                        help="run only these of the chosen cells (a CI job's one cell); the others stay unrun")
    return parser


def request_of(options: argparse.Namespace, rest: list[str]) -> tuple[str, str, argparse.Namespace]:
    """(axis, the fixed version, parsed rest); MatrixError names what is wrong."""
    args, unknown = _parser().parse_known_args(rest)
    if unknown:
        raise MatrixError(f"{' '.join(unknown)}: not accepted with --all-vllm/--all-speculators "
                          "(accepted: --vllm, --speculators, --backend, --list-cells, --json and the runner's "
                          "options)")
    if options.all_vllm and options.all_speculators:
        raise MatrixError("--all-vllm and --all-speculators: give one (a row or a column), not both")
    if options.all_vllm:
        if len(args.speculators) != 1 or args.vllm:
            raise MatrixError("--all-vllm takes exactly one --speculators S and no --vllm "
                              "(e.g. --speculators 0.8.1 --all-vllm)")
        return "vllm", check_version(args.speculators[0], "--speculators"), args
    if len(args.vllm) != 1 or args.speculators:
        raise MatrixError("--all-speculators takes exactly one --vllm V and no --speculators "
                          "(e.g. --vllm 0.22.1 --all-speculators)")
    return "speculators", check_version(args.vllm[0], "--vllm"), args


def _echo(line: str) -> None:
    print(line, flush=True)


def gather(axis: str, fixed: str, backend: str, cache: Any = None, index: Any = None,
           echo: Callable[[str], None] = _echo) -> dict[str, Any]:
    """The static table, fingerprints, runtime builds and pin conflicts of the row or column."""
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
    if Version(fixed) not in {Version(r) for r in known}:
        what = "vLLM" if axis == "speculators" else "speculators"
        raise MatrixError(f"{what} {fixed} is not a release the table covers; releases: {', '.join(known)}")
    vllm = [fixed] if axis == "speculators" else vllm_all
    speculators = spec_all if axis == "speculators" else [fixed]
    table = static_table(cache, vllm, speculators, detail=True)
    echo(f"[support] static layer: {len(vllm)} vLLM x {len(speculators)} speculators in {table['seconds']['total']} s")
    builds = {r for r in cache.releases(VLLM_DIST[backend]) if not Version(r).is_postrelease}
    fingerprints: dict[tuple[str, str], dict[str, Any]] = {}
    runners: dict[str, dict[str, Any]] = {}
    for v in vllm:
        try:
            sources = cache.get("vllm", v)
        except StaticError as exc:
            runners[v] = {"text": f"not read: {exc}"}
            continue
        runners[v] = model_runner(sources)
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
    siblings = same_code_releases(fixed, spec_all, spec_fingerprints, cache) if axis == "vllm" else []
    conflicts = pin_conflicts(vllm, speculators, backend, builds, index)
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
    return {"facts": facts, "table": table, "fingerprints": fingerprints, "runners": runners,
            "siblings": sibling_facts, "seconds": round(time.monotonic() - started, 1)}


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
                  index: Any = None) -> dict[tuple[str, str], str]:
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
                derive_recipe(Cell(v, s, backend if v in builds else "gpu"), index, finds=finds)
            except (RecipeError, PackageIndexError) as exc:
                out[(v, s)] = str(exc).split(": ", 1)[-1] if "cannot be installed" in str(exc) else str(exc)
    return out


def measured_from(records: list[dict[str, Any]]) -> dict[tuple[str, str], support.Measured]:
    """Decided runtime records by pair (the verdict rule, the registry's fix of each known breakage)."""
    from compat.harness.verdict import decide

    out = {}
    for record in records:
        if record.get("verdict") == "untested-at-runtime":
            continue
        decision = decide(record)
        fixes = []
        for _, cls in decision.classes:
            if cls.breakage is not None and cls.breakage.fix not in fixes:
                fixes.append(cls.breakage.fix)
        out[(str(record.get("vllm")), str(record.get("speculators")))] = support.Measured(
            decision.verdict, str(record.get("cell") or record.get("id") or ""), decision.reasons, tuple(fixes))
    return out


def _kept(cells: list[Cell], results: Path) -> dict[str, dict[str, Any]]:
    """The cells' records kept here (results/), else published (published/results/)."""
    from compat.harness.published import RESULTS as PUBLISHED_RESULTS

    return {**stored_records(cells, PUBLISHED_RESULTS), **stored_records(cells, results)}


def stored_records(cells: list[Cell], results: Path) -> dict[str, dict[str, Any]]:
    from compat.shared.results import ResultFileError, load_cell

    out = {}
    for cell in cells:
        path = results / f"{cell.id}.json"
        if path.is_file():
            try:
                out[cell.id] = load_cell(path)
            except ResultFileError:
                continue
    return out


def published_settings(options: argparse.Namespace, fixed: str) -> bool:
    """The published rows are measured with `--variants none`, float32, the tiny Llama: only a request
    that asks for nothing else is answered from (or measured beside) them. A request for a published
    row that names no variants takes theirs, so its cell ids are the published ones."""
    from compat.harness import published

    if not (published.RESULTS / "support" / f"{published.row_name(fixed)}.json").is_file():
        return False
    if getattr(options, "dtype", None) not in (None, "float32") or getattr(options, "model", None) is not None:
        return False
    if options.variants is None:
        options.variants = ()
    return bool(options.variants == ())


def answer_from_published(fixed: str, backend: str, options: argparse.Namespace) -> int | None:
    """The row from the published table (or one built here), printed with where each runtime cell's
    evidence comes from, and the report of it; None when neither holds the row."""
    from compat.harness import published
    from compat.harness.report.publish import Selection, publish
    from compat.harness.store import SUPPORT, Store

    name = published.row_name(fixed)
    local = options.results / "support" / f"{name}.json"
    source = local if local.is_file() else published.RESULTS / "support" / f"{name}.json"
    if not source.is_file():
        print(f"[support] speculators {fixed}: no published row (published/results/support/); measuring it", flush=True)
        return None
    doc = read_json(source, "support row")
    if doc.get("backend") != backend:
        print(f"[support] the published row of speculators {fixed} is {doc.get('backend')}'s; measuring on {backend}",
              flush=True)
        return None
    where = "built here" if source == local else "published"
    print(f"[support] speculators {fixed} x every vLLM release: the {where} row ({source}); nothing runs "
          f"(--rerun measures again, --rerun --only ID one cell)", flush=True)
    print("[support] runtime cells:\n" + "\n".join(published.provenance_lines(doc, here=options.results)), flush=True)
    print(summary_text(doc), flush=True)
    ids = frozenset(str(c["cell_id"]) for c in doc["cells"] if c.get("cell_id"))
    store = Store.open(getattr(options, "store", None), options.results)
    try:
        imports = [published.RESULTS] + ([options.results] if options.results.is_dir() else [])
        report = publish(options.reports, store, imports, Selection(cells=ids, documents=frozenset({(SUPPORT, name)})))
    finally:
        store.close()
    print(f"[support] the report: {options.reports}/compat.html (the answer first)", flush=True)
    return 0 if not report.problems else 3


def run_support(options: argparse.Namespace, rest: list[str]) -> int:
    from compat.harness.runner import finish, resolve_model, run_matrix, with_run_settings

    try:
        axis, fixed, args = request_of(options, rest)
        fresh = options.rerun or options.plan_only or args.list_cells or args.only or options.check_inferred
        if axis == "vllm" and published_settings(options, fixed) and not fresh:
            answered = answer_from_published(fixed, args.backend, options)
            if answered is not None:
                return answered
        gathered = gather(axis, fixed, args.backend)
        planned = support.plan(gathered["facts"], axis)
        sibling_cells = {(f.vllm, f.speculators): with_run_settings(Cell(f.vllm, f.speculators, args.backend), options)
                         for f in gathered.get("siblings") or []}
        sibling_records = _kept(list(sibling_cells.values()), options.results)
        support.infer_across(planned, gathered["facts"], gathered.get("siblings") or [],
                             [pair for pair, cell in sibling_cells.items() if cell.id in sibling_records])
        seed = options.seed if options.seed is not None else random.SystemRandom().randrange(10**6)
        checks = support.pick_checks(planned, options.check_inferred, seed) if options.check_inferred else []
    except (MatrixError, support.SupportError) as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the index or a wheel could not be read
        print(f"compat: the support table needs the static layer, which failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    cells = {pair: with_run_settings(Cell(pair[0], pair[1], args.backend), options)
             for pair in support.runtime_pairs(planned)}
    if args.list_cells:  # the cells still to run: none kept here or published (every one with --rerun)
        kept = {} if options.rerun else _kept(list(cells.values()), options.results)
        ids = [c.id for c in cells.values() if c.id not in kept]
        print(__import__("json").dumps(ids) if args.json else "\n".join(ids))
        return 0
    name = f"speculators-{fixed}" if axis == "vllm" else f"vllm-{fixed}"
    print(describe_plan(planned, axis, fixed, checks, seed if options.check_inferred else None), flush=True)
    stored = _kept(list(cells.values()), options.results)
    if options.rerun:  # measure again: every runtime cell, or only those named
        stored = {i: r for i, r in stored.items() if args.only and i not in args.only}
    unknown = [i for i in args.only if i not in {c.id for c in cells.values()}]
    if unknown:
        print(f"compat: --only {', '.join(unknown)}: not a cell this table runs; its cells: "
              f"{', '.join(c.id for c in cells.values())}", file=sys.stderr)
        return 2
    to_run = [c for c in cells.values() if c.id not in stored and (not args.only or c.id in args.only)]
    records = list(stored.values()) + [r for r in sibling_records.values() if r["id"] not in stored]
    for cell_id in stored:
        where = "results" if (options.results / f"{cell_id}.json").is_file() else "published/results"
        print(f"[support] {cell_id}: stored result reused ({where}/{cell_id}.json; --rerun runs it again)", flush=True)
    if to_run and not options.plan_only:
        from compat.harness.pypi import PackageIndex

        started = time.monotonic()
        records = run_matrix(to_run, PackageIndex(), options, resolve_model(options.model), prior=records)
        print(f"[support] {len(to_run)} runtime cell(s) in {time.monotonic() - started:.0f} s", flush=True)
    elif to_run:
        print(f"[support] --plan-only: {len(to_run)} runtime cell(s) not run: {', '.join(c.id for c in to_run)}")
    answers = support.answer(planned, measured_from(records),
                             {(v, s): gathered["table"]["rows"][v][s].get("broken_lines") or []
                              for v in gathered["table"]["rows"] for s in gathered["table"]["rows"][v]}, axis)
    table = support_document(axis, fixed, args.backend, planned, answers, gathered, seed if checks else None)
    write_json_atomic(options.results / "support" / f"{name}.json", table)
    print(summary_text(table), flush=True)
    from compat.harness.store import SUPPORT

    return finish(records, options, documents=frozenset({(SUPPORT, name)}))


def support_document(axis: str, fixed: str, backend: str, planned: list[support.Planned],
                     answers: list[support.Answer], gathered: dict[str, Any], seed: int | None) -> dict[str, Any]:
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
        "contracts": support.contract_support(_outcomes_along(axis, fixed, gathered["table"])),
        "model_runners": {v: r.get("text", "") for v, r in gathered["runners"].items()},
        "fingerprints": {f"{v}|{e}": fp for (v, e), fp in gathered["fingerprints"].items()},
        "seconds_static": gathered["seconds"],
    }


def _outcomes_along(axis: str, fixed: str, table: dict[str, Any]) -> dict[str, dict[str, str]]:
    """release along the axis -> {contract id: outcome}, in order (a row: vLLM releases)."""
    if axis == "vllm":
        return {v: table["rows"][v][fixed].get("outcomes") or {} for v in table["vllm"]
                if table["rows"][v][fixed]["verdict"] != "error"}
    return {s: table["rows"][fixed][s].get("outcomes") or {} for s in table["speculators"]
            if table["rows"][fixed][s]["verdict"] != "error"}


def describe_plan(planned: list[support.Planned], axis: str, fixed: str, checks: list[support.Planned],
                  seed: int | None) -> str:
    what = (f"speculators {fixed} x every vLLM release" if axis == "vllm"
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
