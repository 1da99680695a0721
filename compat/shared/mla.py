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
    backends: dict | None = None

    def record(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "reason": self.reason, "latent": self.latent, "backends": self.backends}


def choose_mla(found: dict[str, dict], latent: int | None, dtype: str | None = None) -> MlaChoice:
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


def backends_here(platform: str) -> dict[str, dict]:
    """MLA_REPORT run in this interpreter (a cell's, where vLLM is importable)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(MLA_REPORT, "<mla-report>", "exec"), {"__name__": "__mla_report__", "WANTED": MLA_BACKENDS[platform]})
    return json.loads(out.getvalue().strip().splitlines()[-1])
