"""compat.cell.server with stand-in commands: readiness, failures with the log's cause, stopping the group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from compat.cell.server import ServerFailed, VllmServer, environment_fault, failure_line, vllm_frame

HEALTHY = (
    "import http.server, sys, subprocess\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])  # a worker of the group\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)

LOG_0_22 = """INFO 11-30 04:00:00 [api_server.py:1] vLLM API server version 0.22.1
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1700, in create_engine_config
    config = VllmConfig(
  File "/venv/lib/python3.11/site-packages/vllm/config/vllm.py", line 744, in __post_init__
    raise ValueError(
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, ExampleHiddenStatesConnector does not support chunked prefill. Please disable chunked prefill (--no-enable-chunked-prefill). [type=value_error]
"""  # noqa: E501 - a real log's lines

LOG_0_32 = """(EngineCore pid=77) ERROR 11-30 [core.py:1] EngineCore encountered an issue
(EngineCore pid=77)   File "/v/site-packages/vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py", line 402, in _submit_async_write
(EngineCore pid=77) RuntimeError: pin_memory=True requires a CUDA or other accelerator backend; no pinned memory allocator is available on this system.
(APIServer pid=70) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
INFO:     127.0.0.1:46580 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error
"""  # noqa: E501 - a real log's lines


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_failure_line_prefers_the_root_cause():
    assert failure_line(LOG_0_22).startswith("Value error, ExampleHiddenStatesConnector does not support chunked "
                                             "prefill")
    assert failure_line(LOG_0_32).startswith("RuntimeError: pin_memory=True requires a CUDA")
    assert failure_line("INFO all good\n") is None


def test_vllm_frame_is_the_innermost_vllm_frame():
    assert vllm_frame(LOG_0_22) == "vllm/config/vllm.py:744"
    assert vllm_frame(LOG_0_32).endswith("example_hidden_states_connector.py:402")


def test_ready_then_stop_kills_the_whole_group(tmp_path):
    server = VllmServer(sys.executable, "model", [], tmp_path / "server.log", ready_timeout=30)
    server.command = [sys.executable, "-c", HEALTHY, str(server.port)]
    with server:
        assert server.healthy()
        time.sleep(0.5)
        members = _group(server.process.pid)
        assert len(members) >= 2  # the leader and its stand-in worker
    assert not server.alive()
    assert not [pid for pid in members if _alive(pid)]


def test_exit_before_ready_carries_the_logged_cause(tmp_path):
    server = VllmServer(sys.executable, "model", [], tmp_path / "server.log", ready_timeout=30,
                        command=[sys.executable, "-c",
                                 "print('AssertionError: spec decode is not supported.'); raise SystemExit(3)"])
    with pytest.raises(ServerFailed) as caught:
        server.start()
    assert "exited 3" in str(caught.value)
    assert "spec decode is not supported" in str(caught.value)
    assert "spec decode" in caught.value.log_tail


def test_readiness_timeout_stops_the_server(tmp_path):
    server = VllmServer(sys.executable, "model", [], tmp_path / "server.log", ready_timeout=2,
                        command=[sys.executable, "-c", "import time; time.sleep(300)"])
    started = time.monotonic()
    with pytest.raises(ServerFailed, match="not ready within 2s"):
        server.start()
    assert time.monotonic() - started < 30
    assert not server.alive()


def test_stop_escalates_to_sigkill(tmp_path):
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                "time.sleep(300)")
    server = VllmServer(sys.executable, "model", [], tmp_path / "server.log", command=[sys.executable, "-c", stubborn])
    server.process = __import__("subprocess").Popen(server.command, start_new_session=True,
                                                    stdout=__import__("subprocess").PIPE, text=True)
    # its SIGTERM handler is set (a fixed sleep raced a loaded machine)
    assert server.process.stdout.readline().strip() == "up"
    started = time.monotonic()
    server.stop(grace=1.0)
    assert server.process.returncode == -9
    assert time.monotonic() - started < 15


IJSON_LOG = """(APIServer pid=7) Traceback (most recent call last):
(APIServer pid=7)   File "/v/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py", line 12, in <module>
(APIServer pid=7)     import ijson
(APIServer pid=7) ModuleNotFoundError: No module named 'ijson'
"""
MOVED_LOG = """(APIServer pid=7)   File "/v/lib/python3.11/site-packages/hs_connectors/backends/file.py", line 3, in <module>
(APIServer pid=7)     from vllm.v1.core.kv_cache_utils import get_kv_cache_config
(APIServer pid=7) ModuleNotFoundError: No module named 'vllm.v1.core.kv_cache_utils'
"""  # noqa: E501 - a real log's lines


def test_a_module_missing_outside_the_contract_is_the_environment_not_vllm():
    fault = environment_fault(failure_line(IJSON_LOG), alive=False,
                              exc=ServerFailed("vllm serve exited 1 before it was ready", ""))
    assert fault and "'ijson'" in fault and "install fault" in fault
    # a module vLLM moved is the contract: no environment fault, the probe stays `broken`
    assert environment_fault(failure_line(MOVED_LOG), alive=False, exc=ServerFailed("exited 1", "")) is None


def test_a_live_server_silent_past_its_ready_timeout_is_too_slow_not_broken():
    timeout = ServerFailed("vllm serve was not ready within 420s", "")
    assert "too slow here" in environment_fault(failure_line("INFO loading weights\n"), alive=True, exc=timeout)
    # it died: its log says why
    assert environment_fault(failure_line("INFO loading weights\n"), alive=False, exc=timeout) is None
    assert environment_fault(failure_line(LOG_0_22), alive=True, exc=timeout) is None  # it said what failed


# Seen on the H200 (2026-12-01): official 0.24.0 slimmed without FlashAttention's .so, a DeepseekV3
# with MLA on: the engine dies at the first prefill calling a kernel that library would register.
MISSING_KERNEL_LOG = """(EngineCore pid=1471) ERROR 12-01 07:59:14 [core.py:1233]   File "/s/vllm/vllm_flash_attn/flash_attn_interface.py", line 315, in flash_attn_varlen_func
(EngineCore pid=1471) ERROR 12-01 07:59:14 [core.py:1233]     out, softmax_lse = torch.ops._vllm_fa2_C.varlen_fwd(
(EngineCore pid=1471) ERROR 12-01 07:59:14 [core.py:1233]   File "/opt/torch/.venv/lib/python3.12/site-packages/torch/_ops.py", line 1379, in __getattr__
(EngineCore pid=1471) ERROR 12-01 07:59:14 [core.py:1233]     raise AttributeError(
(EngineCore pid=1471) ERROR 12-01 07:59:14 [core.py:1233] AttributeError: '_OpNamespace' '_vllm_fa2_C' object has no attribute 'varlen_fwd'
"""  # noqa: E501 - a real log's lines


def test_a_compiled_kernel_the_build_lacks_is_the_install_not_the_contract():
    refused = OSError("connection refused")
    fault = environment_fault(failure_line(MISSING_KERNEL_LOG), alive=False, exc=refused, log_text=MISSING_KERNEL_LOG)
    assert fault and "torch.ops._vllm_fa2_C.varlen_fwd" in fault and "install fault" in fault
    other = MISSING_KERNEL_LOG.replace("'_OpNamespace' '_vllm_fa2_C' object has no attribute 'varlen_fwd'",
                                       "'Qwen3NextModel' object has no attribute 'aux_hidden_state_layers'")
    assert environment_fault(failure_line(other), alive=False, exc=refused, log_text=other) is None
    # hs-connectors calling an op this vLLM no longer registers is the contract, not the install
    theirs = MISSING_KERNEL_LOG.replace("/s/vllm/vllm_flash_attn/flash_attn_interface.py", "/s/hs_connectors/file.py")
    assert environment_fault(failure_line(theirs), alive=False, exc=refused, log_text=theirs) is None


# Seen on the H200 (2026-12-01): the payload lacked compressed-tensors; vLLM inspects the model in a
# subprocess, logs that subprocess's traceback, and fails with a pydantic error naming the inspection.
INSPECTION_LOG = """(APIServer pid=2409) ERROR 12-01 08:10:55 [registry.py:975] Error in inspecting model architecture 'Qwen3NextForCausalLM'
(APIServer pid=2409) ERROR 12-01 08:10:55 [registry.py:975]     from compressed_tensors.quantization import (
(APIServer pid=2409) ERROR 12-01 08:10:55 [registry.py:975] ModuleNotFoundError: No module named 'compressed_tensors'
(APIServer pid=2409) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
(APIServer pid=2409)   Value error, Model architectures ['Qwen3NextForCausalLM'] failed to be inspected. Please check the logs for more details. [type=value_error, input_value=ArgsKwargs((), {'model': ...nderer_num_workers': 1}), input_type=ArgsKwargs]
"""  # noqa: E501 - a real log's lines


def test_a_model_inspection_that_failed_for_a_missing_dependency_is_the_environment():
    exc = ServerFailed("vllm serve exited 1 before it was ready", "")
    fault = environment_fault(failure_line(INSPECTION_LOG), alive=False, exc=exc, log_text=INSPECTION_LOG)
    assert fault and "'compressed_tensors'" in fault and "install fault" in fault
    moved = INSPECTION_LOG.replace("No module named 'compressed_tensors'",
                                   "No module named 'vllm.model_executor.layers.mamba'")
    assert environment_fault(failure_line(moved), alive=False, exc=exc, log_text=moved) is None
    assert environment_fault(failure_line(INSPECTION_LOG), alive=False, exc=exc) is None  # the log was not given
    # a missing optional module logged before the inspection's own traceback is not its cause
    elsewhere = ("(APIServer pid=2409) WARNING ModuleNotFoundError: No module named 'flashinfer'\n"
                 + INSPECTION_LOG.replace("No module named 'compressed_tensors'",
                                          "No module named 'vllm.model_executor.layers.mamba'"))
    assert environment_fault(failure_line(elsewhere), alive=False, exc=exc, log_text=elsewhere) is None


def test_the_weights_vllm_skipped_at_load_are_read_from_its_log():
    """Official vLLM 0.24.0 on an H200 (reports/gpu-h200/server-variants/, the tiny Qwen3-Next of builder 4, whose
    experts were saved under transformers 5's fused names): the loader warned and served uninitialised experts."""
    from compat.cell.server import skipped_weights

    log = ("(EngineCore pid=1496) WARNING 12-01 08:21:47 [qwen3_next.py:709] Parameter layers.0.mlp.experts.down_proj "
           "not found in params_dict, skip loading\n"
           "(EngineCore pid=1496) WARNING 12-01 08:21:47 [qwen3_next.py:709] Parameter "
           "layers.0.mlp.experts.gate_up_proj not found in params_dict, skip loading\n"
           "(EngineCore pid=1497) WARNING 12-01 08:21:47 [qwen3_next.py:709] Parameter layers.0.mlp.experts.down_proj "
           "not found in params_dict, skip loading\n(APIServer pid=1) INFO Started server process\n")
    assert skipped_weights(log) == ["layers.0.mlp.experts.down_proj", "layers.0.mlp.experts.gate_up_proj"]
    assert skipped_weights("(EngineCore pid=1) INFO Loading weights took 0.1 seconds\n") == []


def test_every_data_probe_leads_its_failure_with_the_weights_its_server_skipped(tmp_path):
    """The reference probe (match_reference) and the layer-id probes (check_layer_ids) share skipped_lead: the
    skipped tensors first, kept in the probe's detail; nothing where the load skipped none."""
    from compat.cell.probes.server import test_server_probes, test_server_variants
    from compat.cell.server_mode_runs import ModeRun

    assert test_server_variants.skipped_lead is test_server_probes.skipped_lead
    run = ModeRun("raw", [], tmp_path / "server.log", skipped_weights=["a.w", "b.w", "c.w"])
    detail: dict = {}
    lead = test_server_probes.skipped_lead(run, detail)
    assert lead == ["vLLM skipped loading 3 checkpoint tensor(s) (a.w, b.w, ...): those weights were never loaded"]
    assert detail == {"skipped_weights": ["a.w", "b.w", "c.w"]}
    clean: dict = {}
    assert test_server_probes.skipped_lead(ModeRun("raw", [], tmp_path / "server.log"), clean) == [] and clean == {}
