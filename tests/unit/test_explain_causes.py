"""`nox -s explain` on real pastes (tests/unit/corpus/explain_causes/): the root cause it names and
whose fault it says that is, against what each issue's thread found; and the parser's readings those
pastes showed wrong, each on its own real lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from compat.harness.explain import explain_paste, render
from compat.shared.tracebacks import crash_line, exceptions_in, root_cause, silent_death, vllm_relative

# one reading of a paste for the test and for the score (bench/explain_causes_score.py, also run on older harnesses)
_SCORE = importlib.util.spec_from_file_location(
    "explain_causes_score", Path(__file__).resolve().parents[2] / "bench" / "explain_causes_score.py")
score = importlib.util.module_from_spec(_SCORE)
_SCORE.loader.exec_module(score)
CORPUS, truth, reading = score.CORPUS, score.truth, score.reading
PASTES = sorted(CORPUS.glob("*.txt"))
LOGS = Path(__file__).parent / "corpus" / "logs"


def test_the_corpus_has_sources_and_truths():
    assert len(PASTES) >= 20
    for paste in PASTES:
        t = truth(paste)
        assert t["source"].startswith("https://github.com/") and t["root"] and "cause" in t, paste


@pytest.mark.parametrize("paste", PASTES, ids=[p.stem for p in PASTES])
def test_explain_names_the_root_and_its_cause(paste):
    """The root and its cause, and where the truth states it the setting read (backend, versions, candidates)."""
    t = truth(paste)
    right, said = score.judge(paste)
    if "gap" in t:
        assert not right, f"{paste.stem} now comes out right: remove its gap note"
        return
    assert right, f"{paste.stem}: {said}; {t['note']}"


def test_a_module_s_lower_case_exception_is_read_with_its_module():
    text = ("ERROR 04-15 05:23:10 engine.py:137]     struct.unpack(\"iiiiiiii\", s)\n"
            "ERROR 04-15 05:23:10 engine.py:137] struct.error: unpack requires a buffer of 32 bytes\n")
    assert [(f.type, f.message)
            for f in exceptions_in(text)] == [("struct.error", "unpack requires a buffer of 32 bytes")]
    assert exceptions_in("the error: nothing\nmy.error_count: 3\n") == []


def test_python_logging_s_default_prefix_is_taken_off():
    prefix = "2025-06-27 12:57:51,690 - __main__ - INFO - "
    text = "".join(prefix + line + "\n" for line in [
        '  File "/env/lib/python3.11/site-packages/vllm/v1/utils.py", line 494, in wait_for_engine_startup',
        '    raise RuntimeError("Engine core initialization failed. "',
        "RuntimeError: Engine core initialization failed. See root cause above."])
    [found] = exceptions_in(text)
    assert (found.type, found.where, found.wrapper) == ("RuntimeError", "vllm/v1/utils.py:494", True)


def test_vllm_s_warning_that_its_compiled_library_did_not_load_is_the_exception_it_swallowed():
    line = ("WARNING 06-13 11:42:20 _custom_ops.py:11] Failed to import from vllm._C with ImportError('/usr/local/lib/"
            "python3.8/dist-packages/vllm/_C.abi3.so: undefined symbol: _ZN5torch7LibraryC1ENS0_4KindESsSt8optional"
            "IN3c1011DispatchKeyEEPKcj')\n")
    assert reading(line) == ("ImportError", "environment")
    assert "the torch installed beside it" in render(*explain_paste(line))
    mac = line.replace("'/usr/local/lib/python3.8/dist-packages/vllm/_C.abi3.so: undefined symbol: ",
                       "'dlopen(/Users/q/vllm/vllm/_C.abi3.so, 0x0002): Symbol not found: ")
    assert reading(mac) == ("ImportError", "environment")
    assert reading(line.replace("Failed to import from", "Imported")) == ("none", False)


def test_vllm_0_4_s_missing_ops_alias_reads_as_the_compiled_library_missing():
    text = ('>   File "/home/u/vllm/vllm/_custom_ops.py", line 106, in rms_norm\n'
            ">     vllm_ops.rms_norm(out, input, weight, epsilon)\n> NameError: name 'vllm_ops' is not defined\n")
    assert reading(text) == ("NameError", "environment")
    assert reading(text.replace("'vllm_ops'", "'tokenizer'")) == ("NameError", False)


CRASH = ("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'an illegal memory access was encountered'\n"
         "(EngineCore pid=58154) ERROR 07-31 09:09:51 [multiproc_executor.py:284] Worker proc VllmWorker-2 died "
         "unexpectedly (exit code: None), shutting down executor.\n")


def test_a_crash_in_compiled_code_is_named_and_never_read_as_a_silent_death():
    """A kernel that failed a CUDA check exits from C++: no Python exception, vLLM says the worker died. That is
    no evidence of the out-of-memory killer; explain names the crash line and claims no cause."""
    assert crash_line(CRASH).startswith("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455")
    relay = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
             "Failed core proc(s): {}\n")
    assert silent_death(relay) is not None and silent_death(CRASH + relay) is None


def test_a_message_stops_where_another_record_begins():
    """Real neighbours that were read into a message: another process's record, multiprocessing's banner,
    another runtime's log line. One record's own lines (the same prefix) still join."""
    cases = [
        ("(VllmWorkerProcess pid=1253) ERROR 12-25 01:10:28 multiproc_worker_utils.py:229] RuntimeError: NCCL error: "
         "unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
         "ERROR 12-25 01:10:28 engine.py:366] NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for "
         "details)\n"),
        ("Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace "
         "for root cause.\nProcess EngineCore_0:\n"),
        ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
         "[ERROR] 2025-08-14-13:42:44 (PID:5309, Device:-1, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n"),
    ]
    for text in cases:
        [found, *_] = exceptions_in(text)
        assert "\n" not in found.message, found.message
    same = ("(Worker_PP0 pid=7) ERROR 12-02 00:01:19 [core.py:1] torch.AcceleratorError: CUDA error: an illegal memory "
            "access was encountered\n(Worker_PP0 pid=7) ERROR 12-02 00:01:19 [core.py:1] CUDA kernel errors might be "
            "asynchronously reported at some other API call\n")
    assert exceptions_in(same)[0].message.endswith("asynchronously reported at some other API call")


def test_vllm_s_compile_cache_is_not_a_vllm_frame():
    cached = "/home/u/.cache/vllm/torch_compile_cache/066401215d/rank_0_0/inductor_cache/4a/c4a7.py"
    assert vllm_relative(cached) is None
    assert vllm_relative("/env/site-packages/vllm/v1/core/block_pool.py") == "vllm/v1/core/block_pool.py"
    text = f'Traceback (most recent call last):\n  File "{cached}", line 398, in call\nAssertionError: expected size\n'
    assert root_cause(text).where is None


# -- what a review found the first version let through (each input theirs, run before and after) -------------

WARN = "(EngineCore_DP0 pid=7) WARNING 12-02 00:01:18 [interface.py:201] Failed to import from {module} with {error}\n"
FAIL = "(EngineCore_DP0 pid=7) ERROR 12-02 00:01:19 [core.py:866] {line}\n"
RELAY = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
         "proc(s): {}\n")


def _plugin_root(output: str) -> dict:
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause

    relay = {"type": "RuntimeError", "message": "Engine core initialization failed. See root cause above."}
    return _with_root_cause(relay, SimpleNamespace(sections=[("Captured stderr call", output)]))


def test_a_load_warning_never_excuses_a_break_that_is_not_its_missing_op():
    from compat.harness.causes import cause_of as cause_of_error
    from compat.harness.causes import error_in

    def cause_of(error):  # the plugin's JSON, typed
        return cause_of_error(error_in(error))

    other_library = WARN.format(module="vllm._flashmla_C", error="ImportError('/v/vllm/_flashmla_C.abi3.so: undefined "
                                "symbol: _Z3foo')")
    api_break = FAIL.format(line="TypeError: torch.ops.vllm.unified_attention_with_output() missing 1 required "
                                 "positional argument: 'output_scale'")
    for text in (other_library + api_break, other_library + FAIL.format(
            line="AttributeError: '_OpNamespace' '_C_utils' object has no attribute 'init_cpu_threads_env'")):
        kept = _plugin_root(text)
        assert not kept["root_cause"].startswith("ImportError"), kept["root_cause"]
        assert root_cause(text + RELAY).type != "ImportError"
    assert cause_of(_plugin_root(other_library + api_break)) is None  # a real break stays one
    own_library = WARN.format(module="vllm._C", error="ImportError('/v/vllm/_C.abi3.so: undefined symbol: _Z3foo')")
    signature = FAIL.format(line="TypeError: torch.ops._C.rms_norm() missing 1 required positional argument: 'epsilon'")
    assert _plugin_root(own_library + signature)["root_cause"].startswith("TypeError")  # not a missing op
    after = FAIL.format(line="AttributeError: '_OpNamespace' '_C_utils' object has no attribute 'x'") + WARN.format(
        module="vllm._C", error="ImportError('/lib/libstdc++.so.6: version `CXXABI_1.3.15\\' not found')")
    assert not _plugin_root(after)["root_cause"].startswith("ImportError")  # a warning after the failure


def test_a_load_failure_no_rule_names_still_reads_as_the_environment():
    from compat.harness.causes import cause_of as cause_of_error
    from compat.harness.causes import error_in

    def cause_of(error):  # the plugin's JSON, typed
        return cause_of_error(error_in(error))

    missing = FAIL.format(line="AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'")
    for error in ("ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')",
                  "ModuleNotFoundError(\"No module named 'vllm._C'\")",
                  "ImportError('something no rule knows')"):
        kept = _plugin_root(WARN.format(module="vllm._C", error=error) + missing)
        assert kept["root_cause"].startswith(error.split("(")[0]), kept["root_cause"]
        assert cause_of(kept).cause == "environment", kept["root_cause"]


def test_a_harmless_load_warning_is_not_a_cause():
    """Ascend and TPU builds print `No module named 'vllm._C'` and carry on: the warning alone never is a server
    log's root cause, never blocks a silent death, and never makes a known paste unknown."""
    killed = (LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text()
    warned = WARN.format(module="vllm._C_AVX512",
                         error="ImportError('libfoo.so: cannot open shared object file')") + killed
    assert silent_death(warned) is not None and root_cause(warned).type != "ImportError"
    from compat.harness.explain import exit_status

    paste = (WARN.format(module="vllm._C", error="ModuleNotFoundError(\"No module named 'vllm._C'\")")
             + 'Traceback (most recent call last):\n  File "/v/vllm/v1/request.py", line 60, in __init__\n'
               "TypeError: Request.__init__() got an unexpected keyword argument 'eos_token_id'\n")
    assert exit_status(explain_paste(paste + "vllm==0.17.0\n")[0]) == 0


def test_aborted_requests_and_words_ending_in_error_are_no_crash_and_no_exception():
    killed = (LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text()
    assert silent_death("INFO 12-02 00:00:01 [async_llm.py:1] Aborted request chatcmpl-1.\n" + killed) is not None
    assert silent_death(killed + "Aborted\n") is None  # the shell's word for SIGABRT
    prose = "(APIServer pid=1) ERROR 12-02 00:00:02 [x.py:1] see tokenizer.error: nothing\n"
    assert silent_death(killed + prose) is not None


def test_a_vllm_installed_under_a_cache_folder_keeps_its_frames():
    poetry = "/home/u/.cache/pypoetry/virtualenvs/app-x-py3.12/lib/python3.12/site-packages/vllm/v1/core/block_pool.py"
    assert vllm_relative(poetry) == "vllm/v1/core/block_pool.py"
