"""Fault injection for the harness's own tests (never part of a matrix run): a TP=2 engine loses
one worker mid-run, then the probe hangs. The cell runner must report `error` and leave no
process behind, the surviving worker included."""

import json
import os
import signal
import time
from pathlib import Path

import pytest


@pytest.mark.probe("fault_worker_killed")
def test_worker_killed_then_hang(model_dir, cell_spec):
    from compat.cell import vllm_setup

    engine = vllm_setup.start_engine(model_dir, 2)
    workers = [reply["pid"] for reply in engine.executor.collective_rpc("compat_identity")]
    Path(cell_spec.work_dir, "worker_pids.json").write_text(json.dumps(workers))
    os.kill(workers[1], signal.SIGKILL)
    time.sleep(3600)  # the cell's deadline ends this
