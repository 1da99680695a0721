"""`nox -s explain` and `nox -s report` exit with the status of the command they run (README, "Exit
status"), through real nox: left alone, nox turns every failing command into its own exit 1."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The first run builds .nox/explain and .nox/report (the harness installed into each); later runs reuse them.
pytestmark = pytest.mark.timeout(900)

TRACEBACK = ("Traceback (most recent call last):\n"
             '  File "/x/site-packages/vllm/v1/request.py", line 60, in __init__\n'
             "TypeError: Request.__init__() got an unexpected keyword argument '{}'\n")


def nox(session: str, *posargs: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("nox"):
        command = [sys.executable, "-m", "nox"]
    elif shutil.which("nox"):
        command = [shutil.which("nox")]
    else:
        pytest.skip("nox is not installed (it is in the test extra)")
    reuse = ["-R"] if (ROOT / ".nox" / session).is_dir() else []  # reuse, no install: only once built
    return subprocess.run([*command, "-f", str(ROOT / "noxfile.py"), *reuse, "-s", session, "--", *posargs],
                          cwd=ROOT, capture_output=True, text=True, timeout=840)


@pytest.mark.parametrize(("text", "code", "says"), [
    (TRACEBACK.format("eos_token_id"), 0, "known breakage request_signature"),
    (TRACEBACK.format("prompt_embeds"), 1, "no known breakage matches"),
    ("nothing went wrong here\n", 2, "no exception found"),
], ids=["known", "unknown", "no-exception"])
def test_explain_status_comes_out_of_nox_unchanged(tmp_path, text, code, says):
    log = tmp_path / "job.log"
    log.write_text(text)
    done = nox("explain", str(log))
    output = done.stdout + done.stderr
    assert done.returncode == code, output[-3000:]
    assert says in output, output[-3000:]  # the command's own status, not nox failing for itself


@pytest.mark.parametrize("results", ["empty", "missing"])
def test_report_status_3_comes_out_of_nox_unchanged(tmp_path, results):
    (tmp_path / "empty").mkdir()
    done = nox("report", "--results", str(tmp_path / results), "--out", str(tmp_path / "reports"))
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    assert "nox exits 3, the status of python -m compat report" in output, output[-3000:]
    assert (tmp_path / "reports" / "compat.md").exists()  # the reports are still written
