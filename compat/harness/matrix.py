"""Which (vLLM, speculators, backend) cells to run: the default matrix file, the command line,
and the check that every version is a real release of the package that backend installs."""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from compat.shared.axes import BACKENDS as BACKENDS
from compat.shared.axes import DEFAULT_BACKEND
from compat.shared.axes import DEFAULT_DTYPE as DEFAULT_DTYPE
from compat.shared.axes import DTYPES as DTYPES
from compat.shared.axes import SERVER_VARIANTS as SERVER_VARIANTS
from compat.shared.axes import VLLM_DIST as VLLM_DIST
from compat.shared.manifest import PROBE_SET, variants_of
from compat.shared.profiles import profile_for

if TYPE_CHECKING:
    from compat.harness.pypi import Index

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

SPECULATORS_DIST = "speculators"
CANDIDATE = "candidate"  # the id part of a cell whose speculators is a candidate build (Cell.speculators_wheel)
DEFAULT_MATRIX = Path(__file__).with_name("matrix.toml")
CELL_KEYS = {"vllm": True, "speculators": True, "backend": False, "why": False, "variants": False}  # key -> required


class MatrixError(ValueError):
    """A bad matrix file, command line or version; the message names the input and what is accepted."""


@dataclass(frozen=True)
class Cell:
    """One run of a (vLLM, speculators) pair: the pair, the build it installs, and every setting that
    changes its results. The id names all of them, so runs of one pair with different settings keep
    their own results/<id>.json, results/<id>/ and JUnit file (`vllm-V__speculators-S__BACKEND`, plus
    `__SUFFIX` for each setting that is not the default: see `id`)."""

    vllm: str
    speculators: str
    backend: str = DEFAULT_BACKEND
    vllm_wheel: str = ""  # a local or nightly wheel file (--vllm PATH.whl) instead of the index's release
    # a candidate speculators build (--speculators PATH: compat.harness.candidate), not a release: `candidate` in the id
    speculators_wheel: str = ""
    variants: tuple[str, ...] | None = None  # server-era variants to serve (matrix.toml); None: all
    dtype: str = DEFAULT_DTYPE  # --dtype (CellSettings.apply)
    model: str = ""  # --model's folder (absolute; CellSettings.apply); "": the tiny Llama fixture
    # the probe set of the runner (compat.shared.probe_catalog): "every variant" is that set's variants
    probe_set: int = field(default=PROBE_SET, compare=False)

    @property
    def id(self) -> str:
        """`vllm-V__speculators-S__BACKEND`, then, only where not the default: `__candidate` (S is a candidate
        build's own version, --speculators PATH: never a released row's id), `__bfloat16` (--dtype),
        `__variants-A+B` (the server-era variants a server-era matrix entry selects, sorted, when not
        all of them (of the probe set's: a record lists those of its runner); `variants-none` for an empty
        list), `__model-NAME` (--model's folder name).
        The default ids stay what they were before settings were named."""
        return "__".join([f"vllm-{self.vllm}", f"speculators-{self.speculators}", self.backend,
                          *self.setting_suffixes])

    @property
    def setting_suffixes(self) -> tuple[str, ...]:
        suffixes = []
        if self.speculators_wheel:
            suffixes.append(CANDIDATE)
        if self.dtype != DEFAULT_DTYPE:
            suffixes.append(self.dtype)
        if self.variants_selected is not None and set(self.variants_selected) != set(variants_of(self.probe_set)):
            suffixes.append("variants-" + ("+".join(sorted(set(self.variants_selected))) or "none"))
        if self.model:
            suffixes.append(f"model-{model_slug(self.model)}")
        return tuple(suffixes)

    @property
    def variants_selected(self) -> tuple[str, ...] | None:
        """The server-era variants this cell serves (every one where its matrix entry names none);
        None before the server era (speculators < 0.5 serves none: a `variants` key changes nothing)."""
        if profile_for(self.speculators).name != "server":  # compat/cell/probes/conftest.py server_profile: n/a there
            return None
        return variants_of(self.probe_set) if self.variants is None else self.variants

    @property
    def environment_cell(self) -> "Cell":
        """The cell its environment depends on: the pair, backend and wheel, no run setting (the runs
        of one pair with different settings share one venv)."""
        return Cell(self.vllm, self.speculators, self.backend, self.vllm_wheel, self.speculators_wheel)


def model_slug(model: str) -> str:
    """--model's folder name as an id part: letters, digits, '.', '-' and single '_' only."""
    name = Path(model).name or "model"
    return re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9._-]", "_", name))


@dataclass(frozen=True)
class CellSettings:
    """The run's settings that change a cell's results, and so are part of its id: --dtype, --model,
    --variants (compat.harness.settings reads them). `apply` is the one place they land on a cell."""

    dtype: str | None = None  # None: float32, or (with --only) the dtype an --only id names
    model: str = ""  # the --model folder, absolute; "": the tiny Llama fixture
    variants: tuple[str, ...] | None = None  # None: the matrix entry's own (else every one)

    def apply(self, cell: Cell, dtype: str | None = None) -> Cell:
        """The cell as these settings run it (`dtype`: one an --only id names, where --dtype is not given)."""
        return replace(cell, dtype=self.dtype or dtype or DEFAULT_DTYPE, model=self.model,
                       variants=cell.variants if self.variants is None else self.variants)


