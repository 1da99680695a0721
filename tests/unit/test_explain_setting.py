"""`nox -s explain` reads the paste's setting (compat.harness.paste_setting) and scopes the registry by it: an
entry observed only on another backend than the paste's is a candidate with that caveat, never known, and the
exit status follows; the user's flags win and the output says what the paste said. A report in words with no
exception lists the silent faults its words describe, as candidates only (compat.harness.explain_prose)."""

from __future__ import annotations

import io
import json
import sys

import pytest

from compat.harness.explain import explain_paste, main
from compat.harness.explain_prose import DATA_WORDS, described_faults
from compat.harness.issue_comment import comment
from compat.harness.paste_setting import Setting, read_setting
from compat.shared.breakages import BY_ID, CHUNKED_PREFILL, MANY_PROMPTS, PREFIX_CACHING, Breakage, Prose, Symptom

# vllm#45546 (the PR's overview): the EAGLE-3 refusal on ROCm, an MI355X; hybrid_no_eagle3_interface: seen on cpu only
EAGLE3 = ("Speculative decoding with EAGLE3 works for MiniMax-M3 on CUDA but fails at engine init on ROCm:\n"
          "```\nRuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested\n```\n"
          "(raised in `vllm/v1/worker/gpu_model_runner.py::_setup_eagle3_aux_hidden_state_outputs`)\n")
ON_MI355X = "validated GSM8k on MI355X\n"


def run(argv, stdin_text=""):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(argv, stdin=io.StringIO(stdin_text))
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def test_an_entry_observed_on_another_backend_is_a_candidate_never_known():
    code, out, _ = run(["-"], EAGLE3)
    assert code == 0 and "known breakage hybrid_no_eagle3_interface" in out  # no backend read: as before
    code, out, _ = run(["-"], EAGLE3 + ON_MI355X)
    assert code == 1 and "known breakage hybrid_no_eagle3_interface" not in out
    assert ("candidate hybrid_no_eagle3_interface" in out
            and "observed on cpu only; this paste is from a ROCm GPU ('MI355X', line 6): not counted known" in out)
    assert "setting read: backend ROCm GPU ('MI355X', line 6)" in out


def test_the_user_s_backend_wins_and_the_output_says_what_the_paste_said():
    code, out, _ = run(["-", "--backend", "cpu"], EAGLE3 + ON_MI355X)
    assert code == 0 and "known breakage hybrid_no_eagle3_interface" in out
    assert "backend CPU build (--backend) [the paste says ROCm GPU ('MI355X', line 6)] (set by --backend)" in out
    code, out, _ = run(["-", "--backend", "rocm"], EAGLE3)
    assert code == 1 and "this paste is from a ROCm GPU (--backend)" in out
    code, out, _ = run(["-", "--backend", "gpu"], EAGLE3)
    assert code == 1 and "this paste is from a CUDA GPU (--backend)" in out
    code, out, _ = run(["-", "--vllm", "0.22.1"], "vLLM 0.26.0\n" + EAGLE3)
    assert code == 0 and "vLLM 0.22.1 (--vllm) [the paste says 0.26.0 ('vLLM 0.26.0', line 1)]" in out


def test_the_json_and_github_outputs_carry_the_candidate_and_the_setting():
    _, out, _ = run(["-", "--json"], EAGLE3 + ON_MI355X)
    data = json.loads(out)
    assert data["exit"] == 1 and data["versions"]["backend"] == "rocm" and data["versions"]["registry_backend"] is None
    [ex] = data["exceptions"]
    assert ex["known"] == [] and [c["id"] for c in ex["candidates"]] == ["hybrid_no_eagle3_interface"]
    _, out, _ = run(["-", "--format", "github"], EAGLE3 + ON_MI355X)
    assert "candidate hybrid_no_eagle3_interface: it was observed on cpu only" in out and "title=setting read::" in out


def test_the_issue_bot_names_the_candidate():
    body = comment(*explain_paste(EAGLE3 + ON_MI355X))
    assert "**No known breakage matches**" in body
    assert "candidate `hybrid_no_eagle3_interface`" in body and "this paste is from a ROCm GPU" in body


def test_a_result_file_s_gpu_backend_is_the_registry_s():
    record = {"vllm": "0.22.1", "speculators": "0.8.1", "backend": "gpu", "probes": [
        {"id": "layer_ids_by_model", "status": "broken", "case": None, "error": {
            "type": "RuntimeError", "where": None,
            "message": "Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested"}}]}
    code, out, _ = run(["-"], json.dumps(record))
    assert code == 1 and "candidate hybrid_no_eagle3_interface" in out and "a CUDA GPU (result file)" in out


# -- a report in words: vllm#44485 -------------------------------------------------------------------------------

