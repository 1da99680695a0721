"""The cell spec (compat/shared/cell_spec.py): one typed file per probe run, its path the one variable
the cell reads; it round-trips, refuses what it cannot use by name, and what the runner writes is
what the probes' conftest hands its probes."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from compat.harness import cell_envs, cell_run
from compat.harness.matrix import SERVER_VARIANTS, Cell
from compat.shared.cell_spec import (
    SPEC_VARIABLE,
    CellSpec,
    CellSpecError,
    KimiSuiteSpec,
    load_spec,
    spec_from_environment,
)

SPEC = CellSpec(cell_id="vllm-0.22.1__speculators-0.8.1__cpu", vllm="0.22.1", speculators="0.8.1", backend="cpu",
                model_dir="/models/tiny", work_dir="/results/cell", dtype="bfloat16", variants=("hybrid",),
                gpu_memory_utilization=0.4, serve_args=("--attention-backend", "TRITON_ATTN"))


@pytest.mark.parametrize("spec", [SPEC, replace(SPEC, variants=None, gpu_memory_utilization=None, serve_args=()),
                                  replace(SPEC, variants=(), kimi=KimiSuiteSpec(model="/k", tp=2, layers=(2, 3),
                                                                               hidden_size=64, scale=True))])
def test_a_spec_round_trips_through_its_file(tmp_path, spec):
    assert load_spec(spec.write(tmp_path / "spec.json")) == spec


@pytest.mark.parametrize("change, named", [
    ({"dtype": "float16"}, "dtype 'float16': expected one of float32, bfloat16"),
    ({"backend": "tpu"}, "backend 'tpu': expected one of cpu, gpu"),
    ({"gpu_memory_utilization": 1.5}, "expected a fraction in (0, 1]"),
    ({"probe_timeout": "300"}, "probe_timeout is '300'; expected int"),
    ({"variants": "hybrid"}, "variants is 'hybrid'; expected a list of str"),
    ({"model_dir": None}, "model_dir is null"),
    ({"tp": 2}, "unknown field(s) tp; accepted: cell_id"),
    ({"version": 2}, "spec version 2; this checkout reads version 1"),
    ({"kimi": {"layers": [1, "2"]}}, "kimi: layers is [1, '2']; expected a list of int"),
])
def test_a_spec_that_cannot_be_used_is_refused_naming_the_file_and_the_field(tmp_path, change, named):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**SPEC.to_json(), **change}))
    with pytest.raises(CellSpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and named in str(info.value)


def test_a_missing_field_or_file_or_variable_is_said_so(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({k: v for k, v in SPEC.to_json().items() if k != "work_dir"}))
    with pytest.raises(CellSpecError, match="missing field\\(s\\) work_dir"):
        load_spec(path)
    with pytest.raises(CellSpecError, match="no such file"):
        load_spec(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CellSpecError, match="not a readable JSON cell spec"):
        load_spec(tmp_path / "bad.json")
    with pytest.raises(CellSpecError, match=f"{SPEC_VARIABLE} is not set"):
        spec_from_environment({})


def test_the_runner_builds_the_spec_from_the_cell_and_its_options(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_SERVE_ARGS", "--attention-backend TRITON_ATTN")
    monkeypatch.setenv("COMPAT_OMP_BIND_TP1", "0")
    monkeypatch.delenv("COMPAT_CACHE_DIR", raising=False)
    cell = Cell("0.22.1", "0.8.1", "gpu", dtype="bfloat16", variants=("hybrid",))
    spec = cell_run.cell_spec(cell, tmp_path / "work", tmp_path / "model", gpu_memory_utilization=0.4,
                              probe_timeout=30, cell_timeout=60)
    assert (spec.cell_id, spec.backend, spec.dtype, spec.variants) == (cell.id, "gpu", "bfloat16", ("hybrid",))
    assert spec.serve_args == ("--attention-backend", "TRITON_ATTN") and spec.omp_bind_tp1 == "0"
    assert (spec.model_dir, spec.work_dir) == (str(tmp_path / "model"), str(tmp_path / "work"))
    assert (spec.gpu_memory_utilization, spec.probe_timeout, spec.cell_timeout) == (0.4, 30, 60)
    assert spec.model_cache is None
    every = cell_run.cell_spec(Cell("0.22.1", "0.8.1"), tmp_path, tmp_path)
    assert every.variants == tuple(SERVER_VARIANTS) and every.dtype == "float32"
    assert cell_run.cell_spec(Cell("0.16.0", "0.3.0"), tmp_path, tmp_path).variants is None  # in-process: none


SEEN = '''
import json
from pathlib import Path


def test_what_the_cell_is_told(cell_spec, model_dir):
    Path(cell_spec.work_dir, "seen.json").write_text(json.dumps({"spec": cell_spec.to_json(), "model_dir": model_dir}))
'''


def test_what_the_runner_writes_is_what_the_probes_conftest_hands_the_probes(tmp_path):
    """A real probe run (pytest in this interpreter) with the probes' conftest as a plugin: its
    `cell_spec` and `model_dir` fixtures give back the spec the runner wrote, field for field."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    probe = tmp_path / "probe_seen.py"
    probe.write_text(SEEN)
    cell = Cell("0.22.1", "0.8.1", "cpu", dtype="bfloat16", variants=("deepseek_v3",))
    spec = cell_run.cell_spec(cell, tmp_path, tmp_path / "model", gpu_memory_utilization=0.3, probe_timeout=60,
                              cell_timeout=90)
    python = Path(sys.executable)
    env = cell_envs.CellEnv(path=python.parent.parent, python=python, seconds=0.0, reused=True)
    outcome = cell_run.run_probes(cell, env, tmp_path, spec=spec, echo=lambda line: None,
                                  suites=(str(probe), "-p", "compat.cell.probes.conftest"))
    seen = tmp_path / "seen.json"
    assert seen.is_file(), (outcome, (tmp_path / "probes.log").read_text()[-2000:])
    told = json.loads(seen.read_text())
    assert CellSpec.from_json(told["spec"]) == spec and told["model_dir"] == str(tmp_path / "model")
    assert load_spec(tmp_path / "probes.cell-spec.json") == spec


def test_the_probes_refuse_a_model_dir_without_a_config(tmp_path):
    from compat.cell.probes.conftest import checked_model_dir

    with pytest.raises(CellSpecError, match="model_dir .* has no config.json"):
        checked_model_dir(str(tmp_path))


def test_the_committed_schema_is_the_one_the_types_give():
    from compat.shared.cell_spec import json_schema

    committed = json.loads((Path(__file__).resolve().parents[2] / "docs" / "cell-spec.schema.json").read_text())
    assert committed == json.loads(json.dumps(json_schema())), \
        "regenerate: python -m compat.shared.cell_spec > docs/cell-spec.schema.json"
    assert set(committed["properties"]) == set(SPEC.to_json()) and committed["additionalProperties"] is False
