"""`nox -s kimi -- --scale-model` ran the Kimi suite on the tiny DeepseekV3 at TP=2 on CPU."""

import json

from conftest import RESULTS


def test_scale_model_suite_passed_and_matches_reference():
    kimi = json.loads((RESULTS / "kimi.json").read_text())
    assert kimi["scale_model"] is True and kimi["tp"] == 2
    assert kimi["status"] == "ok", (kimi["status"], kimi["reason"])
    assert all(p["status"] == "ok" for p in kimi["probes"]), [(p["id"], p["status"]) for p in kimi["probes"]]
    assert kimi["max_abs_error_vs_reference"] < 1e-4
    assert kimi["load_seconds"] > 0 and kimi["tokens_per_second"] > 0
    assert "VLLM_MLA_DISABLE=1" in kimi["difference_from_gpu_run"]
