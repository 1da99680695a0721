"""Tiny models: bytes identical run to run, cached by recipe, shapes vLLM's CPU attention takes."""

import hashlib
import json

import pytest

from compat.fixtures import data, tiny_deepseek, tiny_llama


def digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def header(path):
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + size])


@pytest.mark.parametrize("builder", [tiny_llama, tiny_deepseek], ids=["llama", "deepseek"])
def test_builds_are_byte_identical_and_cached(builder, tmp_path):
    first = builder.ensure(tmp_path / "a")
    second = builder.ensure(tmp_path / "b")
    assert first.name == second.name  # named by the recipe digest
    assert digest(first) == digest(second)
    assert builder.ensure(tmp_path / "a") == first  # reused, not rebuilt


def test_llama_shapes_follow_its_config(tmp_path):
    folder = tiny_llama.ensure(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    tensors = header(folder / "model.safetensors")
    assert config["head_dim"] >= 32  # vLLM's CPU attention rejects head_dim 16
    q = tensors["model.layers.0.self_attn.q_proj.weight"]
    assert q["shape"] == [config["num_attention_heads"] * config["head_dim"], config["hidden_size"]]
    assert q["dtype"] == "F32"
    assert sum(k.endswith("input_layernorm.weight") for k in tensors) == config["num_hidden_layers"]


def test_tokenizer_is_word_level_with_w_words(tmp_path):
    folder = tiny_llama.ensure(tmp_path)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "WordLevel"
    assert tokenizer["model"]["vocab"]["w5"] == 5


# Published records name these folders (the recipe digest is the model id): fixtures/*.json must keep them,
# and the weights with them. (tiny_hybrid's weights come from torch's init: built in a cell venv, not here.)
PUBLISHED = {
    "llama": ("tiny-llama-cd08163302134f06", "2e1400e6d41c9612a2210f1dbfb93e92d1f471925d89ba44f591350e20c8b087",
              "ba66fa0e883400b0804b9c1c1c01ce4a21cef32afb3884e84579a018e7b41a99"),
    "deepseek": ("tiny-deepseek-c8bc7dd4fea16ffb", "28397623b78fbd13bcf379cf41efc670704ab27ddf4a73d939ec374bbc41e5b4",
                 "a01bc012b15b6d9a26a01faa8e75b02b0bbf1b78976d4cfecb58c558e0fcdebb"),
    "mla576": ("tiny-deepseek-mla576-b8d5f58a5f9bdbdd",
               "efaae22e50ec86325b6ed8c316e3431ec84322dd43d5d52f1ab335f667b07bb6",
               "d4a27b7259fbb3d399389e3dea03cc96ed3cb9f77188987417a057e33a6f100f"),
    "kimi_heads": ("tiny-deepseek-mla576-heads128-128-b5151fe11cb92e47",
                   "d6d8579ea22d938e9332d9c33e4029141c6497acd82b341ac8676d2307758439",
                   "5d45dc1972c9bf26ad6bface7e4d6361b8ea8767c9117afaf5b974892ea05bd6"),
}
ENSURE = {
    "llama": tiny_llama.ensure,
    "deepseek": tiny_deepseek.ensure,
    "mla576": lambda root: tiny_deepseek.ensure(root, tiny_deepseek.MLA_576),
    "kimi_heads": lambda root: tiny_deepseek.ensure(root, tiny_deepseek.MLA_KIMI_HEADS),
}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_the_data_files_keep_the_published_model_ids_and_bytes(model, tmp_path):
    folder = ENSURE[model](tmp_path)
    name, weights, config = PUBLISHED[model]
    files = digest(folder)
    assert (folder.name, files["model.safetensors"], files["config.json"]) == (name, weights, config)


def test_hybrid_recipe_keeps_its_digest():
    from compat.fixtures import checkpoint, tiny_hybrid

    assert checkpoint.recipe_digest({**tiny_hybrid.RECIPE, "torch": "2.11.0"}) == "f9b2fa5933273c94"


def test_the_new_family_recipes_keep_their_digests():
    """The Qwen3-MoE and Qwen2.5-VL fixtures (issue 32) are keyed like the hybrid: recipe and torch version."""
    from compat.fixtures import checkpoint, tiny_qwen3_moe, tiny_vlm

    assert checkpoint.recipe_digest({**tiny_qwen3_moe.RECIPE, "torch": "2.11.0"}) == "31f7293a3a208ce0"
    assert checkpoint.recipe_digest({**tiny_vlm.RECIPE, "torch": "2.11.0"}) == "3243a77c0a967b9e"


def test_fused_experts_are_written_one_per_expert_as_released_checkpoints_name_them():
    import numpy as np

    from compat.fixtures.initialised import per_expert

    gate_up = np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3)  # 2 experts, 2I = 6, H = 3
    down = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)  # [E, H, I]
    dense = np.ones((3, 3), dtype=np.float32)
    out = per_expert({"model.layers.1.mlp.experts.gate_up_proj": gate_up, "model.layers.1.mlp.experts.down_proj": down,
                      "model.layers.0.mlp.gate_proj.weight": dense})
    assert sorted(out) == sorted(["model.layers.0.mlp.gate_proj.weight"] + [
        f"model.layers.1.mlp.experts.{e}.{w}.weight" for e in (0, 1) for w in ("gate_proj", "up_proj", "down_proj")])
    assert (out["model.layers.1.mlp.experts.1.gate_proj.weight"] == gate_up[1, :3]).all()
    assert (out["model.layers.1.mlp.experts.1.up_proj.weight"] == gate_up[1, 3:]).all()
    assert (out["model.layers.1.mlp.experts.0.down_proj.weight"] == down[0]).all()
    assert per_expert({"model.layers.0.mlp.gate_proj.weight": dense}).keys() == {"model.layers.0.mlp.gate_proj.weight"}


