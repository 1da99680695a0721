"""The tiny DeepseekV3 fixture: a custom-code tokenizer as Kimi's, and the latent-576 variant."""

import json

from compat.fixtures import tiny_deepseek


def test_tokenizer_is_custom_code_behind_an_auto_map(tmp_path):
    folder = tiny_deepseek.ensure(tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TinyKimiTokenizer"
    assert config["auto_map"]["AutoTokenizer"] == [None, "tokenization_tiny_kimi.TinyKimiTokenizer"]
    assert "class TinyKimiTokenizer(PreTrainedTokenizerFast)" in (folder / "tokenization_tiny_kimi.py").read_text()


def test_mla_576_variant_has_kimis_latent_and_is_otherwise_the_same(tmp_path):
    folder = tiny_deepseek.ensure(tmp_path, tiny_deepseek.MLA_576)
    config = json.loads((folder / "config.json").read_text())
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576
    assert (config["hidden_size"], config["num_hidden_layers"]) == (256, 7)
    assert folder.name.startswith("tiny-deepseek-mla576-")
    default = json.loads((tiny_deepseek.ensure(tmp_path) / "config.json").read_text())
    assert default["kv_lora_rank"] + default["qk_rope_head_dim"] == 96
