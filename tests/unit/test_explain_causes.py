"""`nox -s explain` on real pastes (tests/unit/corpus/explain_causes/): the root cause it names and
whose fault it says that is, against what each issue's thread found; and the parser's readings those
pastes showed wrong, each on its own real lines."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from compat.harness.explain import explain_paste, render
from compat.shared.tracebacks import crash_line, exceptions_in, root_cause, silent_death, vllm_relative

CORPUS = Path(__file__).parent / "corpus" / "explain_causes"
PASTES = sorted(CORPUS.glob("*.txt"))


def truth(paste: Path) -> dict:
    return tomllib.loads(paste.with_suffix(".truth.toml").read_text())


def reading(text: str) -> tuple[str, str | bool]:
    """(root, cause) as explain gives them: the last exception that does not relay another."""
    explanations, _ = explain_paste(text)
    if not explanations:
        return ("crash" if crash_line(text) else "none"), False
    roots = [ex for ex in explanations if not ex.found.wrapper]
    if not roots:
        return "relay", False
    return roots[-1].found.type, (roots[-1].cause.cause if roots[-1].cause else False)


def test_the_corpus_has_sources_and_truths():
    assert len(PASTES) >= 20
    for paste in PASTES:
        t = truth(paste)
        assert t["source"].startswith("https://github.com/") and t["root"] and "cause" in t, paste


@pytest.mark.parametrize("paste", PASTES, ids=[p.stem for p in PASTES])
def test_explain_names_the_root_and_its_cause(paste):
    t = truth(paste)
    got = reading(paste.read_text())
    if "gap" in t:
        assert got != (t["root"], t["cause"]), f"{paste.stem} now comes out right: remove its gap note"
        return
    assert got == (t["root"], t["cause"]), f"{paste.stem}: {t['note']}"


def test_a_module_s_lower_case_exception_is_read_with_its_module():
    text = ("ERROR 04-15 05:23:10 engine.py:137]     struct.unpack(\"iiiiiiii\", s)\n"
            "ERROR 04-15 05:23:10 engine.py:137] struct.error: unpack requires a buffer of 32 bytes\n")
    assert [(f.type, f.message) for f in exceptions_in(text)] == [("struct.error", "unpack requires a buffer of 32 bytes")]
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
         "ERROR 12-25 01:10:28 engine.py:366] NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"),
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
