"""MLA (DeepSeek's multi-head latent attention) in a vLLM build: which MLA attention backends to ask
about for the platform (MLA_BACKENDS, PREFILL_DIMS: compat.cell.mla_report reads them in the cell's
interpreter, as `python -m compat.cell.mla_report` from the harness or `backends_here()` inside a cell),
and whether MLA can be on for a model's latent (choose_mla). Used by the Kimi suite (compat.harness.kimi)
and the server-era cells (compat.cell.server_models). Pure: imports neither side, nor vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MLA_OFF = "MLA off (VLLM_MLA_DISABLE=1)"
MLA_OFF_EFFECT = ("DeepSeek attention runs with the MLA weights expanded to plain multi-head attention; "
                  "the GPU run uses MLA")
# What compat.cell.mla_report asks the cell's vLLM build about: the MLA attention backends for the platform.
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

