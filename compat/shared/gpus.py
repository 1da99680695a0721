"""The GPUs this host shows, asked of nvidia-smi: used by the harness (the default backend, the Kimi
gate) and inside the cell (TP cases that need more GPUs than are visible)."""

from __future__ import annotations

import os
import shutil
import subprocess


def host_gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without nvidia-smi); CUDA_VISIBLE_DEVICES narrows them."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    listed = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return min(listed, len([d for d in visible.split(",") if d.strip()]))
    return listed


def host_gpu_memory_bytes() -> list[int]:
    """Each visible GPU's total memory in bytes, as nvidia-smi reports it ([] without nvidia-smi);
    CUDA_VISIBLE_DEVICES (indices) picks and orders them."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    listed = [int(line.strip()) * 2**20 for line in out.stdout.splitlines() if line.strip().isdigit()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return listed
    picked = [d.strip() for d in visible.split(",") if d.strip()]
    if all(d.isdigit() for d in picked):
        return [listed[int(d)] for d in picked if int(d) < len(listed)]
    return listed[:len(picked)]  # UUIDs: their count, in nvidia-smi's order


def host_gpu_names() -> list[str]:
    """Each visible GPU as nvidia-smi names it, with its memory ("NVIDIA H200, 143771 MiB"); []
    without nvidia-smi. CUDA_VISIBLE_DEVICES narrows them as in host_gpu_count."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[:host_gpu_count()] if os.environ.get("CUDA_VISIBLE_DEVICES") is not None else names


def describe_gpus(names: list[str]) -> str | None:
    """'2 x NVIDIA H200, 143771 MiB' (or the names one by one where they differ); None for none."""
    if not names:
        return None
    if len(set(names)) == 1:
        return f"{len(names)} x {names[0]}"
    return "; ".join(names)
