"""A cell whose probe loses a worker and hangs: reported as `error`, and no process survives."""

import json
import os

import pytest

from compat.harness import cell_envs as envs
from compat.harness import cell_run
from compat.harness.matrix import Cell

CELL = Cell("0.16.0", "0.3.0")


def test_killed_worker_and_hang_leave_nothing_behind(tmp_path):
    venv = envs.venv_root() / CELL.id
    if not (venv / "bin" / "python").exists():
        pytest.fail(f"{venv} missing: the default matrix builds it before this test")
    env = envs.CellEnv(path=venv, python=venv / "bin" / "python", seconds=0.0, reused=True)
    from compat.fixtures import tiny_llama

    spec = cell_run.cell_spec(CELL, tmp_path, tiny_llama.ensure(), probe_timeout=900, cell_timeout=150)
    outcome = cell_run.run_probes(CELL, env, tmp_path, spec=spec, suites=("tests/faults",), echo=lambda line: None)
    assert outcome.error is not None and outcome.error.startswith("timeout"), outcome.error
    [probe] = outcome.probes
    assert probe["status"] == "error"
    assert "did not run" in probe["reason"]
    workers = json.loads((tmp_path / "worker_pids.json").read_text())
    assert len(workers) == 2  # the engine was up: one worker killed, one left hanging
    assert _still_running(workers) == []
    assert cell_run.processes_with_token(outcome.token) == []


def _still_running(pids: list[int], grace: float = 15.0) -> list[int]:
    """The pids still running after a short grace: a killed process on a loaded 2-core machine can
    take a moment to go; a zombie (exited, not yet reaped by init) holds nothing and counts as gone."""
    import time

    deadline = time.monotonic() + grace
    while True:
        running = [pid for pid in pids if _alive(pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
