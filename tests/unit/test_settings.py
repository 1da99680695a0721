"""Issue 31, one settings model: `python -m compat run` reads its command line once into frozen settings
(compat.harness.settings), nothing in the harness reads an options bag by name, the run's settings land
on a cell in one place, and every backend, dtype and variant name is spelled in compat.shared.axes alone."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from compat.harness import settings
from compat.harness.matrix import Cell, CellSettings, MatrixError
from compat.shared import axes

PACKAGE = Path(__file__).resolve().parents[2] / "compat"
# Literal axis names left where this item does not reach (each to import compat.shared.axes in its turn):
SPELLED_ELSEWHERE = {
    "shared/breakages.py": "registry entries: where each breakage was observed (data, not the axis)",
    "harness/published.py": "`python -m compat check --backend` choices",
}


def _python(*sides: str) -> list[Path]:
    return sorted(p for side in sides for p in (PACKAGE / side).rglob("*.py"))


def test_every_part_of_the_settings_is_frozen():
    given = settings.parse(["--vllm", "0.16.0", "--speculators", "0.3.0", "--dtype", "bfloat16"])
    parts = [given, given.selection, given.cell, given.run, given.output]
    row = settings.parse(["--speculators", "0.9.0", "--all-vllm"])
    parts.append(row.support)
    for part in parts:
        assert dataclasses.is_dataclass(part) and part.__dataclass_params__.frozen, type(part).__name__
        name = dataclasses.fields(part)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, name, None)


def test_each_option_is_read_into_its_typed_field(tmp_path):
    given = settings.parse(["--speculators", "0.9.0", "--all-vllm", "--backend", "gpu", "--only", "x", "--dtype",
                            "bfloat16", "--model", str(tmp_path / "m"), "--variants", "hybrid,deepseek_v3",
                            "--no-static", "--gpu-memory-utilization", "0.4", "--probe-timeout", "7",
                            "--store", "user", "--results", str(tmp_path), "--rerun", "--seed", "3"])
    assert given.support == settings.SupportRequest(axis=settings.ROW, fixed="0.9.0", backend="gpu", seed=3,
                                                    rerun=True)
    assert given.selection.only == ("x",) and given.selection.backend == "gpu"
    assert given.cell == CellSettings(dtype="bfloat16", model=str((tmp_path / "m").resolve()),
                                      variants=("hybrid", "deepseek_v3"))
    assert given.model_dir == (tmp_path / "m").resolve()
    assert (given.run.static, given.run.gpu_memory_utilization, given.run.probe_timeout) == (False, 0.4, 7)
    assert given.output == settings.Output(results=tmp_path, reports=settings.Output.reports, store="user")
    assert settings.parse([]) == settings.Settings()  # the defaults are the dataclasses' own


@pytest.mark.parametrize(("argv", "says"), [
    (["--python", "/x/python", "--list-cells"], "--python runs the environments given; --list-cells cannot"),
    (["--python", "/x/python", "--all-vllm", "--speculators", "0.9.0"], "--speculators 0.9.0 --all-vllm cannot"),
    (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
    (["--variants", "hybrid,nope"], "unknown variant(s) nope; accepted: deepseek_v3, hybrid"),
])
def test_a_bad_combination_is_refused_once_at_parse_time(argv, says):
    with pytest.raises(MatrixError) as info:
        settings.parse(argv)
    assert says in str(info.value)


def test_the_run_settings_land_on_a_cell_in_one_place():
    """CellSettings.apply is the only code in the harness that sets a Cell's dtype or model."""
    cell = Cell("0.24.0", "0.9.0", "gpu", variants=("hybrid",))
    applied = CellSettings(dtype="bfloat16", model="/m/tiny").apply(cell)
    assert (applied.dtype, applied.model, applied.variants) == ("bfloat16", "/m/tiny", ("hybrid",))
    assert CellSettings(variants=()).apply(cell).variants == () and CellSettings().apply(cell) == cell
    setters = []
    for path in _python("harness"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"replace", "Cell"}:
                named = {k.arg for k in node.keywords} & {"dtype", "model"}
                if named:
                    setters.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.id}({', '.join(named)})")
    # evidence.py rebuilds a record's own cell from what the record says (a check, not a setting);
    # kimi.py sets the Kimi suite's own spec (nox -s kimi), no Cell
    outside = [s for s in setters if not s.startswith(("harness/evidence.py:", "harness/kimi.py:"))]
    assert len(outside) == 1 and outside[0].startswith("harness/matrix.py:"), setters


def test_no_harness_code_reads_an_options_bag_by_name():
    found = []
    for path in _python("harness"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in {"options", "settings"}:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"getattr(options, ...) in {found}: read the typed field (compat.harness.settings)"


def test_backend_dtype_and_variant_names_are_spelled_in_compat_shared_axes_alone():
    """A tuple, list or set of two or more names of one axis, written out, anywhere in the harness or the
    shared pieces but compat.shared.axes, is a second home of that axis."""
    axis_names = [set(axes.BACKENDS), set(axes.DTYPES), set(axes.SERVER_VARIANTS)]
    found = []
    for path in _python("harness", "shared"):
        relative = str(path.relative_to(PACKAGE))
        if relative == "shared/axes.py" or relative in SPELLED_ELSEWHERE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 \
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if any(names <= axis for axis in axis_names):
                    found.append(f"{relative}:{node.lineno} {sorted(names)}")
    assert not found, "import these from compat.shared.axes instead: " + "; ".join(found)
    assert all((PACKAGE / path).is_file() for path in SPELLED_ELSEWHERE)


def test_the_axes_are_what_the_other_homes_re_export():
    from compat.harness import matrix
    from compat.shared import breakage_model, cell_spec

    assert cell_spec.BACKENDS is axes.BACKENDS and cell_spec.DTYPES is axes.DTYPES
    assert breakage_model.BACKENDS is axes.BACKENDS
    assert (matrix.BACKENDS, matrix.DTYPES, matrix.SERVER_VARIANTS, matrix.VLLM_DIST) == \
        (axes.BACKENDS, axes.DTYPES, axes.SERVER_VARIANTS, axes.VLLM_DIST)
    assert set(axes.VLLM_DIST) == set(axes.BACKENDS) and axes.DEFAULT_BACKEND in axes.BACKENDS
    from compat.shared.manifest import VARIANT_OF_KEY

    assert set(VARIANT_OF_KEY.values()) == set(axes.SERVER_VARIANTS)  # each variant decides a probe
    assert axes.DEFAULT_DTYPE in axes.DTYPES and axes.REFERENCE_DTYPE in axes.DTYPES
