"""Which vLLM functions a runtime cell executed: the `coverage` package in every Python process of the cell (the
probe run, `vllm serve`, its engine core and workers), read back as the vLLM functions whose bodies ran.

The cell venv gets coverage (COVERAGE) and a `.pth` file that starts it in each interpreter where
COVERAGE_PROCESS_START names a configuration (coverage's own subprocess mechanism); the probe run is given that
variable (`settings`). Measured: vLLM only (`source_pkgs`), lines not branches, every process in parallel data
files, saved on SIGUSR1 (STARTUP) before the harness stops `vllm serve`, and at a normal exit. After the probes,
`collect` combines the data and maps each executed line to the innermost function around it in the cell's own
vLLM sources: the sidecar `executed.json.gz` beside the cell's probe results holds {module path: [qualified
names]} plus the module-level lines that ran. compat.harness.code_key reads it (inference keyed on what ran,
issue 30). Opt-in (`--record-executed`): it slows every Python line of vLLM, so the published table's records are
made without it. What runs in each process is compat.cell.executed_startup (why a save turns the collector off).

Only in venvs the harness built: an existing interpreter (`--python`) is not changed.
"""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from compat.harness.cell_envs import checkout_on_path, interpreter_facts

COVERAGE = "coverage==7.17.5"
PTH = "compat_executed.pth"
RC = "executed.coveragerc"
DATA_DIR = "executed-data"
SIDECAR = "executed.json.gz"
FORMAT = 1
# The .pth line: inert unless COVERAGE_PROCESS_START is set (the venv keeps it for later, unrecorded runs); the
# cell venv's editable install of this checkout (a `.pth` that sorts before it) makes compat importable there.
STARTUP = ("import os; os.environ.get('COVERAGE_PROCESS_START') and "
           "__import__('compat.cell.executed_startup', fromlist=['start']).start()\n")


def prepare(python: Path, purelib: Path, uv: list[str]) -> float:
    """coverage and the start-up `.pth` in the cell venv (once); the seconds it took."""
    started = time.monotonic()
    if not interpreter_facts(python, ["coverage"])["importable"]["coverage"]:
        subprocess.run([*uv, "pip", "install", "--python", str(python), COVERAGE], check=True, capture_output=True)
    (purelib / PTH).write_text(STARTUP)
    return round(time.monotonic() - started, 2)


def settings(work_dir: Path) -> dict[str, str]:
    """The probe run's environment for recording: COVERAGE_PROCESS_START, with its configuration written."""
    data = work_dir / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    for old in data.glob(".coverage*"):
        old.unlink()
    rc = work_dir / RC
    # no `sigterm = True`: SIGUSR1 saves before the harness stops a server, and coverage stays out of the processes'
    # own shutdown
    rc.write_text("[run]\nsource_pkgs = vllm\nparallel = True\nconcurrency = thread, multiprocessing\n"
                  f"data_file = {data / '.coverage'}\n")
    return {"COVERAGE_PROCESS_START": str(rc)}


def collect(work_dir: Path, python: Path) -> dict[str, Any]:
    """Combine the cell's coverage data (in the cell's interpreter, which has coverage) into the sidecar; a
    summary for the caller: functions and modules executed, data files read, the seconds it took."""
    started = time.monotonic()
    data = work_dir / DATA_DIR
    out = subprocess.run([str(python), "-m", "compat.cell.executed_lines", str(data)], capture_output=True,
                         text=True, env=checkout_on_path())
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-400:]}
    lines: dict[str, list[int]] = json.loads(out.stdout)
    functions, module_lines = executed_functions(lines)
    # coverage warns on stderr (and exits 0) about data it could not read: fewer functions, a key too loose
    warnings = [line for line in out.stderr.splitlines() if "arning" in line or "rror" in line][:10]
    sidecar = {"format": FORMAT, "functions": functions, "module_lines": module_lines,
               "data_files": len(list(data.glob(".coverage.*"))), "warnings": warnings}
    with gzip.open(work_dir / SIDECAR, "wt") as handle:
        json.dump(sidecar, handle, sort_keys=True)
    return {"functions": sum(map(len, functions.values())), "modules": len(functions),
            "data_files": sidecar["data_files"], "warnings": len(warnings),
            "seconds": round(time.monotonic() - started, 2)}


def executed_functions(lines: dict[str, list[int]]) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """{vllm/... path: sorted qualified names of the functions whose body lines ran} and {path: the module-level
    lines that ran}, from {absolute file: executed lines}."""
    functions: dict[str, list[str]] = {}
    module_lines: dict[str, list[int]] = {}
    for file, ran in lines.items():
        relative = vllm_path(file)
        if relative is None:
            continue
        try:
            tree = ast.parse(Path(file).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        spans = function_spans(tree)
        names, top = set(), []
        for line in ran:
            inner = innermost(spans, line)
            if inner is None:
                top.append(line)
            else:
                names.add(inner)
        if names:
            functions[relative] = sorted(names)
        module_lines[relative] = sorted(top)
    return functions, module_lines


def vllm_path(file: str) -> str | None:
    """`vllm/...py` of a file in a site-packages, None for anything else."""
    parts = Path(file).parts
    if "vllm" not in parts:
        return None
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("vllm"):])


def function_spans(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first body line, last line, qualified name) of every function, methods and nested ones included."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                spans.append((child.body[0].lineno, child.end_lineno or child.body[-1].lineno, name))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return spans


def innermost(spans: list[tuple[int, int, str]], line: int) -> str | None:
    inside = [(end - start, name) for start, end, name in spans if start <= line <= end]
    return min(inside)[1] if inside else None


def read(work_dir: Path) -> dict[str, Any] | None:
    """A cell's sidecar, None where it recorded none."""
    path = work_dir / SIDECAR
    if not path.is_file():
        return None
    with gzip.open(path, "rt") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded
