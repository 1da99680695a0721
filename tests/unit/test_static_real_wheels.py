"""The static layer on the real released wheels (read from PyPI by range requests, cached under
COMPAT_CACHE_DIR or ~/.cache/vllm-spec-compat). Skipped, saying so, when PyPI cannot be reached."""

from __future__ import annotations

import urllib.request

import pytest

from compat.harness.static.check import static_result
from compat.harness.static.fidelity import fidelity
from compat.harness.static.sources import SourceCache


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/pypi/speculators/json", timeout=15) as response:
            return response.status == 200
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _pypi_reachable(), reason="PyPI (https://pypi.org) is unreachable from here")


@pytest.fixture(scope="module")
def cache():
    return SourceCache()


def broken(result: dict, target: str) -> list[dict]:
    return [f for f in result["findings"] if f["target"] == target and f["outcome"] == "broken"]


def test_request_lost_eos_token_id_in_0_17_0(cache):
    assert not broken(static_result("0.16.0", "0.3.0", cache, reference="0.33.0"), "vllm.v1.request.Request")
    [finding] = broken(static_result("0.17.0", "0.3.0", cache, reference="0.33.0"), "vllm.v1.request.Request")
    assert "unexpected keyword argument 'eos_token_id'" in finding["what"]
    assert finding["vllm_where"].startswith("vllm/v1/request.py:")


def test_scheduler_config_requires_is_encoder_decoder_from_0_12_0(cache):
    assert not broken(static_result("0.11.2", "0.3.0", cache, reference="0.33.0"), "vllm.config.SchedulerConfig")
    [finding] = broken(static_result("0.12.0", "0.3.0", cache, reference="0.33.0"), "vllm.config.SchedulerConfig")
    assert "missing required argument(s) 'is_encoder_decoder'" in finding["what"]


def test_0_33_0_moved_the_kv_cache_planning_functions(cache):
    result = static_result("0.33.0", "0.4.0.1", cache)
    assert result["verdict"] == "api-incompatible"
    moved = {m for f in broken(result, "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups")
             for m in f["moved_to"]}
    assert moved == {"vllm/v1/core/kv_cache_planning.py:642"}


def test_hs_connectors_override_of_write_tensors(cache):
    target = ("vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector."
              "ExampleHiddenStatesConnector._write_tensors")
    assert static_result("0.33.0", "0.9.0", cache)["verdict"] == "api-compatible"
    [finding] = broken(static_result("0.18.0", "0.9.0", cache, reference="0.33.0"), target)
    assert "vLLM never calls the override" in finding["what"] and finding["site"].startswith("hs_connectors/")


def test_cpu_build_fidelity_of_0_16_0(cache):
    assert fidelity("0.16.0", cache)["differ"] == ["vllm/__init__.py", "vllm/_version.py"]
