"""The MLA attention backends a vLLM build has for the platform, read in the cell's interpreter (vLLM importable
there): each wanted backend's head sizes and dtypes, the MLA prefill kernels available (vLLM >= 0.22) and the
head dims each takes (vLLM >= 0.26), or why the backend is missing.

Run by the harness as `python -m compat.cell.mla_report WANTED [DIMS]` (compat.harness.kimi; WANTED a JSON list of
[name, module, class], DIMS a JSON list of (qk_nope, qk_rope, v) head dims), the checkout on PYTHONPATH; it prints
one JSON line. Inside a cell, backends_here() asks the same for compat.shared.mla's MLA_BACKENDS and PREFILL_DIMS.
compat.shared.mla reads what it found (choose_mla, prefill_takes).
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, Sequence


def prefill_kernels() -> dict[str, bool] | None:
    """vLLM >= 0.22 picks MLA's prefill kernel apart (FLASH_ATTN, FLASHINFER, CPU SDPA): which are available."""
    try:
        from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum
    except Exception:
        return None
    found = {}
    for kernel in MLAPrefillBackendEnum:
        try:
            found[kernel.name] = bool(kernel.get_class().is_available())
        except Exception:
            found[kernel.name] = False
    return found


def prefill_dims(candidates: Sequence[Sequence[int]]) -> dict[str, list[list[int]]] | None:
    """vLLM >= 0.26: per available prefill kernel, the candidate head dims it takes."""
    try:
        from vllm.v1.attention.backends.mla.prefill.base import MLADimensions
        from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum
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


def common_head_sizes() -> list[int]:
    """MLA's metadata also checks MLACommonBackend's sizes (0.22.1: [320, 576])."""
    for module in ("vllm.model_executor.layers.attention.mla_attention", "vllm.v1.attention.backends.mla.common"):
        try:
            return [int(h) for h in importlib.import_module(module).MLACommonBackend.get_supported_head_sizes()]
        except Exception:
            continue
    return []


def head_sizes(backend: Any, common: list[int]) -> list[int]:
    own = [int(h) for h in backend.get_supported_head_sizes()]
    return [h for h in own if h in common] if own and common else own or common


def report(wanted: Sequence[Sequence[str]], dims: Sequence[Sequence[int]]) -> dict[str, dict[str, Any]]:
    """Each wanted (name, module, class) backend: its head sizes and dtypes, and the prefill kernels (with the
    dims each takes, where dims are asked about), or {"missing": why}. AMX_MLA is kept only where the CPU has AMX
    tiles, and then in CPU_MLA's place (vLLM prefers it there)."""
    found: dict[str, dict[str, Any]] = {}
    prefill = prefill_kernels()
    common = common_head_sizes()
    kernel_dims = prefill_dims(dims) if dims else None
    for name, module, cls in wanted:
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
    return found


def backends_here(platform: str) -> dict[str, dict[str, Any]]:
    """report() in this interpreter (a cell's, where vLLM is importable) for the platform's MLA backends, asking
    the prefill kernels about PREFILL_DIMS; what vLLM prints on import is left out, and the answer reads as the
    harness reads the printed line."""
    import contextlib
    import io

    from compat.shared.mla import MLA_BACKENDS, PREFILL_DIMS

    with contextlib.redirect_stdout(io.StringIO()):
        found = report(MLA_BACKENDS[platform], [list(d) for d in PREFILL_DIMS])
    read: dict[str, dict[str, Any]] = json.loads(json.dumps(found))
    return read


def main(argv: Sequence[str]) -> None:
    wanted = json.loads(argv[1])
    dims = json.loads(argv[2]) if len(argv) > 2 else []
    print(json.dumps(report(wanted, dims)))


if __name__ == "__main__":
    main(sys.argv)