REPORT = ("# [Bug]: [0.22.0] When using Hidden State Extraction, if enable-prefix-caching is turned on, the length of "
          "hidden_states obtained will be inconsistent with the length of token_ids.\n\nH800 vllm0.22.0\n")


def test_a_report_in_words_lists_the_silent_faults_it_describes_as_candidates_only():
    code, out, err = run(["-"], REPORT)
    assert code == 2 and "no exception found" in err and "candidates below" in err
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("  candidate ")]
    assert listed == ["prefix_caching_default", "connector_prefix_cache_rows", "connector_prefix_cache_rows_client"]
    assert "never counted known" in out and "known breakage" not in out
    assert "it says 'prefix-caching' (line 1) and 'hidden_states obtained will be inconsistent' (line 1)" in out
    _, out, _ = run(["-", "--json"], REPORT)
    data = json.loads(out)
    assert data["exit"] == 2 and [d["id"] for d in data["described"] if d["candidate"]] == listed


def test_a_report_whose_versions_rule_an_entry_out_names_it_not_a_candidate():
    code, out, _ = run(["-"], REPORT.replace("vllm0.22.0", "vllm0.26.0"))
    assert code == 2
    assert "  candidate prefix_caching_default" in out
    assert "  not a candidate: connector_prefix_cache_rows (" in out and "your paste says 0.26.0" in out
    code, out, _ = run(["-", "--speculators", "0.8.1"], REPORT)
    assert [line.split()[1] for line in out.splitlines() if line.startswith("  candidate ")] == \
        ["connector_prefix_cache_rows"]


def test_a_report_must_name_vllm_or_speculators_and_a_situation_and_a_data_fault():
    assert run(["-"], "with prefix caching enabled the rows are missing\n")[1] == ""  # about nothing of ours
    assert run(["-"], "vLLM 0.22.0: the hidden states are inconsistent with the token ids\n")[1] == ""  # no situation
    assert run(["-"], "vLLM 0.22.0 with prefix caching enabled is slow\n")[1] == ""  # no data fault


@pytest.mark.parametrize("words", ["--no-enable-prefix-caching", "enable_prefix_caching=False",
                                   "prefix caching disabled", "with prefix caching off", "without prefix caching",
                                   "disable prefix caching", "--no-enable-chunked-prefill"])
def test_a_feature_turned_off_is_no_situation(words):
    assert not described_faults(f"vLLM 0.22.0, {words}: hidden states rows are missing\n", Setting())


@pytest.mark.parametrize("text,entry", [
    ("vLLM 0.16 speculators 0.3: with prefix caching the second call returns fewer rows", "prefix_caching_default"),
    ("vLLM 0.16 speculators 0.3, prefix caching: hidden states are wrong values", "prefix_caching_default"),
    ("vLLM 0.16 speculators 0.3: with chunked prefill on, the last hidden states are truncated",
     "chunked_prefill_default"),
    ("vLLM 0.16 speculators 0.4: with 17 prompts the results come back in the wrong order", "result_order"),
    ("vLLM 0.16 speculators 0.4: generate() over many prompts, each result belongs to another prompt", "result_order"),
])
def test_each_data_fault_is_read_in_a_user_s_words(text, entry):
    assert [d.entry.id for d in described_faults(text, read_setting(text)) if d.why_not is None] == [entry]


def test_every_data_symptom_a_report_names_has_words():
    named = {d for e in BY_ID.values() if e.prose for d in e.prose.data}
    assert named and named <= set(DATA_WORDS)
    assert {e.id for e in BY_ID.values() if e.prose} == {
        "prefix_caching_default", "chunked_prefill_default", "result_order", "connector_prefix_cache_rows",
        "connector_prefix_cache_rows_client"}
    assert {PREFIX_CACHING, CHUNKED_PREFILL, MANY_PROMPTS} == {e.prose.situation for e in BY_ID.values() if e.prose}


def test_only_a_data_fault_is_reported_in_words():
    with pytest.raises(ValueError, match="some of"):
        Prose(situation="x", data=())
    with pytest.raises(ValueError, match="some of"):
        Prose(situation="x", data=("rows_gone",))
    with pytest.raises(ValueError, match="only a data fault"):
        Breakage(id="x", title="x", introduced_in="0.11.0", affects=">=0", fix="x", backends=("cpu",),
                 symptom=Symptom(exception=("TypeError",), message="x"),
                 prose=Prose(situation="x", data=("rows_missing",)))


def test_an_exception_whose_type_the_paste_does_not_show_says_so():
    title = "# [Bug]: Exception in worker VllmWorkerProcess while processing method init_device: CUDA error: x\n"
    code, out, _ = run(["-"], title)
    assert code == 1 and "Exception: CUDA error: x" in out and "its type is not shown" in out
    _, out, _ = run(["-", "--json"], title)
    assert json.loads(out)["exceptions"][0]["type_shown"] is False
