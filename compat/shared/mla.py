"""MLA (DeepSeek's multi-head latent attention) in a vLLM build: which MLA attention backends it
has for the platform (MLA_REPORT, run in the cell's interpreter: `python -c MLA_REPORT` from the
harness, or `backends_here()` inside a cell), and whether MLA can be on for a model's latent
(choose_mla). Used by the Kimi suite (compat.harness.kimi) and the server-era cells
(compat.cell.server_models). Pure: imports neither side, nor vLLM (the report is text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MLA_OFF = "MLA off (VLLM_MLA_DISABLE=1)"
MLA_OFF_EFFECT = ("DeepSeek attention runs with the MLA weights expanded to plain multi-head attention; "
                  "the GPU run uses MLA")
# Run in the cell's interpreter: the MLA attention backends this vLLM build has for the platform.
MLA_BACKENDS = {
    # vLLM prefers AMX_MLA (bfloat16 only) where the CPU has AMX tiles, else CPU_MLA.
    "cpu": (("CPU_MLA", "vllm.v1.attention.backends.mla.cpu_mla", "CPUMLABackend"),
            ("AMX_MLA", "vllm.v1.attention.backends.mla.amx_mla", "AMXMLABackend")),
    "gpu": (("TRITON_MLA", "vllm.v1.attention.backends.mla.triton_mla", "TritonMLABackend"),),
}
# (qk_nope_head_dim, qk_rope_head_dim, v_head_dim) the report asks each available MLA prefill kernel
# about (vLLM >= 0.26 picks the prefill kernel by head dims: FlashAttention and FlashInfer take
# DeepSeek's 128/64/128, GLM's and Mistral's, not the tiny fixture's 32/64/32, "Model does not have
# supported MLA dimensions", seen on an H200): compat/fixtures/tiny_deepseek.py MLA_576 and MLA_KIMI_HEADS.
PREFILL_DIMS = ((32, 64, 32), (128, 64, 128))
MLA_REPORT = r"""
import importlib, json, sys

def prefill_kernels():  # vLLM >= 0.22 picks MLA's prefill kernel apart (FLASH_ATTN, FLASHINFER, CPU SDPA)
    try:
        from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum
    except Exception:
        return None
    found = {}
    for kernel in MLAPrefillBackendEnum:
        try:
            found[kernel.name] = bool(kernel.get_class().is_available())
        except Exception as exc:
            found[kernel.name] = False
    return found

def prefill_dims(candidates):  # vLLM >= 0.26: per available prefill kernel, the candidate head dims it takes
    try:
        from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum
        from vllm.v1.attention.backends.mla.prefill.base import MLADimensions
    except Exception:
        return None
    try:
        from vllm.platforms import current_platform
        capability = current_platform.get_device_capability()
    except Exception:
        capability = None
    takes = {}
    for kernel in MLAPrefillBackendEnum:
        try:
            backend = kernel.get_class()
            if not backend.is_available():
                continue
            if capability is not None and not backend.supports_compute_capability(capability):
                continue
            takes[kernel.name] = [list(d) for d in candidates if backend.supports_mla_dimensions(
                MLADimensions(qk_nope_head_dim=d[0], qk_rope_head_dim=d[1], v_head_dim=d[2]))]
        except Exception:
            continue
    return takes

def common_head_sizes():  # MLA's metadata also checks MLACommonBackend's sizes (0.22.1: [320, 576])
    for module in ("vllm.model_executor.layers.attention.mla_attention", "vllm.v1.attention.backends.mla.common"):
        try:
            return [int(h) for h in importlib.import_module(module).MLACommonBackend.get_supported_head_sizes()]
        except Exception:
            continue
    return []

def head_sizes(backend, common):
    own = [int(h) for h in backend.get_supported_head_sizes()]
    return [h for h in own if h in common] if own and common else own or common

found = {}
prefill = prefill_kernels()
common = common_head_sizes()
dims = globals().get("DIMS") or (json.loads(sys.argv[2]) if len(sys.argv) > 2 else [])
kernel_dims = prefill_dims(dims) if dims else None
for name, module, cls in globals().get("WANTED") or json.loads(sys.argv[1]):
    try:
        backend = getattr(importlib.import_module(module), cls)
        found[name] = {"head_sizes": head_sizes(backend, common),
                       "dtypes": [str(d).replace("torch.", "") for d in backend.supported_dtypes]}
        if prefill is not None and not any(prefill.values()):
            found[name] = {"missing": f"{name}: no MLA prefill kernel available ({', '.join(prefill)}: none "
                                      "importable; FLASH_ATTN needs vllm_flash_attn's .so, FLASHINFER flashinfer)"}
        elif prefill is not None:
            found[name]["prefill"] = [k for k, ok in prefill.items() if ok]
            if kernel_dims is not None:
                found[name]["prefill_dims"] = kernel_dims
    except Exception as exc:
        found[name] = {"missing": f"{name} ({module}): {type(exc).__name__}: {str(exc)[:200]}"}
