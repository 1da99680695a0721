"""The Kimi-shaped model's config, tensors, sizes and refusals (no torch: compat.shared.kimi_config and
compat.harness.kimi_shaped_plan). The weights themselves: tests/builder (in a cell venv)."""

from __future__ import annotations

import json

import pytest

from compat.harness import kimi, kimi_shaped_plan
from compat.shared import kimi_config

GIB = 2**30
# Kimi-K2.5's text config as published (moonshotai/Kimi-K2-Instruct's config.json; the cited copy in
# compat/shared/kimi_config.py), written out here again so a wrong constant there fails.
PUBLISHED = {"hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1536,
             "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
             "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
             "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 1,
             "vocab_size": 163840, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
             "scoring_func": "sigmoid", "routed_scaling_factor": 2.827, "norm_topk_prob": True,
             "rope_theta": 50000.0, "rms_norm_eps": 1e-5}
H200 = 143771 * 2**20  # nvidia-smi's memory.total of an H200, MiB


def test_full_width_config_is_kimis_text_config_at_the_asked_depth():
    config = kimi_config.hf_config(kimi_config.recipe(layers=3))
    assert {k: config[k] for k in PUBLISHED} == {**PUBLISHED}
    assert config["num_hidden_layers"] == 3 and config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert config["model_type"] == "deepseek_v3" and config["rope_scaling"]["type"] == "yarn"
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576  # the MLA latent


def test_experts_option_changes_only_the_routed_expert_count():
    full, fewer = (kimi_config.hf_config(kimi_config.recipe(layers=3, experts=e)) for e in (384, 64))
    assert fewer["n_routed_experts"] == 64
    assert {k: v for k, v in fewer.items() if k not in ("n_routed_experts", "kimi_shaped")} == \
        {k: v for k, v in full.items() if k not in ("n_routed_experts", "kimi_shaped")}


@pytest.mark.parametrize("divisor", [2, 32, 64])
def test_reduced_width_keeps_kimis_ratios_and_per_head_sizes(divisor):
    config = kimi_config.hf_config(kimi_config.recipe(layers=3, experts=8, width_divisor=divisor))
    assert config["hidden_size"] == 7168 // divisor
    for key in ("num_attention_heads", "q_lora_rank", "intermediate_size", "moe_intermediate_size"):
        assert config[key] / config["hidden_size"] == PUBLISHED[key] / PUBLISHED["hidden_size"], key
    for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "vocab_size",
                "num_experts_per_tok", "routed_scaling_factor", "topk_method", "scoring_func"):
        assert config[key] == PUBLISHED[key], key


