"""The GPUs this host shows, asked of nvidia-smi: used by the harness (the default backend, the Kimi
gate) and inside the cell (TP cases that need more GPUs than are visible)."""

from __future__ import annotations

import os
import shutil
import subprocess


def _smi_lines(*args: str) -> list[str]:
    """nvidia-smi's non-empty output lines for these arguments ([] without nvidia-smi or when it fails)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _visible() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list (indices or UUIDs), None when unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if visible is None else [d.strip() for d in visible.split(",") if d.strip()]


def host_gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without nvidia-smi); CUDA_VISIBLE_DEVICES narrows them."""
    listed = sum(1 for line in _smi_lines("-L") if line.startswith("GPU "))
    visible = _visible()
    return listed if visible is None else min(listed, len(visible))


def host_gpu_memory_bytes() -> list[int]:
    """Each visible GPU's total memory in bytes, as nvidia-smi reports it ([] without nvidia-smi);
    CUDA_VISIBLE_DEVICES (indices) picks and orders them."""
    lines = _smi_lines("--query-gpu=memory.total", "--format=csv,noheader,nounits")
    listed = [int(line) * 2**20 for line in lines if line.isdigit()]
    picked = _visible()
    if picked is None:
        return listed
    if all(d.isdigit() for d in picked):
        return [listed[int(d)] for d in picked if int(d) < len(listed)]
    return listed[:len(picked)]  # UUIDs: their count, in nvidia-smi's order


def host_gpu_names() -> list[str]:
    """Each visible GPU as nvidia-smi names it, with its memory ("NVIDIA H200, 143771 MiB"); []
    without nvidia-smi. CUDA_VISIBLE_DEVICES narrows them as in host_gpu_count."""
    names = _smi_lines("--query-gpu=name,memory.total", "--format=csv,noheader")
    visible = _visible()
    return names if visible is None else names[:len(visible)]


def describe_gpus(names: list[str]) -> str | None:
    """'2 x NVIDIA H200, 143771 MiB' (or the names one by one where they differ); None for none."""
    if not names:
        return None
    if len(set(names)) == 1:
        return f"{len(names)} x {names[0]}"
    return "; ".join(names)
