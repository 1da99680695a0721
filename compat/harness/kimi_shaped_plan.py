"""`nox -s kimi -- --kimi-shaped --layers N [--experts E]`: the Kimi suite on a checkpoint with
Kimi-K2.5's shapes and random weights (compat/shared/kimi_config.py, compat/fixtures/kimi_shaped.py).

Here, in the harness (no torch): the options as a recipe, the refusals (a model that will not fit
the visible GPUs' memory, the host's memory on CPU, or the disk under the model cache, each naming
the options and what would fit), the build (run in the cell's interpreter, which has torch; cached
per recipe under $COMPAT_CACHE_DIR/models, so a second run with the same options reuses it), what
the suite compares the model with, and the shape kimi.json records.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from compat.fixtures.checkpoint import cached_build, default_cache_root
from compat.harness.cell_envs import REPO_ROOT
from compat.shared import kimi_config

# The share of each GPU vLLM may take (the generator's default, vLLM's 0.8) and what it needs on
# top of the weights per rank: activations of a profiling batch (fused-MoE buffers for 8192
# tokens x 8 experts x 4096), the MLA KV cache for the suite's 528-token sequences, CUDA context
# and NCCL buffers. An estimate, said as such in the refusal.
GPU_MEMORY_UTILIZATION = 0.8
RESERVE_BYTES_PER_RANK = 6 * 2**30
# compat.cell.reference loads the model in float32 on the CPU and runs one forward per sequence
# (DeepseekV3's MoE loops over experts in Python): compared only when that is cheap.
REFERENCE_MAX_FLOAT32_BYTES = 4 * 2**30
CONSISTENCY_CHECKS = ("kimi_layers_returned", "kimi_shapes", "kimi_finite", "kimi_not_degenerate",
                      "kimi_batch_consistency", "kimi_repeat_consistency")
BUILD_TIMEOUT = 3600


class ShapedError(ValueError):
    """The Kimi-shaped model cannot be built or run here; the message names the options and what fits."""


def recipe_from_options(options: argparse.Namespace, backend: str) -> dict[str, Any]:
    """The recipe for these options (generated on CUDA for the gpu backend); ShapeError when bad."""
    return kimi_config.recipe(layers=options.layers, experts=options.experts, width_divisor=options.width_divisor,
                             dtype=options.dtype or "bfloat16", quantization=options.quantization,
                             seed=options.seed, generator="cuda" if backend == "gpu" else "cpu")


def options_text(recipe: dict[str, Any]) -> str:
    text = f"--layers {recipe['layers']} --experts {recipe['experts']}"
    if recipe["width_divisor"] > 1:
        text += f" --width-divisor {recipe['width_divisor']}"
    return text + f" --dtype {recipe['dtype']}"


def per_rank_bytes(recipe: dict[str, Any], tp: int) -> int:
    """Weights split over the TP ranks (embeddings vocab-parallel, attention heads and expert widths
    split) plus the reserve: what one GPU needs."""
    weights: int = kimi_config.sizes(recipe)["bytes"]
    return -(-weights // tp) + RESERVE_BYTES_PER_RANK


def gpu_problem(recipe: dict[str, Any], tp: int, gpu_bytes: list[int]) -> str | None:
    """Why the model will not fit `tp` of these GPUs (each given in bytes), with what would; None if it fits."""
    if len(gpu_bytes) < tp:
        return None  # the gate says it: too few GPUs
    usable = int(GPU_MEMORY_UTILIZATION * min(gpu_bytes[:tp]))
    needed = per_rank_bytes(recipe, tp)
    if needed <= usable:
        return None
    sizes = kimi_config.sizes(recipe)["bytes_per"]
    budget = (usable - RESERVE_BYTES_PER_RANK) * tp  # weights that fit over the tp ranks
    layers_fit = _most(recipe, "layers", kimi_config.LAYERS, budget)
    experts_fit = _most(recipe, "experts", kimi_config.EXPERTS, budget)
    hints = []
    if layers_fit is not None:
        hints.append(f"--layers {layers_fit} with --experts {recipe['experts']}")
    if experts_fit is not None:
        hints.append(f"--experts {experts_fit} with --layers {recipe['layers']}")
    count = len(gpu_bytes)
    wider = [n for n in (2, 4, 8) if tp < n <= count and per_rank_bytes(recipe, n) <= usable]
    if wider:
        hints.append(f"--tp {wider[0]} (of the {count} visible GPUs)")
    gib = 2**30
    return (f"{options_text(recipe)} does not fit TP={tp} on these GPUs: it needs about "
            f"{needed / gib:.1f} GiB per rank ({sizes_text(recipe)}, split over {tp} rank(s), plus "
            f"{RESERVE_BYTES_PER_RANK / gib:.0f} GiB for activations, KV cache and CUDA context), and vLLM may "
            f"take {GPU_MEMORY_UTILIZATION:g} x {min(gpu_bytes[:tp]) / gib:.1f} GiB = {usable / gib:.1f} GiB of "
            f"each GPU. What would fit: {'; '.join(hints) if hints else 'nothing at this --width-divisor'} "
            f"(an MoE layer with {recipe['experts']} experts is {sizes['moe_layer'] / gib:.2f} GiB, "
            f"one routed expert {sizes['routed_expert'] / 2**20:.0f} MiB)")


def _most(recipe: dict[str, Any], option: str, bounds: tuple[int, int], budget: int) -> int | None:
    """The largest value of `option` (layers or experts, the rest as asked) whose weights fit in
    `budget` bytes, or None when not even the smallest does (the checkpoint's bytes are linear in each)."""
    def size(value: int) -> int:
        weights: int = kimi_config.sizes({**recipe, option: value})["bytes"]
        return weights

    low = size(bounds[0])
    if low > budget:
        return None
    return min(bounds[1], bounds[0] + (budget - low) // (size(bounds[0] + 1) - low))


def sizes_text(recipe: dict[str, Any]) -> str:
    parts = kimi_config.sizes(recipe)
    gib = 2**30
    return (f"{parts['bytes'] / gib:.1f} GiB of {recipe['dtype']} weights: embeddings + lm_head "
            f"{parts['bytes_per']['embeddings_and_lm_head'] / gib:.2f} GiB, dense layer "
            f"{parts['bytes_per']['dense_layer'] / gib:.2f} GiB, {recipe['layers'] - 1} MoE layer(s) of "
            f"{parts['bytes_per']['moe_layer'] / gib:.2f} GiB")


def host_problem(recipe: dict[str, Any], cache_root: Path, backend: str) -> str | None:
    """Why the checkpoint cannot be written (disk) or, on CPU, held (memory) here; None if it can."""
    size = kimi_config.sizes(recipe)["bytes"]
    gib = 2**30
    root = _existing_parent(cache_root)
    free = shutil.disk_usage(root).free
    if free < size * 1.05:
        return (f"{options_text(recipe)}: the checkpoint is {size / gib:.1f} GiB but {root} (the model cache, "
                f"$COMPAT_CACHE_DIR/models) has {free / gib:.1f} GiB free; set COMPAT_CACHE_DIR to a larger "
                "disk or lower --layers/--experts")
    if backend == "cpu":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if size * 2 > ram:  # the weights in vLLM's workers plus the page cache of the files
            return (f"{options_text(recipe)} on CPU: {size / gib:.1f} GiB of weights, twice that held while "
                    f"loading, and this host has {ram / gib:.1f} GiB of memory; lower --layers/--experts or "
                    "raise --width-divisor (1, 2, 4, ..., 64)")
    return None


def _existing_parent(path: Path) -> Path:
    path = Path(path)
    while not path.exists():
        path = path.parent
    return path


def ensure(recipe: dict[str, Any], python: Path, cache_root: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The model folder for `recipe`, built with `python` (the cell's interpreter) unless cached.
    Returns it and the build's figures (`reused` True when the folder existed)."""
    built: dict[str, Any] = {}

    def build(dest: Path) -> None:
        started = time.monotonic()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                           os.environ.get("PYTHONPATH")]))}
        env.pop("VIRTUAL_ENV", None)
        print(f"[kimi] building the Kimi-shaped checkpoint ({options_text(recipe)}, {sizes_text(recipe)}) "
              f"on {recipe['generator']} with {python}", flush=True)
        out = subprocess.run([str(python), "-m", "compat.fixtures.kimi_shaped", "--recipe", json.dumps(recipe),
                              "--dest", str(dest)], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                             timeout=BUILD_TIMEOUT)
        if out.returncode != 0:
            raise ShapedError(f"building the Kimi-shaped checkpoint ({options_text(recipe)}) with {python} "
                              f"failed (exit {out.returncode}): {out.stderr.strip()[-1500:]}")
        built.update(json.loads(out.stdout.strip().splitlines()[-1]), wall_seconds=round(time.monotonic() - started, 2))

    path = cached_build(kimi_config.name(recipe), recipe, build, cache_root)
    if built:
        return path, {**built, "reused": False}
    stored = path / "build.json"
    return path, {**(json.loads(stored.read_text()) if stored.is_file() else {}), "reused": True}


