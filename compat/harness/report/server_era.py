"""The server-era view of a cell for the report: per model (and per runner / dtype variant), each
layer id with the reference index it matched and its largest error, the model runner that served,
MLA on or off (and why), and what speculators installs into the vLLM environment (hs-connectors).

Read from the probes marked with a server-era `variant` (compat/cell/probes/server/test_server_variants.py:
the Llama and the variants per model, the runner, bfloat16); a cell without them has no server-era view.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from compat.harness.report.build import DecidedCell
from compat.shared.probe_catalog import ids_where, variant_keys
from compat.shared.records import ProbeRecord

VARIANT_PROBES = ids_where("variant")
# the variant an unparametrized probe decides names its row (a per-model probe's row is its case)
_VARIANT_OF_KEY = variant_keys()
# a variant that decides several keys (the VLM's text and image probes) names each row by its probe too
_SHARED_VARIANTS = {name for name, keys in Counter(_VARIANT_OF_KEY.values()).items() if keys > 1}


def _fmt(value: Any) -> str:
    return f"{value:.2g}" if isinstance(value, float) else str(value)


def _row(probe: ProbeRecord) -> dict[str, Any]:
    # the probe's detail is its own words (an open map): read as the server-era probes write it
    detail = probe.detail
    adapted = ((with_compat.get("detail") or {})
               if isinstance(with_compat := detail.get("with_compat"), dict) else {})
    # the run that got as far as the files: raw where it did, else the with-compat run
    shown, mode = (detail, "raw") if detail.get("layer_ids") else (adapted, "with compat")
    ids = shown.get("layer_ids") or {}
    layers = []
    for k, entry in ids.items():
        matched = entry.get("matches_index")
        layers.append({"id": k, "matches": "—" if matched is None else str(matched),
                       "ok": str(matched) == str(k), "error": _fmt(entry.get("max_abs_error"))})
    runner = shown.get("model_runner") or (shown.get("run") or {}).get("model_runner") \
        or (detail.get("run") or {}).get("model_runner") or {}
    variant = detail.get("variant") or adapted.get("variant") or {}
    mla = shown.get("mla") or variant.get("mla")
    variant_name = _VARIANT_OF_KEY.get(probe.id, probe.id)
    name = probe.case or (f"{variant_name} ({probe.id})" if variant_name in _SHARED_VARIANTS else variant_name)
    return {
        "model": name,
        "probe": probe.id,
        "status": probe.status.value,
        "with_compat": probe.with_compat.value if probe.with_compat is not None else None,
        "from_run": mode if ids else None,
        "layers": layers,
        "runner": runner.get("runner"),
        "runner_why": runner.get("why"),
        "mla": None if not mla else ("on" if mla.get("enabled") else "off") + f": {mla.get('reason')}",
        "reason": probe.reason or (probe.error.message if probe.error is not None and not ids else None),
    }


def server_era_view(cell: DecidedCell) -> dict[str, Any] | None:
    """The server-era rows of the cell's probes as re-checked, and what its environment installed."""
    rows = [_row(p.record) for p, _cls in cell.decision.probes if p.record.id in VARIANT_PROBES]
    if not rows:
        return None
    env = cell.record.env if cell.record is not None else None
    return {"rows": rows, "groups": grouped(rows), "hs_connectors": env.hs_connectors if env else None,
            "speculators_brings": env.speculators_brings if env else None}


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the job-summary Markdown shows them: neighbouring rows that read the same and name no layer
    (every variant a cell did not select, every model an in-process release cannot serve: one reason) share one
    row naming each model, so the whole published table's page stays under GitHub's 1 MiB (issue 45)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        key = (row["status"], row["with_compat"], row["reason"], row["runner"], row["mla"])
        last = out[-1] if out else None
        if last is not None and not row["layers"] and not last["layers"] and last["key"] == key:
            last["models"].append(row["model"])
        else:
            out.append({**row, "key": key, "models": [row["model"]]})
    return out
