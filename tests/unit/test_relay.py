"""A hang cannot outlive the cell deadline: the runner reads the probe process's output without
waiting for a line to end, then kills every process of the cell."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat.harness import cell_envs as envs
from compat.harness import cell_run
from compat.harness.matrix import Cell

pytestmark = pytest.mark.timeout(90)  # a regression hangs: fail it instead

PARTIAL_LINE_THEN_HANG = ("import os, time; os.write(2, b'[compat] progress line\\n'); time.sleep(0.5); "
                          "os.write(2, b'[compat] stopped mid-li'); time.sleep(600)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_relay_stops_at_the_deadline_on_a_partial_line(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", PARTIAL_LINE_THEN_HANG], stderr=subprocess.PIPE,
                               start_new_session=True)
    echoed = []
    started = time.monotonic()
    try:
        with (tmp_path / "log").open("w") as log:
            error = cell_run._relay(process, log, echoed.append, deadline=time.monotonic() + 2.0)
    finally:
        cell_run.kill_cell_processes(process, token="none")
    assert time.monotonic() - started < 4.0
    assert error.startswith("timeout"), error
    assert echoed == ["[compat] progress line", "[compat] stopped mid-li"]
    assert (tmp_path / "log").read_text() == "[compat] progress line\n[compat] stopped mid-li\n"
    assert not _alive(process.pid)


def test_relay_splits_lines_across_reads(tmp_path):
    script = ("import os, time\n"
              "for part in (b'[compat] one ', b'line\\nnoise\\n[compat] two', b'\\n'):\n"
              "    os.write(2, part); time.sleep(0.2)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    echoed = []
    with (tmp_path / "log").open("w") as log:
        error = cell_run._relay(process, log, echoed.append, deadline=time.monotonic() + 30)
    assert error is None
    assert echoed == ["[compat] one line", "[compat] two"]
    assert (tmp_path / "log").read_text() == "[compat] one line\nnoise\n[compat] two\n"


def test_a_probe_that_stops_mid_line_is_stopped_at_the_cell_deadline(tmp_path):
    """The whole path: pytest with our plugin runs the fault probe; the deadline holds and the
    probe is reported `error` (did not run to the end), with no process of the cell left."""
    python = Path(sys.executable)
    env = envs.CellEnv(path=python.parent.parent, python=python, seconds=0.0, reused=True)
    started = time.monotonic()
    cell = Cell("0.16.0", "0.3.0")
    outcome = cell_run.run_probes(cell, env, tmp_path,
                                  spec=cell_run.cell_spec(cell, tmp_path, tmp_path, probe_timeout=600, cell_timeout=15),
                                  suites=("tests/faults/partial_line_fault.py",), echo=lambda line: None)
    assert time.monotonic() - started < 40
    assert outcome.error is not None and outcome.error.startswith("timeout"), outcome.error
    [probe] = outcome.probes
    assert (probe["id"], probe["status"]) == ("fault_partial_line", "error")
    assert "did not run" in probe["reason"] and "stops mid-li" in probe["reason"]
    assert cell_run.processes_with_token(outcome.token) == []


def test_relay_stops_a_running_cell_when_the_run_is_interrupted(tmp_path):
    import threading

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stderr=subprocess.PIPE,
                               start_new_session=True)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    try:
        with (tmp_path / "log").open("w") as log, pytest.raises(cell_run.CellInterrupted):
            cell_run._relay(process, log, lambda line: None, deadline=time.monotonic() + 60, stop=stop)
    finally:
        cell_run.kill_cell_processes(process, token="none")
    assert time.monotonic() - started < 7.0
    assert not _alive(process.pid)