def test_tensors_are_deepseek_v3s_names_with_a_dense_first_layer():
    names = {name: shape for name, shape, _ in kimi_config.tensors(kimi_config.recipe(layers=3, experts=8))}
    assert names["model.layers.0.mlp.gate_proj.weight"] == (18432, 7168)
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" not in names
    assert names["model.layers.2.mlp.experts.7.down_proj.weight"] == (7168, 2048)
    assert "model.layers.2.mlp.experts.8.down_proj.weight" not in names
    assert names["model.layers.1.mlp.shared_experts.up_proj.weight"] == (2048, 7168)
    assert names["model.layers.1.self_attn.q_b_proj.weight"] == (64 * 192, 1536)
    assert names["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == (576, 7168)
    assert names["model.layers.1.self_attn.kv_b_proj.weight"] == (64 * 256, 512)
    assert names["model.layers.1.self_attn.o_proj.weight"] == (7168, 64 * 128)
    assert names["model.layers.1.mlp.gate.weight"] == (8, 7168)
    assert names["lm_head.weight"] == names["model.embed_tokens.weight"] == (163840, 7168)


def test_one_dense_and_two_moe_layers_of_kimi_are_74_gb_of_bfloat16():
    sizes = kimi_config.sizes(kimi_config.recipe(layers=3))
    assert 73.5e9 < sizes["bytes"] < 74.5e9  # the figure: ~74 GB
    per = sizes["bytes_per"]
    assert per["routed_expert"] == 3 * 2048 * 7168 * 2
    assert per["embeddings_and_lm_head"] == 2 * 163840 * 7168 * 2
    assert sizes["bytes"] == per["embeddings_and_lm_head"] + per["dense_layer"] + 2 * per["moe_layer"] + 7168 * 2


def test_shards_hold_every_tensor_once_in_order_within_the_limit():
    recipe = kimi_config.recipe(layers=3)
    plan = kimi_config.shards(recipe)
    flat = [t for shard in plan for t in shard]
    assert flat == kimi_config.tensors(recipe)
    assert len(plan) == 18  # 74 GB in files of at most 4 GiB
    for shard in plan:
        assert len(shard) == 1 or sum(kimi_config.nbytes(s, d) for _, s, d in shard) <= recipe["shard_bytes"]


def test_tensor_seeds_depend_on_seed_and_name_only():
    one, other = kimi_config.recipe(layers=2, seed=1), kimi_config.recipe(layers=2, seed=2)
    assert kimi_config.tensor_seed(one, "a") == kimi_config.tensor_seed({**one, "layers": 9}, "a")
    assert len({kimi_config.tensor_seed(one, "a"), kimi_config.tensor_seed(one, "b"),
                kimi_config.tensor_seed(other, "a")}) == 3


@pytest.mark.parametrize("options, named, accepted", [
    ({"layers": 1}, "--layers 1", "from 2 to 61"),
    ({"layers": 62}, "--layers 62", "from 2 to 61"),
    ({"layers": 3, "experts": 7}, "--experts 7", "from 8 to 384"),
    ({"layers": 3, "experts": 385}, "--experts 385", "from 8 to 384"),
    ({"layers": 3, "width_divisor": 3}, "--width-divisor 3", "[1, 2, 4, 8, 16, 32, 64]"),
    ({"layers": 3, "dtype": "int8"}, "--dtype 'int8'", "bfloat16, float16, float32"),
    ({"layers": 3, "quantization": "int4"}, "--quantization 'int4'", "accepted: none"),
    ({"layers": 3, "quantization": "fp8"}, "--quantization 'fp8'", "accepted: none"),
    ({"layers": 3, "seed": -1}, "--seed -1", "non-negative integer"),
    ({"layers": "3"}, "--layers '3'", "an integer"),
])
def test_bad_options_are_refused_naming_the_option_and_what_is_accepted(options, named, accepted):
    with pytest.raises(kimi_config.ShapeError) as exc:
        kimi_config.recipe(**options)
    assert named in str(exc.value) and accepted in str(exc.value)


def test_three_kimi_layers_fit_one_h200_with_all_experts_and_six_do_not():
    assert kimi_shaped_plan.gpu_problem(kimi_config.recipe(layers=3, generator="cuda"), 1, [H200]) is None
    message = kimi_shaped_plan.gpu_problem(kimi_config.recipe(layers=6, generator="cuda"), 1, [H200])
    assert message.startswith("--layers 6 --experts 384 --dtype bfloat16 does not fit TP=1")
    assert "--layers 4 with --experts 384" in message  # 4.7 + 1 + 3 x 34 GB + reserve < 0.8 x 140 GiB
    assert "--experts 242 with --layers 6" in message  # 5 MoE layers x 242 x 84 MiB + the rest
    assert "--tp" not in message  # one GPU visible: no wider TP to offer


def test_refusal_offers_a_wider_tp_when_the_gpus_are_there():
    message = kimi_shaped_plan.gpu_problem(kimi_config.recipe(layers=6, generator="cuda"), 1, [H200] * 2)
    assert "--tp 2 (of the 2 visible GPUs)" in message
    assert kimi_shaped_plan.gpu_problem(kimi_config.recipe(layers=6, generator="cuda"), 2, [H200] * 2) is None


def test_the_hints_really_fit():
    recipe = kimi_config.recipe(layers=8, experts=384, generator="cuda")
    message = kimi_shaped_plan.gpu_problem(recipe, 1, [H200])
    layers = int(message.split("What would fit: --layers ")[1].split()[0])
    experts = int(message.split("; --experts ")[1].split()[0])
    assert kimi_shaped_plan.gpu_problem({**recipe, "layers": layers}, 1, [H200]) is None
    assert kimi_shaped_plan.gpu_problem({**recipe, "layers": layers + 1}, 1, [H200]) is not None
    assert kimi_shaped_plan.gpu_problem({**recipe, "experts": experts}, 1, [H200]) is None
    assert kimi_shaped_plan.gpu_problem({**recipe, "experts": experts + 1}, 1, [H200]) is not None


def test_too_few_gpus_is_left_to_the_gate():
    assert kimi_shaped_plan.gpu_problem(kimi_config.recipe(layers=61), 8, [H200] * 2) is None


def test_disk_refusal_names_the_cache_and_its_variable(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 * GIB, 90 * GIB, 10 * GIB))
    message = kimi_shaped_plan.host_problem(kimi_config.recipe(layers=3, experts=64), tmp_path / "models", "gpu")
    assert "16.3 GiB" in message and "COMPAT_CACHE_DIR" in message and str(tmp_path) in message
    recipe = kimi_config.recipe(layers=3, experts=8, width_divisor=32)
    assert kimi_shaped_plan.host_problem(recipe, tmp_path, "gpu") is None


