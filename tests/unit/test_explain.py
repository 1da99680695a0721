"""`nox -s explain`: real tracebacks of the default matrix name their breakage; unrelated ones do not."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from compat.harness.explain import explain, find_exceptions, find_pytest_failures, main

LOGS = Path(__file__).parent / "corpus" / "logs"
IN_PROCESS_LOG = LOGS / "vllm-0.16.0__speculators-0.3.0__cpu.probes.log"


def run(argv, stdin_text=""):
    out = io.StringIO()
    old = sys.stdout
    sys.stdout = out
    try:
        code = main(argv, stdin=io.StringIO(stdin_text))
    finally:
        sys.stdout = old
    return code, out.getvalue()


def test_every_breakage_of_the_seeds_pair_is_named_from_its_real_probe_log():
    code, text = run([str(IN_PROCESS_LOG), "--vllm", "0.16.0", "--speculators", "0.3.0", "--backend", "cpu"])
    assert code == 0, text
    for entry in ("scheduler_config_fields", "kv_cache_config_api", "scheduler_signature", "block_hasher",
                  "embed_input_ids", "two_phase_execute", "collective_rpc_unique_reply_rank",
                  "aux_hidden_states_truthiness"):
        assert f"known breakage {entry}:" in text, entry
    assert "no known breakage matches" not in text


def test_the_bare_assertion_is_placed_by_its_file():
    found = [f for f in find_pytest_failures(IN_PROCESS_LOG.read_text()) if f.type == "AssertionError"]
    assert found and found[0].where == "vllm/v1/core/block_pool.py:238" and found[0].message == ""
    assert [e.id for e in explain(found[0]).matches] == ["block_hasher"]
    moved = type(found[0])("AssertionError", "", "vllm/v1/core/sched/scheduler.py:401", 1)
    ex = explain(moved)
    assert not ex.matches
    assert any(e.id == "block_hasher" and "block_pool" in why for e, why in ex.closest)


def test_a_worker_traceback_in_log_lines_is_read():
    worker = [f for f in find_exceptions(IN_PROCESS_LOG.read_text()) if "sample_tokens" in f.message]
    assert worker and worker[0].where.startswith("vllm/v1/worker/gpu_model_runner.py:")


def test_an_unrelated_real_traceback_matches_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import json; json.loads('{not json')"], capture_output=True,
                          text=True)
    assert "Traceback" in done.stderr
    code, text = run(["-"], done.stderr)
    assert code == 1
    assert "JSONDecodeError" in text and "no known breakage matches" in text


def test_a_near_miss_names_its_closest_candidate_and_why():
    tb = ("Traceback (most recent call last):\n"
          '  File "/x/site-packages/vllm/v1/request.py", line 60, in __init__\n'
          "TypeError: Request.__init__() got an unexpected keyword argument 'prompt_embeds'\n")
    code, text = run(["-"], tb)
    assert code == 1
    assert "closest: request_signature" in text and "does not match" in text


def test_a_cell_result_file_is_explained(tmp_path):
    record = {"vllm": "0.17.1", "speculators": "0.3.0", "probes": [
        {"id": "request_signature", "status": "broken", "case": None,
         "error": {"type": "TypeError",
                   "message": "Request.__init__() got an unexpected keyword argument 'eos_token_id'",
                   "where": None}}]}
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(record))
    code, text = run([str(path)])
    assert code == 0 and "known breakage request_signature" in text


def test_bad_input_is_named(tmp_path, capsys):
    code, _ = run(["-"], "nothing to see here\n")
    assert code == 2
    assert "no exception found in standard input" in capsys.readouterr().err
    code, _ = run([str(tmp_path / "missing.log")])
    err = capsys.readouterr().err
    assert code == 64 and "missing.log" in err and "expected a log" in err  # unreadable: bad input, with why


def test_server_logs_of_the_default_server_cells_name_their_breakage():
    refusal = LOGS / "vllm-0.22.1__speculators-0.8.1__cpu.server-raw.log"
    code, text = run([str(refusal), "--vllm", "0.22.1", "--speculators", "0.8.1", "--backend", "cpu"])
    assert code == 0 and "known breakage connector_chunked_prefill" in text
    cpu_write = LOGS / "vllm-0.32.0__speculators-0.9.0__cpu.server-raw.log"
    _, text = run([str(cpu_write), "--vllm", "0.32.0", "--speculators", "0.9.0", "--backend", "cpu"])
    assert "known breakage payload_schema" in text
    # the same log read for a GPU cell: the CPU-only entry does not apply there; shown, never known
    code, text = run([str(cpu_write), "--vllm", "0.32.0", "--speculators", "0.9.0", "--backend", "gpu"])
    assert code == 1 and "known breakage payload_schema" not in text and "no known breakage matches" in text
    assert "candidate payload_schema" in text
    assert "observed on cpu only; this paste is from a CUDA GPU (--backend)" in text
