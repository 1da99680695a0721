"""The Kimi-shaped builder (compat/fixtures/kimi_shaped.py) at a reduced width, on the CPU: the shards and
index it writes load in transformers' DeepseekV3 and give finite outputs, the same seed gives the
same bytes, the dtypes are what the recipe says. Needs torch, transformers and safetensors: run in
a cell venv (`nox -s tests` runs it with the Kimi suite's cell interpreter):

    .venvs/vllm-0.16.0__speculators-0.3.0__cpu/bin/python -m pytest tests/builder
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compat.fixtures import kimi_shaped
from compat.shared import kimi_config

torch = pytest.importorskip("torch", reason="needs torch: run tests/builder with a cell venv's interpreter")
REPO = Path(__file__).resolve().parents[2]
SMALL = dict(layers=3, experts=8, width_divisor=64, dtype="float32", shard_bytes=4 * 2**20)


def build(tmp_path: Path, name: str, **changes) -> Path:
    dest = tmp_path / name
    dest.mkdir()
    kimi_shaped.build(dest, kimi_config.recipe(**{**SMALL, **changes}))
    return dest


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for file_name in sorted(set(index["weight_map"].values())):
        out.update(load_file(folder / file_name))
    return out


def digest(folder: Path) -> str:
    files = sorted(folder.glob("*.safetensors"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("kimi-shaped"), "small")


def test_shards_and_index_hold_every_planned_tensor_with_its_shape_and_dtype(small):
    recipe = kimi_config.recipe(**SMALL)
    index = json.loads((small / "model.safetensors.index.json").read_text())
    planned = kimi_config.tensors(recipe)
    assert sorted(index["weight_map"]) == sorted(name for name, _, _ in planned)
    for number, shard in enumerate(kimi_config.shards(recipe)):
        assert {index["weight_map"][name] for name, _, _ in shard} == {kimi_config.shard_name(number, len(
            kimi_config.shards(recipe)))}
    assert len(set(index["weight_map"].values())) == len(kimi_config.shards(recipe)) > 1
    assert index["metadata"]["total_size"] == kimi_config.sizes(recipe)["bytes"]
    loaded = weights(small)
    assert {name: (tuple(t.shape), str(t.dtype)) for name, t in loaded.items()} == \
        {name: (shape, f"torch.{dtype}") for name, shape, dtype in planned}


def test_transformers_deepseek_v3_loads_it_without_missing_weights_and_runs_finite(small):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(small, dtype=torch.float32, output_loading_info=True)
    assert type(model).__name__ == "DeepseekV3ForCausalLM"
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == ([], [], [])
    assert model.config.n_routed_experts == 8 and model.config.hidden_size == 112
    tokenizer = AutoTokenizer.from_pretrained(small, trust_remote_code=True)
    assert type(tokenizer).__name__ == "TinyKimiTokenizer"  # custom code behind an auto_map, as Kimi's
    ids = tokenizer("w5 w6 w70000 w163839", return_tensors="pt").input_ids
    assert ids.tolist() == [[5, 6, 70000, 163839]]
    with torch.no_grad():
        out = model.eval()(ids, output_hidden_states=True)
    assert all(bool(torch.isfinite(h).all()) for h in out.hidden_states) and bool(torch.isfinite(out.logits).all())
    stds = [float(h.std()) for h in out.hidden_states]
    assert all(0.1 < s < 50 for s in stds), stds  # neither vanishing nor exploding through the layers
    for a, b in zip(out.hidden_states, out.hidden_states[1:]):
        assert not torch.equal(a, b)


def test_every_shard_header_is_8_byte_aligned(small):
    for shard in small.glob("*.safetensors"):
        with shard.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            assert length % 8 == 0, shard.name  # the safetensors format's alignment of the tensors
            assert json.loads(handle.read(length))["__metadata__"] == {"format": "pt"}


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, small):
    assert digest(build(tmp_path, "again")) == digest(small)
    other = weights(build(tmp_path, "seed", seed=7))
    mine = weights(small)
    assert all(not torch.equal(other[name], mine[name]) for name in mine if not name.endswith("norm.weight"))


def test_a_tensors_values_do_not_depend_on_the_sharding(tmp_path, small):
    one_file = weights(build(tmp_path, "one", shard_bytes=2**30))
    assert len(list((tmp_path / "one").glob("*.safetensors"))) == 1
    mine = weights(small)
    assert all(torch.equal(one_file[name], mine[name]) for name in mine)


def test_bfloat16_checkpoint_keeps_the_router_bias_float32(tmp_path):
    loaded = weights(build(tmp_path, "bf16", dtype="bfloat16", layers=2))
    assert loaded["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == torch.float32
    assert loaded["model.layers.1.mlp.experts.0.up_proj.weight"].dtype == torch.bfloat16
    assert loaded["lm_head.weight"].dtype == torch.bfloat16
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16"


def test_scales_follow_fan_in(small):
    loaded = weights(small)
    down = loaded["model.layers.1.mlp.experts.3.down_proj.weight"]  # fan-in moe_intermediate 32
    assert abs(float(down.std()) - 32 ** -0.5) < 0.02
    assert abs(float(loaded["model.norm.weight"].mean()) - 1.0) < 0.05


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.fixtures.kimi_shaped", *args], capture_output=True, text=True,
                          cwd=REPO)


def test_cli_refuses_a_recipe_that_is_not_the_checked_one(tmp_path):
    bad = {**kimi_config.recipe(**SMALL), "experts": 3}
    out = run_cli("--recipe", json.dumps(bad), "--dest", str(tmp_path))
    assert out.returncode == 2 and "--experts 3: expected an integer from 8 to 384" in out.stderr
    unknown = {**kimi_config.recipe(**SMALL), "builder": "other/9"}
    out = run_cli("--recipe", json.dumps(unknown), "--dest", str(tmp_path))
    assert out.returncode == 2 and "kimi_shaped/1" in out.stderr
    out = run_cli("--recipe", "{not json", "--dest", str(tmp_path))
    assert out.returncode == 2 and "kimi_shaped:" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only interpreter refuses the cuda generator")
def test_cuda_generator_without_cuda_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(kimi_config.ShapeError, match="generator 'cuda'.*build with generator 'cpu'"):
        kimi_shaped.build(tmp_path, kimi_config.recipe(**SMALL, generator="cuda"))


def test_cuda_generator_draws_on_the_first_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert kimi_shaped.device_for(kimi_config.recipe(**SMALL, generator="cuda")) == torch.device("cuda:0")
    assert kimi_shaped.device_for(kimi_config.recipe(**SMALL)) == torch.device("cpu")