def test_reference_is_compared_only_where_cheap_and_says_why():
    small = kimi_shaped_plan.reference_plan(kimi_config.recipe(layers=3, experts=8, width_divisor=32))
    big = kimi_shaped_plan.reference_plan(kimi_config.recipe(layers=3, experts=64))
    assert small["transformers_reference"] and "kimi_matches_reference" in small["checks"]
    assert not big["transformers_reference"] and "kimi_matches_reference" not in big["checks"]
    assert "not compared with transformers" in big["why"] and "float32" in big["why"]
    suite = kimi_shaped_plan.suite_settings(kimi_config.recipe(layers=3, experts=64), big)
    assert suite["reference"] is False and suite["no_reference"] == big["why"]


def test_record_has_the_shape_and_the_sizes():
    record = kimi_shaped_plan.record(kimi_config.recipe(layers=3, experts=64))
    assert record["config"]["hidden_size"] == 7168 and record["config"]["n_routed_experts"] == 64
    assert record["differs_from_kimi_k25"] == {"num_hidden_layers": [61, 3], "n_routed_experts": [384, 64]}
    assert record["parameters"] * 2 == record["bytes"] - 2 * 64 * 2  # bfloat16, the float32 router biases
    json.dumps(record)


def test_cli_takes_the_shaped_options_and_refuses_them_alone():
    options = kimi.parse_options(["--kimi-shaped", "--layers", "3", "--experts", "64", "--backend", "gpu",
                                  "--tp", "1"])
    assert (options.layers, options.experts, options.width_divisor, options.tp) == (3, 64, 1, 1)
    assert kimi.parse_options(["--kimi-shaped", "--layers", "3", "--backend", "gpu"]).tp == 8
    assert kimi.parse_options(["--kimi-shaped", "--layers", "3", "--backend", "cpu"]).tp == 2


@pytest.mark.parametrize("argv, says", [
    (["--layers", "3"], "--layers choose(s) the Kimi-shaped model: add --kimi-shaped"),
    (["--kimi-shaped"], "--kimi-shaped needs --layers N"),
    (["--kimi-shaped", "--layers", "3", "--scale-model"], "are alternatives"),
    (["--kimi-shaped", "--layers", "3", "--quantization", "int4"], "accepted: none"),
    (["--kimi-shaped", "--layers", "3", "--experts", "2"], "--experts 2: expected an integer from 8 to 384"),
    (["--kimi-shaped", "--layers", "3", "--mla-fixture"], "--mla-fixture chooses the scale model's variant"),
])
def test_cli_refusals_exit_64_naming_the_option(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        kimi.parse_options(argv)
    assert exc.value.code == 64 and says in capsys.readouterr().err


def test_few_layers_are_all_read_on_the_shaped_model_only(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 3, "hidden_size": 64}))
    assert kimi.check_model(tmp_path, every_layer_if_few=True).layers == (0, 1, 2)
    with pytest.raises(kimi.KimiError, match="not four distinct"):
        kimi.check_model(tmp_path)


def test_a_run_that_will_not_fit_stops_before_building_with_exit_2_and_says_why(tmp_path, monkeypatch, capsys):
    import shutil

    from compat.shared import gpus

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**13, 0, 10**13))
    monkeypatch.setattr(kimi, "host_gpu_count", lambda: 1)
    monkeypatch.setattr(gpus, "host_gpu_memory_bytes", lambda: [H200])
    code = kimi.main(["--kimi-shaped", "--layers", "6", "--backend", "gpu", "--tp", "1",
                      "--results", str(tmp_path / "r"), "--reports", str(tmp_path / "p")])
    record = json.loads((tmp_path / "r" / "kimi.json").read_text())
    assert code == 2 and record["status"] == "error"
    assert "does not fit TP=1" in record["reason"] and "--layers 4 with --experts 384" in record["reason"]
    assert "does not fit TP=1" in capsys.readouterr().err
    assert record["gpu_memory_bytes"] == [H200] and record["kimi_shaped"]["options"]["layers"] == 6
    assert not (tmp_path / "cache").exists()  # nothing was built