@dataclass(frozen=True)
class MatrixRequest:
    """The cells `nox -s compat -- ...` selects (compat.harness.settings reads them). Empty
    vllm/speculators means the matrix file."""

    vllm: tuple[str, ...] = ()
    speculators: tuple[str, ...] = ()
    wheels: tuple[tuple[str, str], ...] = ()  # (version, path) of each --vllm PATH.whl
    speculators_wheels: tuple[tuple[str, str], ...] = ()  # (version, wheel) of each candidate, --speculators PATH
    backend: str | None = None  # None: each matrix cell's own backend (cpu for the cross product)
    matrix: Path = DEFAULT_MATRIX
    only: tuple[str, ...] = ()
    list_cells: bool = False
    json: bool = False


def check_version(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise MatrixError(f"{where}: {value!r} is a {type(value).__name__}; expected a version string like \"0.16.0\"")
    try:
        Version(value)
    except InvalidVersion:
        raise MatrixError(f"{where}: {value!r} is not a PEP 440 version; "
                          f"expected e.g. \"0.16.0\" or \"0.4.0.1\"") from None
    return value


def check_backend(value: object, where: str) -> str:
    if value not in BACKENDS:
        raise MatrixError(f"{where}: backend {value!r} is not one of {', '.join(map(repr, BACKENDS))}")
    return value


def cross_product(vllm_versions: Iterable[str], speculators_versions: Iterable[str], backend: str = DEFAULT_BACKEND,
                  wheels: Iterable[tuple[str, str]] = (), speculators_wheels: Iterable[tuple[str, str]] = ()
                  ) -> list[Cell]:
    """Every (vllm, speculators) pair, vllm-major order; versions equal under PEP 440 count once.
    `wheels` / `speculators_wheels`: (version, path) of the local wheels some of those versions are."""
    check_backend(backend, "cross product")
    vllm = _unique_versions(vllm_versions, "--vllm")
    speculators = _unique_versions(speculators_versions, "--speculators")
    wheel_of, candidate_of = dict(wheels), dict(speculators_wheels)
    return [Cell(v, s, backend, wheel_of.get(v, ""), candidate_of.get(s, ""))
            for v, s in itertools.product(vllm, speculators)]


def wheel_version(value: str, option: str = "--vllm", dists: Sequence[str] = tuple(VLLM_DIST.values())
                  ) -> tuple[str, str]:
    """`--vllm PATH.whl` (or `option`'s wheel): (version, absolute path) of a wheel file of one of `dists`."""
    path = Path(value)
    accepted = " or ".join(f"{d}-*.whl" for d in dists)
    if not path.is_file():
        raise MatrixError(f"{option} {value}: no such wheel file; expected a path to a {accepted} or a version "
                          "like 0.16.0")
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise MatrixError(f"{option} {value}: not a wheel file name ({exc})") from None
    if name not in {canonicalize_name(d) for d in dists}:
        raise MatrixError(f"{option} {value}: a wheel of {name}; expected one of {', '.join(dists)}")
    return str(version), str(path.resolve())


def _unique_versions(versions: Iterable[str], where: str) -> list[str]:
    seen: set[Version] = set()
    unique = []
    for value in versions:
        parsed = Version(check_version(value, where))
        if parsed not in seen:
            seen.add(parsed)
            unique.append(value)
    return unique


def load_matrix(path: Path = DEFAULT_MATRIX) -> list[Cell]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise MatrixError(f"cannot read matrix file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"matrix file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"cell"})
    if unknown:
        raise MatrixError(f"matrix file {path}: unknown top-level key(s) {', '.join(unknown)}; only [[cell]] tables "
                          "are accepted")
    tables = data.get("cell", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise MatrixError(f"matrix file {path}: 'cell' must be an array of tables written [[cell]]")
    header_lines = [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*cell\s*\]\]", line)]
    cells: list[Cell] = []
    first_seen: dict[str, str] = {}
    for index, table in enumerate(tables):
        line = header_lines[index] if index < len(header_lines) else None
        where = f"{path}:{line} [[cell]] #{index + 1}" if line else f"{path} [[cell]] #{index + 1}"
        cell = _cell_from_table(table, where)
        if cell.id in first_seen:
            raise MatrixError(f"{where}: duplicate cell {cell.id} (first declared at {first_seen[cell.id]})")
        first_seen[cell.id] = where
        cells.append(cell)
    if not cells:
        raise MatrixError(f"matrix file {path} declares no [[cell]]; add at least one with vllm and speculators keys")
    return cells


