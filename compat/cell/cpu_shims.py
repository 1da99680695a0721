"""Environment shims: changes that exist only because a cell runs on CPU, reported as such and
kept apart from vLLM-breakage adapters."""

from __future__ import annotations

import os
from types import ModuleType

CPU_CACHE_CAP = 2 * 1024**3  # the generator sizes its KV cache from "free GPU memory"


def cpu_mem_get_info() -> tuple[int, int]:
    """What torch.cuda.mem_get_info would say, answered from RAM and capped."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(available, CPU_CACHE_CAP), pages


def apply_cpu_shims(g: ModuleType) -> list[dict[str, str]]:
    """Patch the generator's view of CUDA memory when no GPU is present."""
    import torch

    if torch.cuda.is_available():
        return []
    shims = []
    torch.cuda.mem_get_info = lambda *_a, **_k: cpu_mem_get_info()
    if hasattr(g, "mem_get_info"):
        g.mem_get_info = cpu_mem_get_info
    shims.append({"id": "cuda_mem_get_info",
                  "why": "the generator sizes its KV cache from torch.cuda.mem_get_info(), which raises "
                         "(0.3) or reads 0 (0.4) without a GPU; answered from RAM, capped at 2 GiB"})
    if hasattr(g, "empty_cache") or hasattr(torch.cuda, "empty_cache"):
        torch.cuda.empty_cache = lambda: None
        if hasattr(g, "empty_cache"):
            g.empty_cache = lambda: None
        shims.append({"id": "cuda_empty_cache",
                      "why": "torch.cuda.empty_cache() after each batch is a no-op without a GPU"})
    return shims
