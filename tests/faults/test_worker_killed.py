"""Fault injection for the harness's own tests (never part of a matrix run): a probe whose engine
loses a worker process mid-run, then hangs. The cell runner must report `error` and leave no
process behind."""

import os
import signal
import time

import pytest


@pytest.mark.probe("fault_worker_killed")
def test_worker_killed_then_hang(model_dir):
    from compat import vllm_setup

    engine = vllm_setup.start_engine(model_dir, 1)
    identity = vllm_setup.rpc_from_rank(engine.executor, "compat_identity")
    os.kill(identity["pid"], signal.SIGKILL)
    time.sleep(3600)  # the cell's deadline ends this