def _cell_from_table(table: dict[str, Any], where: str) -> Cell:
    unknown = sorted(set(table) - set(CELL_KEYS))
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted keys: {', '.join(CELL_KEYS)}")
    missing = [key for key, required in CELL_KEYS.items() if required and key not in table]
    if missing:
        raise MatrixError(f"{where}: missing key(s) {', '.join(missing)}")
    if "why" in table and not isinstance(table["why"], str):
        raise MatrixError(f"{where}: why = {table['why']!r}; expected a string")
    return Cell(
        vllm=check_version(table["vllm"], f"{where} vllm"),
        speculators=check_version(table["speculators"], f"{where} speculators"),
        backend=check_backend(table.get("backend", DEFAULT_BACKEND), f"{where} backend"),
        variants=check_variants(table["variants"], f"{where} variants") if "variants" in table else None,
    )


def check_variants(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MatrixError(f"{where} = {value!r}; expected a list of variant names from {list(SERVER_VARIANTS)}")
    unknown = [v for v in value if v not in SERVER_VARIANTS]
    if unknown:
        raise MatrixError(f"{where}: unknown variant(s) {', '.join(map(repr, unknown))}; "
                          f"accepted: {', '.join(SERVER_VARIANTS)}")
    return tuple(value)


def cells_for(request: MatrixRequest, settings: CellSettings = CellSettings()) -> list[Cell]:
    """The cells a request selects, run with `settings`, in run order. Without --dtype, --only may
    name a cell of either dtype (an id from `--list-cells --dtype bfloat16` runs in bfloat16)."""
    if request.vllm:
        cells = cross_product(request.vllm, request.speculators, request.backend or DEFAULT_BACKEND, request.wheels,
                              request.speculators_wheels)
    else:
        cells = load_matrix(request.matrix)
        if request.backend:
            cells = [replace(c, backend=request.backend) for c in cells]
    listed = _unique_ids(settings.apply(c) for c in cells)
    if not request.only:
        return listed
    pool = listed if settings.dtype else _unique_ids(settings.apply(c, dtype=d) for c in cells for d in DTYPES)
    unknown = [cell_id for cell_id in request.only if cell_id not in {c.id for c in pool}]
    if unknown:
        other_dtypes = ", ".join(d for d in DTYPES if d != DEFAULT_DTYPE)
        raise MatrixError(f"--only {', '.join(unknown)}: no such cell; cells: {', '.join(sorted(c.id for c in listed))}"
                          f"{'' if settings.dtype else ' (without --dtype, also their ' + other_dtypes + ' ids)'}")
    return [c for c in pool if c.id in request.only]


def _unique_ids(cells: Iterable[Cell]) -> list[Cell]:
    """The first cell of each id (a matrix cell overridden to another backend may meet its twin)."""
    unique: dict[str, Cell] = {}
    for cell in cells:
        unique.setdefault(cell.id, cell)
    return list(unique.values())


def describe_cells(cells: Sequence[Cell], as_json: bool = False) -> str:
    """What --list-cells prints: one id a line, or a JSON list (for a CI job matrix)."""
    ids = [c.id for c in cells]
    return json.dumps(ids) if as_json else "\n".join(ids)


def check_released(cells: Iterable[Cell], index: Index) -> None:
    """Every version must be a release of the package its backend installs (MatrixError if not)."""
    wanted: dict[tuple[str, str], None] = {}
    for cell in cells:
        if cell.vllm_wheel:  # a local wheel is its own release; only its kind must match the backend
            check_wheel_backend(cell)
        else:
            wanted[(VLLM_DIST[cell.backend], cell.vllm)] = None
        if not cell.speculators_wheel:  # a candidate is no release: its version is its own
            wanted[(SPECULATORS_DIST, cell.speculators)] = None
    problems = []
    releases_of: dict[str, list[str]] = {}
    for package, version in wanted:
        if package not in releases_of:
            releases_of[package] = index.releases(package)
        releases = releases_of[package]
        if Version(version) not in {Version(r) for r in releases}:
            problems.append(missing_release_message(package, version, releases))
    if problems:
        raise MatrixError("\n".join(problems))


def check_wheel_backend(cell: Cell) -> None:
    name = parse_wheel_filename(Path(cell.vllm_wheel).name)[0]
    if name != canonicalize_name(VLLM_DIST[cell.backend]):
        other = next(b for b, d in VLLM_DIST.items() if canonicalize_name(d) == name)
        raise MatrixError(f"--vllm {cell.vllm_wheel}: a {name} wheel, but the {cell.backend} backend installs "
                          f"{VLLM_DIST[cell.backend]}; pass --backend {other}")


def missing_release_message(package: str, version: str, releases: Sequence[str]) -> str:
    if not releases:
        return f"{package} has no release {version}; it has no releases at all"
    near = nearby_releases(version, releases)
    return (
        f"{package} has no release {version}; releases from {near[0]} to {near[-1]}: {', '.join(near)} "
        f"(all: {releases[0]} ... {releases[-1]})"
    )


def nearby_releases(version: str, releases: Sequence[str]) -> list[str]:
    """Releases within one minor version of `version`; else the three on either side of it."""
    target = Version(version)
    ordered = sorted(releases, key=Version)
    near = [r for r in ordered if Version(r).major == target.major and abs(Version(r).minor - target.minor) <= 1]
    if near:
        return near
    below = [r for r in ordered if Version(r) < target]
    above = [r for r in ordered if Version(r) > target]
    return below[-3:] + above[:3]