def test_both_moe_fixtures_save_their_experts_under_released_names(monkeypatch, tmp_path):
    """Official vLLM 0.24.0's Qwen3-Next loader skipped fused expert tensors and served uninitialised experts
    (reports/gpu-h200/s6-hybrid-every-id-v024/): the hybrid, like the Qwen3-MoE, writes one tensor per expert."""
    from compat.fixtures import initialised, tiny_hybrid, tiny_qwen3_moe

    named = {}
    monkeypatch.setattr(initialised, "ensure_initialised",
                        lambda name, folder, recipe, cache_root=None, hub_names=None: named.setdefault(name, hub_names))
    tiny_hybrid.ensure(tmp_path)
    tiny_qwen3_moe.ensure(tmp_path)
    assert named == {"tiny_hybrid": initialised.per_expert, "tiny_qwen3_moe": initialised.per_expert}


def test_the_vision_language_fixture_writes_released_names_and_its_processors(tmp_path):
    import json

    from compat.fixtures import tiny_vlm

    names = tiny_vlm.hub_names({"model.language_model.layers.0.mlp.up_proj.weight": 1, "model.visual.blocks.0.x": 2,
                                "lm_head.weight": 3})
    assert names == {"model.layers.0.mlp.up_proj.weight": 1, "visual.blocks.0.x": 2, "lm_head.weight": 3}
    tiny_vlm.processor_files(tmp_path, tiny_vlm.RECIPE)
    image = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert (image["image_processor_type"], image["merge_size"], image["max_pixels"]) == ("Qwen2VLImageProcessor", 2,
                                                                                         112 * 112)
    from compat.fixtures.checkpoint import write_word_tokenizer

    write_word_tokenizer(tmp_path, 512, 2048, {510: "<|image_pad|>"})
    tokenizer = json.loads((tmp_path / "tokenizer.json").read_text())
    assert tokenizer["model"]["vocab"]["<|image_pad|>"] == 510 and "w510" not in tokenizer["model"]["vocab"]
    assert {"id": 510, "content": "<|image_pad|>"}.items() <= tokenizer["added_tokens"][-1].items()
    config = tiny_vlm.hf_config()
    assert config["image_token_id"] == 510 and "special_tokens" not in config and "seed" not in config
    assert sum(config["text_config"]["rope_scaling"]["mrope_section"]) * 2 == (
        config["text_config"]["hidden_size"] // config["text_config"]["num_attention_heads"])


def test_server_prompts_are_the_token_ids_the_probes_always_sent():
    prefix = [4 + (i * 11) % 500 for i in range(140)]
    batch = [[4 + (i * 7) % 500 for i in range(8)], [9 + (i * 13) % 500 for i in range(40)],
             [6 + (i * 3) % 500 for i in range(200)]]
    prompts = data.prompts("server")
    assert prompts == {"batch": batch, "repeated": batch,
                       "shared_prefix": [prefix + [300 + i for i in range(20)], prefix + [400 + i for i in range(12)]]}
    assert prompts["repeated"] is prompts["batch"]


def test_a_missing_data_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "FIXTURES_DIR", tmp_path)
    with pytest.raises(data.FixtureDataMissing, match=r"tiny_llama\.json: not found.*pip install -e"):
        data.recipe("tiny_llama")
