"""The package's layout says where each module runs, and its imports keep the sides apart.

- compat/harness: the harness's own environment (no vLLM there): never imports vLLM, speculators,
  torch or transformers, at module level or inside a function.
- compat/cell: inside a cell's venv, with the pinned vLLM and speculators; needs nothing of the harness.
- compat/worker, and the worker-side adapters (compat/cell/adapters/worker_extension.py, executor.py):
  loaded by vLLM into its own processes; import nothing from the harness.
- compat/shared: pure, used on both sides; imports neither side (nor vLLM and the like).
Read with ast over the files, so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "compat"
SIDES = ("harness", "cell", "worker", "shared")
ENTRY_MODULES = {"__init__.py", "__main__.py", "kimi.py", "explain.py", "report_cli.py", "bisect.py"}
WORKER_ADAPTERS = ("cell/adapters/worker_extension.py", "cell/adapters/executor.py")
CELL_ONLY_PACKAGES = ("vllm", "speculators", "torch", "transformers")


def modules(side: str) -> list[Path]:
    return sorted((PACKAGE / side).rglob("*.py"))


def imported(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Every module name an import statement in the file names (absolute or made absolute)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def offending(paths: list[Path], forbidden: tuple[str, ...], root: Path = PACKAGE.parent) -> list[str]:
    found = []
    for path in paths:
        for name in imported(path, root):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


def worker_side() -> list[Path]:
    return modules("worker") + [PACKAGE / p for p in WORKER_ADAPTERS]


def test_every_module_lives_on_a_side():
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ENTRY_MODULES)
    assert not flat, f"modules outside compat/{{{','.join(SIDES)}}}: {flat}"
    assert all(modules(side) for side in SIDES)
    assert all((PACKAGE / p).is_file() for p in WORKER_ADAPTERS)


def test_entry_modules_only_forward_to_the_harness():
    for name in ENTRY_MODULES - {"__init__.py"}:
        assert set(imported(PACKAGE / name)) <= {"sys", "compat.harness.runner", "compat.harness.runner.main",
                                                  f"compat.harness.{name[:-3]}",
                                                  f"compat.harness.{name[:-3]}.main"}, name


def test_the_harness_never_imports_vllm_speculators_torch_or_transformers():
    assert offending(modules("harness"), CELL_ONLY_PACKAGES) == []


def test_the_cell_side_needs_nothing_of_the_harness():
    assert offending(modules("cell"), ("compat.harness",)) == []


def test_the_worker_side_imports_nothing_from_the_harness():
    assert offending(worker_side(), ("compat.harness",)) == []


def test_the_shared_pieces_import_neither_side():
    forbidden = ("compat.harness", "compat.cell", "compat.worker", *CELL_ONLY_PACKAGES)
    assert offending(modules("shared"), forbidden) == []


def fixtures_used_by(paths: list[Path]) -> list[Path]:
    """The fixtures/ modules these files import, and those they import in turn."""
    root = PACKAGE.parent
    found: set[Path] = set()
    todo = list(paths)
    while todo:
        for name in imported(todo.pop(), root):
            parts = name.split(".")
            path = root / "fixtures" / f"{parts[1]}.py" if parts[0] == "fixtures" and len(parts) > 1 else None
            if path is not None and path.is_file() and path not in found:
                found.add(path)
                todo.append(path)
    return sorted(found)


def test_the_fixtures_the_harness_imports_need_no_cell_packages():
    """fixtures/kimi_shape.py (shapes, sizes) runs in the harness; fixtures/kimi_shaped.py (torch) only
    in the cell's interpreter, started as a process."""
    used = fixtures_used_by(modules("harness"))
    assert PACKAGE.parent / "fixtures" / "kimi_shape.py" in used
    assert PACKAGE.parent / "fixtures" / "kimi_shaped.py" not in used
    assert offending(used, CELL_ONLY_PACKAGES) == []


@pytest.mark.parametrize("source, forbidden, caught", [
    ("def f():\n    import torch\n", CELL_ONLY_PACKAGES, True),
    ("from vllm.config import VllmConfig\n", CELL_ONLY_PACKAGES, True),
    ("from compat.harness import verdict\n", ("compat.harness",), True),
    ("from compat import harness\n", ("compat.harness",), True),
    ("from ..harness.results import x\n", ("compat.harness",), True),
    ("import vllm_flash_attn\n", CELL_ONLY_PACKAGES, False),
    ("x = 'import torch'\n", CELL_ONLY_PACKAGES, False),
])
def test_the_rule_reads_lazy_relative_and_package_imports(tmp_path, source, forbidden, caught):
    path = tmp_path / "compat" / "cell" / "module.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(offending([path], forbidden, root=tmp_path)) is caught