amx = False
if "missing" not in found.get("AMX_MLA", {"missing": 1}):
    try:
        import torch
        amx = bool(torch.cpu._is_amx_tile_supported())
    except Exception:
        pass
if not amx:
    found.pop("AMX_MLA", None)
elif "missing" not in found.get("AMX_MLA", {"missing": 1}):
    found.pop("CPU_MLA", None)
print(json.dumps(found))
"""


@dataclass(frozen=True)
class MlaChoice:
    enabled: bool
    reason: str
    dtype: str | None  # what the scale model runs in (None: the model's own, "auto")
    latent: int | None = None
    backends: dict[str, dict[str, Any]] | None = None

    def record(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "reason": self.reason, "latent": self.latent, "backends": self.backends}


def choose_mla(found: dict[str, dict[str, Any]], latent: int | None, dtype: str | None = None) -> MlaChoice:
    """MLA on when a backend of this build takes the latent (and the dtype, if one was asked
    for); the dtype then is float32 where such a backend takes it, else bfloat16."""
    plain = dtype or "float32"
    if latent is None:
        return MlaChoice(False, "the model has no MLA (no kv_lora_rank/qk_rope_head_dim in its config)", plain)
    usable = {name: b for name, b in found.items() if "missing" not in b}
    if not usable:
        missing = "; ".join(b["missing"] for b in found.values())
        return MlaChoice(False, f"{MLA_OFF}: this vLLM build has no usable MLA attention backend here "
                         f"({missing}); {MLA_OFF_EFFECT}", plain, latent, found)
    fitting = {name: b for name, b in usable.items() if not b["head_sizes"] or latent in b["head_sizes"]}
    if not fitting:
        sizes = sorted({h for b in usable.values() for h in b["head_sizes"]})
        return MlaChoice(False, f"{MLA_OFF}: {', '.join(usable)} take(s) a latent of {sizes} only; this model's is "
                         f"{latent} (kv_lora_rank + qk_rope_head_dim; --mla-fixture builds 512 + 64 = 576); "
                         + MLA_OFF_EFFECT, plain, latent, found)
    dtypes = sorted({d for b in fitting.values() for d in b["dtypes"]})
    if dtype is not None and dtype not in dtypes:
        return MlaChoice(False, f"{MLA_OFF}: --dtype {dtype}, but {', '.join(fitting)} take(s) {dtypes} only; "
                         + MLA_OFF_EFFECT, dtype, latent, found)
    chosen = dtype or ("float32" if "float32" in dtypes else "bfloat16")
    note = "" if dtype or chosen == "float32" else "; no float32 there, so the scale model runs in bfloat16"
    return MlaChoice(True, f"MLA on: {', '.join(fitting)} take(s) a latent of {latent} in {dtypes}{note}",
                     chosen, latent, found)


def prefill_takes(found: dict[str, dict[str, Any]], dims: tuple[int, int, int]) -> tuple[bool, str]:
    """Whether this build's MLA prefill takes these head dims (qk_nope, qk_rope, v): (True, '') where
    the report read no per-kernel dims (a build that picks its prefill kernel without them: any
    dims), else where an available prefill kernel lists them; (False, why) otherwise."""
    listed = {name: b["prefill_dims"] for name, b in found.items()
              if "missing" not in b and isinstance(b.get("prefill_dims"), dict)}
    if not listed:
        return True, ""
    kernels = {k: ds for per in listed.values() for k, ds in per.items()}
    taking = sorted(k for k, ds in kernels.items() if list(dims) in [list(d) for d in ds])
    if taking:
        return True, f"MLA prefill {', '.join(taking)} takes head dims {tuple(dims)}"
    said = "; ".join(f"{k}: {[tuple(d) for d in ds] or 'none of those asked about'}"
                     for k, ds in sorted(kernels.items()))
    return False, (f"no available MLA prefill kernel takes head dims (qk_nope, qk_rope, v) = {tuple(dims)} "
                   f"({said or 'no prefill kernel available'})")


def backends_here(platform: str) -> dict[str, dict[str, Any]]:
    """MLA_REPORT run in this interpreter (a cell's, where vLLM is importable), asking the prefill
    kernels about PREFILL_DIMS."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(MLA_REPORT, "<mla-report>", "exec"),
             {"__name__": "__mla_report__", "WANTED": MLA_BACKENDS[platform], "DIMS": [list(d) for d in PREFILL_DIMS]})
    found: dict[str, dict[str, Any]] = json.loads(out.getvalue().strip().splitlines()[-1])
    return found
