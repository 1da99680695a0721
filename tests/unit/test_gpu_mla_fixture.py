"""The DeepseekV3 variant's fixture follows what the build's MLA kernels take (compat.shared.mla):
on CPU the latent-576 fixture with the tiny head dims (unchanged), on GPUs whose MLA prefill kernels
take only real models' head dims (vLLM >= 0.26: FlashAttention/FlashInfer take DeepSeek's 128/64/128)
Kimi's head dims, in bfloat16; the hybrid's Triton GDN prefill where flashinfer is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.cell import server_models
from compat.fixtures import tiny_deepseek
from compat.shared.mla import PREFILL_DIMS, prefill_takes

TINY = list(tiny_deepseek.mla_dims(tiny_deepseek.MLA_576))
KIMI = list(tiny_deepseek.mla_dims(tiny_deepseek.MLA_KIMI_HEADS))
# what compat.cell.mla_report found on official 0.26.0's kernels (FLASH_ATTN: DeepSeek / GLM / Mistral dims only)
GPU_026 = {"TRITON_MLA": {"head_sizes": [576], "dtypes": ["float16", "bfloat16"], "prefill": ["FLASH_ATTN"],
                          "prefill_dims": {"FLASH_ATTN": [KIMI]}}}
CPU_032 = {"CPU_MLA": {"head_sizes": [576], "dtypes": ["float32", "bfloat16"], "prefill": ["CPU"],
                       "prefill_dims": {"CPU": [TINY, KIMI]}}}
GPU_NO_DIMS_KERNEL = {"TRITON_MLA": {"head_sizes": [576], "dtypes": ["bfloat16"], "prefill": ["FLASH_ATTN"],
                                     "prefill_dims": {"FLASH_ATTN": []}}}


@pytest.fixture
def built(monkeypatch, tmp_path):
    made = []

    def fake(cache_root=None, recipe=tiny_deepseek.RECIPE):
        path = tmp_path / f"ds-{recipe['kv_lora_rank']}-{recipe['qk_nope_head_dim']}-{recipe['v_head_dim']}"
        path.mkdir(exist_ok=True)
        (path / "config.json").write_text(json.dumps({"num_hidden_layers": recipe["num_hidden_layers"]}))
        made.append(recipe)
        return path

    monkeypatch.setattr(tiny_deepseek, "ensure", fake)
    return made


def test_the_report_asks_about_both_fixtures_head_dims():
    assert [list(d) for d in PREFILL_DIMS] == [TINY, KIMI]
    assert TINY == [32, 64, 32] and KIMI == [128, 64, 128]


def test_kimi_head_dims_on_a_gpu_whose_prefill_takes_only_those(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: GPU_026)
    v = server_models.deepseek_v3("gpu")
    assert built == [tiny_deepseek.MLA_KIMI_HEADS] and v.env == {"VLLM_MLA_DISABLE": "0"}
    assert v.dtype == "bfloat16" and v.notes["mla"]["enabled"] and v.notes["mla"]["head_dims"] == KIMI
    assert v.notes["mla"]["fixture"].startswith("MLA_KIMI_HEADS")
    recipe = built[0]  # still tiny: only the head dims grew
    assert (recipe["hidden_size"], recipe["num_hidden_layers"], recipe["num_attention_heads"]) == (256, 7, 4)
    assert recipe["kv_lora_rank"] + recipe["qk_rope_head_dim"] == 576


def test_cpu_keeps_the_tiny_head_dims(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: CPU_032)
    v = server_models.deepseek_v3("cpu")
    assert built == [tiny_deepseek.MLA_576] and v.notes["mla"]["enabled"] and v.notes["mla"]["head_dims"] == TINY


def test_a_build_that_lists_no_dims_takes_the_tiny_heads(monkeypatch, built):
    found = {"TRITON_MLA": {"head_sizes": [576], "dtypes": ["bfloat16"], "prefill": ["FLASH_ATTN"]}}
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: found)
    server_models.deepseek_v3("gpu")
    assert built == [tiny_deepseek.MLA_576]


def test_no_prefill_kernel_for_either_turns_mla_off_and_says_why(monkeypatch, built):
    monkeypatch.setattr("compat.cell.mla_report.backends_here", lambda platform: GPU_NO_DIMS_KERNEL)
    v = server_models.deepseek_v3("gpu")
    assert built == [tiny_deepseek.RECIPE] and v.env == {"VLLM_MLA_DISABLE": "1"}
    reason = v.notes["mla"]["reason"]
    assert reason.startswith("MLA off (VLLM_MLA_DISABLE=1)") and "(128, 64, 128)" in reason


def test_prefill_takes_reads_the_kernels():
    assert prefill_takes(GPU_026, (128, 64, 128))[0]
    ok, why = prefill_takes(GPU_026, (32, 64, 32))
    assert not ok and "FLASH_ATTN: [(128, 64, 128)]" in why
    assert prefill_takes({"X": {"missing": "gone"}}, (32, 64, 32)) == (True, "")


def test_the_kimi_heads_fixture_builds_with_those_dims(tmp_path):
    folder = tiny_deepseek.ensure(tmp_path, tiny_deepseek.MLA_KIMI_HEADS)
    config = json.loads((folder / "config.json").read_text())
    assert (config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"], config["kv_lora_rank"]) \
        == (128, 64, 128, 512)
    assert folder.name.startswith("tiny-deepseek-mla576-heads128-128-")
    assert Path(folder, "model.safetensors").stat().st_size < 60e6


def test_hybrid_uses_vllms_triton_gdn_prefill_on_a_gpu_without_flashinfer(monkeypatch, tmp_path):
    from compat.fixtures import tiny_hybrid

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    monkeypatch.setattr(tiny_hybrid, "ensure", lambda cache_root=None: tmp_path)
    monkeypatch.setattr(server_models, "_has_engine_arg", lambda name: name == "gdn_prefill_backend")
    monkeypatch.setattr(server_models, "_has_module", lambda name: name != "flashinfer")
    v = server_models.hybrid("gpu")
    assert v.serve_flags == ["--gdn-prefill-backend",
                             "triton"] and v.env_shims == [server_models.GPU_GDN_TRITON_PREFILL]
    assert v.dtype == "bfloat16"  # the Triton/FLA kernel refuses float32 (seen on 0.26.0)
    monkeypatch.setattr(server_models, "_has_module", lambda name: True)  # flashinfer there: vLLM as shipped
    assert server_models.hybrid("gpu").serve_flags == []
    monkeypatch.setattr(server_models, "_has_module", lambda name: name != "flashinfer")
    monkeypatch.setattr(server_models, "_has_engine_arg", lambda name: False)  # 0.24.0: no such flag
    assert server_models.hybrid("gpu").serve_flags == []
