"""The worker extension vLLM imports in each worker of a server that needs the CPU MoE shim
(`--worker-extension-cls compat.worker.cpu_moe_extension.CpuMoeShim`): importing it applies the shim
(compat/worker/cpu_moe_shim.py), before the model loads."""

from compat.worker.cpu_moe_shim import apply


class CpuMoeShim:
    """An empty worker extension: naming it makes vLLM import this module in its workers."""


apply()
