"""Tiny models: bytes identical run to run, cached by recipe, shapes vLLM's CPU attention takes."""

import hashlib
import json

import pytest

from compat.fixtures import tiny_deepseek, tiny_llama


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
