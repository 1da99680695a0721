"""What the default matrix must find, from the seeds' accounts and the CPU runs (measured on
these machines). A difference here is news about vLLM or speculators, or a harness defect."""

import pytest

from compat.shared.breakage_model import REFERENCE_PROBE
from compat.shared.probe_catalog import probes as catalogued
from conftest import probes_by_key

# Read from the probes' markers (compat.shared.probe_catalog): the in-process probes that decide, those of
# them that make one call each (one key, no data), and the reference check's cases.
IN_PROCESS = [p for p in catalogued() if p.suite == "in_process" and not p.advisory]
IN_PROCESS_PROBES = list(dict.fromkeys(p.id for p in IN_PROCESS))
API_PROBES = [p.id for p in IN_PROCESS if not p.data and p.keys == (p.id,)]
CASES = next(list(p.cases) for p in IN_PROCESS if p.id == REFERENCE_PROBE)
FLOAT32_TOLERANCE = 1e-4

BROKEN_ON_016_WITH_030 = {
    ("scheduler_config_fields", None): ("ValidationError", "is_encoder_decoder"),
    ("kv_cache_config_api", None): ("TypeError", "kv_cache_specs"),
    ("scheduler_signature", None): ("TypeError", "block_size"),
    ("block_hasher", None): ("AssertionError", ""),
    ("embed_input_ids", None): ("AttributeError", "get_input_embeddings"),
    ("two_phase_execute", None): ("RuntimeError", "sample_tokens() must be called after execute_model() returns None"),
    ("collective_rpc_unique_reply_rank", "tp1"): ("ContractViolation", "speculators takes reply[0] = Tensor["),
    ("collective_rpc_unique_reply_rank", "tp2"): ("ContractViolation", "speculators takes reply[0] = Tensor["),
    ("aux_hidden_states_truthiness", None): ("RuntimeError",
                                             "Boolean value of Tensor with more than one value is ambiguous"),
}


def test_pinned_pair_is_compatible(cell):
    record = cell("0.11.0", "0.3.0")
    assert record["verdict"] == "compatible", record["verdict"]
    for probe in record["probes"]:
        if probe["id"] in IN_PROCESS_PROBES:
            assert probe["status"] == "ok", (probe["id"], probe["case"], probe["error"], probe["reason"])
        elif not probe["advisory"]:  # the server-era contracts: speculators 0.3.0 does not use them
            assert probe["status"] == "n/a", (probe["id"], probe["status"])
    assert {p["id"] for p in record["probes"]} >= set(IN_PROCESS_PROBES)


def test_pinned_pair_matches_reference_in_float32(cell):
    probes = probes_by_key(cell("0.11.0", "0.3.0"))
    for case in CASES:
        detail = probes[(REFERENCE_PROBE, case)]["detail"]
        assert detail["max_abs_error"] < FLOAT32_TOLERANCE, (case, detail["max_abs_error"])
        assert detail["layer_semantics"] == [[2, 2], [4, 4], [6, 6]], detail["layer_semantics"]


@pytest.mark.parametrize("key", sorted(BROKEN_ON_016_WITH_030, key=str))
def test_seeds_breakages_each_found_on_their_own(cell, key):
    probe = probes_by_key(cell("0.16.0", "0.3.0"))[key]
    exc_type, message = BROKEN_ON_016_WITH_030[key]
    assert probe["status"] == "broken", (key, probe["status"], probe["reason"])
    assert probe["error"]["type"] == exc_type
    assert message in probe["error"]["message"]
    assert probe["with_compat"] == "ok", (key, probe["detail"].get("with_compat"))


def test_request_signature_still_binds_on_016(cell):
    assert probes_by_key(cell("0.16.0", "0.3.0"))[("request_signature", None)]["status"] == "ok"


def test_silent_faults_behind_the_exceptions_on_016(cell):
    """With only the exception-fixing adapters, 0.3.0 returns wrong data (prefix caching and
    chunked prefill now default on); with all adapters it matches the reference."""
    probes = probes_by_key(cell("0.16.0", "0.3.0"))
    behind_the_exception = {"repeated": "prefix_caching_default", "shared_prefix": "prefix_caching_default",
                            "multi_step": "chunked_prefill_default"}
    for case, breakage in behind_the_exception.items():
        probe = probes[(REFERENCE_PROBE, case)]
        assert probe["status"] == "broken"
        api_only = probe["detail"]["api_only"]
        assert (api_only["status"], api_only.get("breakage")) == ("broken", breakage), (case, api_only)
        assert not {"prefix_caching_default", "chunked_prefill_default"} & set(api_only["adapters"]), api_only
    assert probes[(REFERENCE_PROBE, "batch")]["detail"]["api_only"]["status"] == "ok"
    for case in CASES:
        adapted = probes[(REFERENCE_PROBE, case)]["detail"]["with_compat"]
        assert adapted["status"] == "ok", (case, adapted)
        assert adapted["detail"]["max_abs_error"] < FLOAT32_TOLERANCE


def test_the_adapted_reply_is_rank_0s_states(cell):
    """At TP=2 each rank's captured tensors carry its rank (rank * 100 + layer + 1): with compat,
    what speculators 0.3 takes from the reply is rank 0's list, not another rank's, not a wrapper."""
    probe = probes_by_key(cell("0.16.0", "0.3.0"))[("collective_rpc_unique_reply_rank", "tp2")]
    assert probe["detail"]["per_rank"] == ["list[3 × Tensor[8, 256]] (values [1, 2, 3])",
                                           "list[3 × Tensor[8, 256]] (values [101, 102, 103])"]
    assert probe["detail"]["with_compat"]["detail"]["consumed"] == "list[3 × Tensor[8, 256]] (values [1, 2, 3])"


def test_seeds_pair_is_fixed_by_compat(cell):
    assert cell("0.16.0", "0.3.0")["verdict"] == "compatible-with-compat"


def test_040_is_judged_by_its_own_call_shapes_and_data(cell):
    """0.4.0.1 makes vLLM 0.16's calls correctly, but its generate() returns a batch of 11 or more
    prompts in request-id string order (a speculators defect found by the reference probe)."""
    record = cell("0.16.0", "0.4.0.1")
    probes = probes_by_key(record)
    for probe_id in API_PROBES:
        assert probes[(probe_id, None)]["status"] == "ok", (probe_id, probes[(probe_id, None)]["error"])
    reference = {case: probes[(REFERENCE_PROBE, case)] for case in CASES}
    assert {c: p["status"] for c, p in reference.items()} == {
        "batch": "ok", "repeated": "ok", "shared_prefix": "ok", "multi_step": "broken", "tp2": "ok"}
    multi_step = reference["multi_step"]["detail"]
    assert multi_step["breakage"] == "result_order"
    assert multi_step["returned_order"] == [0, 1, *range(10, 17), *range(2, 10)]
    assert all(p["with_compat"] == "ok" for p in reference.values()), {c: p["with_compat"]
                                                                       for c, p in reference.items()}
    assert record["verdict"] == "compatible-with-compat"


def test_every_probe_could_run(cell):
    """`error` means a probe could not decide: never acceptable in the default matrix."""
    for pair in (("0.11.0", "0.3.0"), ("0.16.0", "0.3.0"), ("0.16.0", "0.4.0.1")):
        for probe in cell(*pair)["probes"]:
            assert probe["status"] != "error", (pair, probe["id"], probe["case"], probe["reason"])
            assert probe["with_compat"] != "error", (pair, probe["id"], probe["case"],
                                                     probe["detail"].get("with_compat"))
