"""The package's layout says where each module runs, and its imports keep the sides apart.

- compat/harness: the harness's own environment (no vLLM there): never imports vLLM, speculators,
  torch or transformers, at module level or inside a function.
- compat/cell: inside a cell's venv, with the pinned vLLM and speculators; needs nothing of the harness.
  It names worker modules to vLLM by string; it imports one only where CELL_IMPORTS_OF_THE_WORKER says.
- compat/worker: loaded by vLLM into its own processes (worker extensions, the with_compat adapters
  there, shims); imports nothing from the harness nor the cell side.
- compat/cell/probes: the probes themselves (pytest suites run by the cell runner inside the cell's venv):
  the cell side's rule.
- compat/shared: pure, used on both sides; imports neither side (nor vLLM and the like).
- compat/fixtures: the tiny models' builders (may use torch and transformers); import neither the harness
  nor the cell or worker side. The harness may import those of them that need no cell package.
Read with ast over the files, so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "compat"
SIDES = ("harness", "cell", "worker", "shared", "fixtures")
ENTRY_MODULES = {"__init__.py", "__main__.py", "kimi.py", "explain.py", "report_cli.py", "bisect.py"}
# The cell asks a worker-side shim whether this vLLM build needs it, before naming it to `vllm serve`.
CELL_IMPORTS_OF_THE_WORKER = {"cell/server_models.py": ("compat.worker.cpu_moe_shim",)}
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


def test_every_module_lives_on_a_side():
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ENTRY_MODULES)
    assert not flat, f"modules outside compat/{{{','.join(SIDES)}}}: {flat}"
    assert all(modules(side) for side in SIDES)
    assert all((PACKAGE / p).is_file() for p in CELL_IMPORTS_OF_THE_WORKER)


def test_entry_modules_only_forward_to_the_harness():
    for name in ENTRY_MODULES - {"__init__.py"}:
        command = name[:-3].removesuffix("_cli")
        assert set(imported(PACKAGE / name)) <= {"sys", "compat.harness.cli", "compat.harness.cli.main",
                                                  *(f"compat.harness.{module}{main}"
                                                    for module in (command, f"{command}_cli")
                                                    for main in ("", ".main"))}, name


def test_the_harness_never_imports_vllm_speculators_torch_or_transformers():
    assert offending(modules("harness"), CELL_ONLY_PACKAGES) == []


def test_the_cell_side_needs_nothing_of_the_harness():
    assert offending(modules("cell"), ("compat.harness",)) == []


def test_the_worker_side_imports_nothing_from_the_harness_or_the_cell():
    assert offending(modules("worker"), ("compat.harness", "compat.cell")) == []


def test_the_cell_imports_the_worker_side_only_where_the_layout_says():
    found = []
    for path in modules("cell"):
        allowed = CELL_IMPORTS_OF_THE_WORKER.get(str(path.relative_to(PACKAGE)), ())
        # `from compat.worker import cpu_moe_shim` names the package and the module: both are that import
        found += [line for line in offending([path], ("compat.worker",))
                  if not any(name == line.split(" imports ")[1] or name.startswith(line.split(" imports ")[1] + ".")
                             for name in allowed)]
    assert found == []


def test_the_shared_pieces_import_neither_side():
    forbidden = ("compat.harness", "compat.cell", "compat.worker", *CELL_ONLY_PACKAGES)
    assert offending(modules("shared"), forbidden) == []


def test_the_fixtures_import_neither_the_harness_nor_the_cell_or_worker_side():
    assert offending(modules("fixtures"), ("compat.harness", "compat.cell", "compat.worker")) == []


def fixtures_used_by(paths: list[Path]) -> list[Path]:
    """The compat/fixtures modules these files import, and those they import in turn."""
    found: set[Path] = set()
    todo = list(paths)
    while todo:
        for name in imported(todo.pop()):
            parts = name.split(".")
            path = PACKAGE / "fixtures" / f"{parts[2]}.py" if parts[:2] == ["compat", "fixtures"] and len(parts) > 2 \
                else None
            if path is not None and path.is_file() and path not in found:
                found.add(path)
                todo.append(path)
    return sorted(found)


def test_the_fixtures_the_harness_imports_need_no_cell_packages():
    """compat/fixtures/tiny_llama.py (numpy) is built by the harness; compat/fixtures/kimi_shaped.py (torch)
    only in the cell's interpreter, started as a process."""
    used = fixtures_used_by(modules("harness"))
    assert PACKAGE / "fixtures" / "tiny_llama.py" in used
    assert PACKAGE / "fixtures" / "kimi_shaped.py" not in used
    assert offending(used, CELL_ONLY_PACKAGES) == []


def test_the_probes_live_on_the_cell_side():
    """What runs inside a cell is under compat/, where the cell side's rule reads it; tests/ tests the harness."""
    probes = modules("cell/probes")
    assert {p.parent.name for p in probes if p.name.startswith("test_")} == {"in_process", "server", "kimi"}
    tests = PACKAGE.parent / "tests"
    # tests/faults holds the harness's fault-injection probes (run by its own tests, never by a cell)
    outside = [p for p in tests.rglob("*.py") if p.parent.name != "faults" and marks_probes(p)]
    assert not outside, f"probes under tests/: move them to compat/cell/probes: {outside}"
    assert all(marks_probes(p) for p in probes if p.name.startswith("test_"))


def marks_probes(path: Path) -> bool:
    """A function of the file is decorated @pytest.mark.probe(...)."""
    return any(isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.probe"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in node.decorator_list)


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


def import_graph() -> dict[str, set[str]]:
    """compat's modules and the modules of ours each imports (lazy and TYPE_CHECKING imports count)."""
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported_name in imported(path):
            while imported_name and imported_name not in modules:
                imported_name = imported_name.rpartition(".")[0]
            if imported_name and imported_name != name and not modules[imported_name].name == "__init__.py":
                targets.add(imported_name)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                found.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_circles():
    assert circles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]  # the check itself finds one
    assert not circles(import_graph()), circles(import_graph())
