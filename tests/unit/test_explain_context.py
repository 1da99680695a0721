"""A registry entry whose message is generic (aux_hidden_states_truthiness: torch's `Boolean value of Tensor
with more than one value is ambiguous`) is known from a paste only where the place or the words around the
exception are the ones it was observed in: speculators' generator checking its captured states."""

from __future__ import annotations

import io
import json
import sys

import pytest

from compat.harness.explain import main
from compat.harness.explain_context import contexts, surroundings
from compat.shared.breakages import BY_ID, Breakage, Symptom

MESSAGE = "RuntimeError: Boolean value of Tensor with more than one value is ambiguous"
PAIR = ["--vllm", "0.22.1", "--speculators", "0.3.0"]

# The shape of the failure in speculators 0.3.0's generator (vllm_hidden_states_generator.py:273, as the
# docs/findings.md#aux_hidden_states_truthiness places it), and the same message from code that is not that check.
GENERATOR = ("Traceback (most recent call last):\n"
             '  File "/job/generate.py", line 40, in <module>\n'
             "    results = generator.generate(batch)\n"
             '  File "/venv/lib/python3.11/site-packages/speculators/data_generation/vllm_hidden_states_generator.py",'
             " line 273, in generate\n"
             "    if not aux_hidden_states:\n"
             f"{MESSAGE}\n")
VLLM_LAYER = ("Traceback (most recent call last):\n"
              '  File "/venv/lib/python3.11/site-packages/vllm/model_executor/layers/linear.py", line 70, in '
              'apply_weights\n'
              "    if bias:\n"
              f"{MESSAGE}\n")
# The outer frame names the captured states; the frame that raised is a training loop's comparison.
OUTER_WORDS = ("Traceback (most recent call last):\n"
               '  File "/job/train.py", line 12, in <module>\n'
               "    loss = step(aux_hidden_states)\n"
               '  File "/job/metrics.py", line 88, in step\n'
               "    if pred == labels:\n"
               f"{MESSAGE}\n")


def run(text: str, *flags: str) -> tuple[int, str]:
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = main(["-", *flags], stdin=io.StringIO(text))
    finally:
        sys.stdout = old
    return code, out.getvalue()


def test_the_generators_failure_is_known():
    code, text = run(GENERATOR, *PAIR)
    assert code == 0 and "known breakage aux_hidden_states_truthiness:" in text, text


@pytest.mark.parametrize("paste", [VLLM_LAYER, OUTER_WORDS], ids=["raised-in-vllm", "only-an-outer-frame-names-it"])
def test_the_same_message_raised_elsewhere_is_not_known(paste):
    code, text = run(paste, *PAIR)
    assert code == 1 and "  known breakage " not in text, text
    assert "closest: aux_hidden_states_truthiness" in text and "never observed" in text


def test_a_one_line_error_counts_only_in_text_that_names_the_generator():
    named = f"# VllmHiddenStatesGenerator fails on vLLM 0.22.1 with speculators 0.3.0\n\n{MESSAGE}\n"
    code, text = run(named)
    assert code == 0 and "known breakage aux_hidden_states_truthiness:" in text, text
    bare = f"# vLLM 0.22.1 fails after the upgrade\n\n{MESSAGE}\n"
    code, text = run(bare, "--speculators", "0.3.0")
    assert code == 1 and "  known breakage " not in text, text


def test_a_result_file_keeps_the_probes_own_symptom(tmp_path):
    """A probe's record has no paste around it: the probe's symptom decides, as in the report."""
    record = {"vllm": "0.22.1", "speculators": "0.3.0", "backend": "gpu", "probes": [
        {"id": "aux_hidden_states_truthiness", "status": "broken", "case": None,
         "error": {"type": "RuntimeError", "message": MESSAGE.split(": ", 1)[1], "where": None}}]}
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(record))
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = main([str(path)], stdin=io.StringIO(""))
    finally:
        sys.stdout = old
    assert code == 0 and "known breakage aux_hidden_states_truthiness:" in out.getvalue()


def test_the_context_is_the_raising_frame_or_the_text_since_the_exception_before():
    assert "vllm_hidden_states_generator.py" in surroundings(GENERATOR, 6)
    assert "aux_hidden_states" not in surroundings(OUTER_WORDS, 6)  # the outer frame is left out
    text = "first line\nValueError: one\nVllmHiddenStatesGenerator said\nRuntimeError: two\n"
    assert contexts(text, [2, 4, 0]) == ["first line\nValueError: one",
                                         "VllmHiddenStatesGenerator said\nRuntimeError: two", None]


def test_only_a_user_symptom_names_a_context():
    entry = BY_ID["aux_hidden_states_truthiness"]
    assert entry.user_symptom is not None and entry.user_symptom.context
    with pytest.raises(ValueError, match="only a user symptom names a context"):
        Breakage(id="x", title="x", introduced_in="0.11.0", affects="<0.4", fix="x", backends=("cpu",),
                 symptom=Symptom(exception=("RuntimeError",), message="ambiguous", context="generator"))
