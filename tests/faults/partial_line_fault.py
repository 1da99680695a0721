"""Fault injection (run only when named explicitly: the file name keeps it out of `tests/faults`
collection): the probe process writes part of a line to its stderr, with no newline, then hangs,
as a worker that stops mid-line does. The cell runner must still stop at its deadline and
leave no process behind (tests/unit/test_relay.py)."""

import os
import time

import pytest


@pytest.mark.probe("fault_partial_line")
def test_partial_line_then_hang(capsys):
    with capsys.disabled():  # straight to the runner's pipe, not pytest's capture
        os.write(2, b"[compat] a worker stops mid-li")
        time.sleep(3600)  # the cell's deadline ends this