def cache_root() -> Path:
    return default_cache_root()


def reference_plan(recipe: dict[str, Any]) -> dict[str, Any]:
    """Whether the suite compares with transformers, and why (recorded as kimi.json's `compared`)."""
    float32 = kimi_config.sizes({**recipe, "dtype": "float32"})["bytes"]
    gib = 2**30
    if float32 <= REFERENCE_MAX_FLOAT32_BYTES:
        return {"transformers_reference": True, "checks": [*CONSISTENCY_CHECKS, "kimi_matches_reference"],
                "why": f"the float32 transformers reference of this model is {float32 / gib:.2f} GiB (at most "
                       f"{REFERENCE_MAX_FLOAT32_BYTES / gib:.0f} GiB is compared): loaded on the CPU and run"}
    return {"transformers_reference": False, "checks": list(CONSISTENCY_CHECKS),
            "why": f"not compared with transformers: compat.cell.reference loads the model in float32 on the CPU "
                   f"({float32 / gib:.1f} GiB here, more than the {REFERENCE_MAX_FLOAT32_BYTES / gib:.0f} GiB "
                   "limit) and DeepseekV3's MoE runs its experts one by one in Python; the reference comparison "
                   "runs on the scale model (--scale-model) and on a Kimi-shaped model small enough (e.g. "
                   "--width-divisor 32). Here: the consistency checks only (every returned row against the "
                   "batch, single and repeated calls)"}


def suite_settings(recipe: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The Kimi suite spec's fields (compat.shared.cell_spec.KimiSuiteSpec) a Kimi-shaped run sets."""
    return {"dtype": recipe["dtype"], "reference": bool(plan["transformers_reference"]),
            "no_reference": "" if plan["transformers_reference"] else plan["why"]}


def record(recipe: dict[str, Any], path: Path | None = None, build: dict[str, Any] | None = None) -> dict[str, Any]:
    """kimi.json's `kimi_shaped`: the options, the config values, parameters, bytes, shards and the build."""
    summary = kimi_config.summary(recipe)
    if path is not None:
        summary["path"] = str(path)
        summary["bytes_on_disk"] = sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
    if build is not None:
        summary["build"] = build
    return summary

