"""compat.cell.extraction.ResidentCli: speculators' commands through one process, each failing alone.

The process here speaks ResidentCli's protocol (one JSON command a line in, {"code": N} a line out) with
commands that pass, fail, kill the process or hang, so that the queue's bookkeeping is tested without a
speculators install; the cells run it with the real speculators app (compat.cell.speculators_cli)."""

import sys
import textwrap

import pytest

from compat.cell.extraction import ClientFailed, ResidentCli

SPEAKER = textwrap.dedent("""
    import json, os, sys, time
    for line in sys.stdin:
        command = json.loads(line)
        what = command["argv"][0]
        with open(command["log"], "w") as log:
            log.write(f"ran {what}\\nError: {what} said so\\n")
        if what == "crash":
            os._exit(7)
        if what == "hang":
            time.sleep(60)
        sys.stdout.write(json.dumps({"code": 2 if what == "fail" else 0}) + "\\n")
        sys.stdout.flush()
""")


@pytest.fixture
def cli(tmp_path):
    resident = ResidentCli(tmp_path / "cli.log", command=[sys.executable, "-c", SPEAKER])
    yield resident
    resident.close()


def test_commands_run_in_order_and_each_failure_is_its_own(cli, tmp_path):
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "fail", "crash", "b", "hang", "c")}
    tickets = {name: cli.submit([name], log) for name, log in logs.items()}
    cli.wait(tickets["a"], 10, "a", logs["a"])
    with pytest.raises(ClientFailed, match=r"fail exited 2: .*Error: fail said so"):
        cli.wait(tickets["fail"], 10, "fail", logs["fail"])
    with pytest.raises(ClientFailed, match=r"crash exited 7"):
        cli.wait(tickets["crash"], 10, "crash", logs["crash"])
    cli.wait(tickets["b"], 10, "b", logs["b"])  # submitted before the crash: it still runs, in a new process
    with pytest.raises(ClientFailed, match=r"hang did not finish within 1s"):
        cli.wait(tickets["hang"], 1, "hang", logs["hang"])
    cli.wait(tickets["c"], 10, "c", logs["c"])
    assert cli.codes == [0, 2, 7, 0, 124, 0]
    assert all(log.read_text().startswith("ran ") for log in logs.values())
