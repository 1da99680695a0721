"""`nox -s kimi -- --scale-model` ran the Kimi suite on the tiny DeepseekV3 at TP=2 (CPU in CI)."""

import json

from conftest import RESULTS


def kimi():
    return json.loads((RESULTS / "kimi.json").read_text())


def test_scale_model_suite_passed_and_matches_reference():
    record = kimi()
    assert record["scale_model"] is True and record["tp"] == 2
    assert record["status"] == "ok", (record["status"], record["reason"])
    assert all(p["status"] == "ok" for p in record["probes"]), [(p["id"], p["status"]) for p in record["probes"]]
    if record["dtype"] == "float32":  # 16-bit: the row rule of kimi_matches_reference decides
        assert record["max_abs_error_vs_reference"] < 1e-4
    assert record["load_seconds"] > 0 and record["tokens_per_second"] > 0


def test_mla_is_what_vllm_used_and_where_it_is_off_the_record_says_why():
    record = kimi()
    mla = record["mla"]
    assert record["use_mla"] is mla["enabled"]
    uses_mla_kernels = any("MLA" in impl for impl in record["attention_impls"])
    assert uses_mla_kernels is mla["enabled"], record["attention_impls"]
    if mla["enabled"]:
        assert "difference_from_gpu_run" not in record
    else:
        assert record["difference_from_gpu_run"] == mla["reason"] and "VLLM_MLA_DISABLE=1" in mla["reason"]


def test_the_custom_code_tokenizer_was_loaded_with_trust_remote_code():
    assert [fix["id"] for fix in kimi()["suite_fixes"]] == ["tokenizer_trust_remote_code"]


def test_consistency_was_checked_row_by_row_with_margin():
    probes = {p["id"]: p for p in kimi()["probes"]}
    for probe_id in ("kimi_batch_consistency", "kimi_repeat_consistency"):
        detail = probes[probe_id]["detail"]
        assert detail["rows"] == 4 * 902 and detail["failed_rows"] == 0
        assert detail["max_relative_error"] <= detail["bound"]
        assert detail["max_separation_ratio"] <= detail["separation"]
        if detail["dtype"] == "float32":  # 16-bit: outliers may bring a wrong row within it; separation decides
            assert detail["min_other_relative_distance"] > detail["bound"], "a wrong row would pass the bound"


def test_a_16bit_run_held_the_bulk_against_the_reference():
    detail = {p["id"]: p for p in kimi()["probes"]}["kimi_matches_reference"]["detail"]
    if "median_relative_error" not in detail:
        return  # float32: compat.cell.reference's comparison, checked above
    assert detail["median_relative_error"] <= detail["bound"]
    assert detail["failed_rows"] <= detail["unstable_rows_allowed"] * detail["rows"]
