"""What changed between a baseline report (an older reports/compat.json) and the current cells.

`diff(old_report, new_cells)` returns a JSON-ready dict:

    {"baseline": {"generated_at", "harness_version"},
     "cells_added": [cell_label], "cells_removed": [cell_label],
     "verdict_changes": [{"cell", "old", "new"}],
     "new_breakages": [{"cell", "probe", "old_status", "status", "error", "classification"}],
     "fixes": [{"cell", "probe", "old_status", "status"}],
     "status_changes": [{"cell", "probe", "old", "new"}],      # other status moves (e.g. ok -> error)
     "figure_changes": [{"cell", "probe", "key", "old", "new"}]}  # numeric probe detail, e.g. max_abs_error

Cells are matched by (vllm, speculators, backend); a record without a backend matches any
backend of the same pair. Probes are matched by `compat.shared.results.probe_key` (id or id[case]).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from compat.shared.results import probe_key

# Relative change below which a numeric detail value is "the same" (rounding noise between runs).
FIGURE_REL_TOL = 0.25
FIGURE_ABS_TOL = 1e-9
# Detail keys that are timings, not results.
_IGNORED_FIGURE_WORDS = ("seconds", "time", "elapsed", "duration", "pid")


def cell_label(cell: dict[str, Any]) -> str:
    """The pair, its backend, and the settings its id carries beyond the defaults (`__bfloat16`, ...)."""
    backend = cell.get("backend")
    label = f"vLLM {cell.get('vllm')} × speculators {cell.get('speculators')}"
    extra = str(cell.get("id") or "").split("__")[3:]
    inside = ", ".join(filter(None, [backend, *extra]))
    return f"{label} ({inside})" if inside else label


def _key(cell: dict[str, Any]) -> tuple[str, ...]:
    """Runs of one pair with other settings are other cells: the id carries them (matrix.Cell.id)."""
    return (str(cell.get("vllm")), str(cell.get("speculators")), str(cell.get("backend") or ""),
            *str(cell.get("id") or "").split("__")[3:])


def _match(old_cells: list[dict[str, Any]], cell: dict[str, Any]) -> dict[str, Any] | None:
    k = _key(cell)
    for old in old_cells:
        if _key(old) == k:
            return old
    for old in old_cells:
        ok = _key(old)
        if ok[:2] == k[:2] and (not ok[2] or not k[2]):
            return old
    return None


def numeric_leaves(detail: Any, prefix: str = "") -> dict[str, float]:
    """Flatten numeric values of a (nested) detail dict to {"a.b": 1.0}; lists index as a[0]."""
    out: dict[str, float] = {}
    if isinstance(detail, bool):
        return out
    if isinstance(detail, (int, float)):
        if isinstance(detail, float) and not math.isfinite(detail):
            out[prefix or "value"] = detail
        else:
            out[prefix or "value"] = float(detail)
        return out
    if isinstance(detail, dict):
        for k, v in detail.items():
            out.update(numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(detail, (list, tuple)) and len(detail) <= 64:
        for i, v in enumerate(detail):
            out.update(numeric_leaves(v, f"{prefix}[{i}]"))
    return out


def _figure_changed(old: float, new: float) -> bool:
    if math.isnan(old) and math.isnan(new):
        return False
    if math.isnan(old) or math.isnan(new) or math.isinf(old) or math.isinf(new):
        return old != new
    return not math.isclose(old, new, rel_tol=FIGURE_REL_TOL, abs_tol=FIGURE_ABS_TOL)


def _is_result_figure(key: str) -> bool:
    low = key.lower()
    return not any(word in low for word in _IGNORED_FIGURE_WORDS)


def diff(old_report: dict[str, Any], new_cells: Iterable[dict[str, Any]]) -> dict[str, Any]:
    old_cells = list(old_report.get("cells") or [])
    new_cells = list(new_cells)
    out: dict[str, Any] = {
        "baseline": {
            "generated_at": old_report.get("generated_at"),
            "harness_version": old_report.get("harness_version"),
        },
        "cells_added": [],
        "cells_removed": [],
        "verdict_changes": [],
        "new_breakages": [],
        "fixes": [],
        "status_changes": [],
        "figure_changes": [],
    }
    matched: list[int] = []
    for cell in new_cells:
        label = cell_label(cell)
        old = _match(old_cells, cell)
        if old is None:
            out["cells_added"].append(label)
            for probe in cell.get("probes") or []:
                if probe.get("status") == "broken":
                    out["new_breakages"].append(_breakage(label, probe, None))
            continue
        matched.append(id(old))
        if old.get("verdict") != cell.get("verdict"):
            out["verdict_changes"].append({"cell": label, "old": old.get("verdict"), "new": cell.get("verdict")})
        old_probes = {probe_key(p): p for p in old.get("probes") or []}
        for probe in cell.get("probes") or []:
            key = probe_key(probe)
            before = old_probes.get(key)
            old_status = before.get("status") if before else None
            status = probe.get("status")
            if status == "broken" and old_status != "broken":
                out["new_breakages"].append(_breakage(label, probe, old_status))
            elif old_status == "broken" and status == "ok":
                out["fixes"].append({"cell": label, "probe": key, "old_status": old_status, "status": status})
            elif before is not None and old_status != status:
                out["status_changes"].append({"cell": label, "probe": key, "old": old_status, "new": status})
            if before is not None:
                old_fig = numeric_leaves(before.get("detail") or {})
                new_fig = numeric_leaves(probe.get("detail") or {})
                for fkey in sorted(set(old_fig) & set(new_fig)):
                    if _is_result_figure(fkey) and _figure_changed(old_fig[fkey], new_fig[fkey]):
                        out["figure_changes"].append(
                            {"cell": label, "probe": key, "key": fkey, "old": old_fig[fkey], "new": new_fig[fkey]}
                        )
        for key, before in old_probes.items():
            if key not in {probe_key(p) for p in cell.get("probes") or []} and before.get("status") == "broken":
                out["status_changes"].append({"cell": label, "probe": key, "old": "broken", "new": None})
    for old in old_cells:
        if id(old) not in matched:
            out["cells_removed"].append(cell_label(old))
    return out


def _breakage(label: str, probe: dict[str, Any], old_status: str | None) -> dict[str, Any]:
    return {
        "cell": label,
        "probe": probe_key(probe),
        "old_status": old_status,
        "status": probe.get("status"),
        "error": probe.get("error"),
        "classification": probe.get("classification"),
    }


def is_empty(changes: dict[str, Any]) -> bool:
    return not any(v for k, v in changes.items() if k != "baseline")
