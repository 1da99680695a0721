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
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from compat.shared.records import ProbeStatus
from compat.shared.results import probe_key

# Relative change below which a numeric detail value is "the same" (rounding noise between runs).
FIGURE_REL_TOL = 0.25
FIGURE_ABS_TOL = 1e-9
# Detail keys that are timings, not results.
_IGNORED_FIGURE_WORDS = ("seconds", "time", "elapsed", "duration", "pid")


def _read(shown: Mapping[str, Any], name: str) -> Any:
    """A key of a report's cell or probe as written, None where absent: a baseline may be any harness version's."""
    return shown[name] if name in shown else None


@dataclass(frozen=True)
class ShownProbe:
    """A probe of a report's cell as the diff compares it; status, error and classification as written."""
    key: str
    status: Any  # a ProbeStatus value
    error: Any
    classification: Any
    detail: Any


@dataclass(frozen=True)
class ShownCell:
    """A cell of a report (the baseline's, of any harness version, or the current one) as the diff compares it."""
    label: str
    key: tuple[str, ...]  # runs of one pair with other settings are other cells: the id carries them (matrix.Cell.id)
    verdict: Any
    probes: tuple[ShownProbe, ...]


def shown_cell(cell: Mapping[str, Any]) -> ShownCell:
    """A report's cell JSON read once."""
    backend, extra = _read(cell, "backend"), str(_read(cell, "id") or "").split("__")[3:]
    probes = tuple(ShownProbe(probe_key(p), _read(p, "status"), _read(p, "error"), _read(p, "classification"),
                              _read(p, "detail")) for p in _read(cell, "probes") or [])
    return ShownCell(cell_label(cell), (str(_read(cell, "vllm")), str(_read(cell, "speculators")), str(backend or ""),
                                        *extra), _read(cell, "verdict"), probes)


def cell_label(cell: Mapping[str, Any]) -> str:
    """The pair, its backend, and the settings its id carries beyond the defaults (`__bfloat16`, ...)."""
    backend = _read(cell, "backend")
    label = f"vLLM {_read(cell, 'vllm')} × speculators {_read(cell, 'speculators')}"
    extra = str(_read(cell, "id") or "").split("__")[3:]
    inside = ", ".join(filter(None, [backend, *extra]))
    return f"{label} ({inside})" if inside else label


def _match(old_cells: list[ShownCell], cell: ShownCell) -> ShownCell | None:
    k = cell.key
    for old in old_cells:
        if old.key == k:
            return old
    for old in old_cells:
        ok = old.key
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


def diff(old_report: Mapping[str, Any], new_cells: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    old_cells = [shown_cell(c) for c in _read(old_report, "cells") or []]
    out: dict[str, Any] = {
        "baseline": {
            "generated_at": _read(old_report, "generated_at"),
            "harness_version": _read(old_report, "harness_version"),
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
    for cell in map(shown_cell, new_cells):
        label = cell.label
        old = _match(old_cells, cell)
        if old is None:
            out["cells_added"].append(label)
            for probe in cell.probes:
                if probe.status == ProbeStatus.BROKEN:
                    out["new_breakages"].append(_breakage(label, probe, None))
            continue
        matched.append(id(old))
        if old.verdict != cell.verdict:
            out["verdict_changes"].append({"cell": label, "old": old.verdict, "new": cell.verdict})
        old_probes = {p.key: p for p in old.probes}
        for probe in cell.probes:
            key = probe.key
            before = old_probes.get(key)
            old_status = before.status if before is not None else None
            status = probe.status
            if status == ProbeStatus.BROKEN and old_status != ProbeStatus.BROKEN:
                out["new_breakages"].append(_breakage(label, probe, old_status))
            elif old_status == ProbeStatus.BROKEN and status == ProbeStatus.OK:
                out["fixes"].append({"cell": label, "probe": key, "old_status": old_status, "status": status})
            elif before is not None and old_status != status:
                out["status_changes"].append({"cell": label, "probe": key, "old": old_status, "new": status})
            if before is not None:
                old_fig = numeric_leaves(before.detail or {})
                new_fig = numeric_leaves(probe.detail or {})
                for fkey in sorted(set(old_fig) & set(new_fig)):
                    if _is_result_figure(fkey) and _figure_changed(old_fig[fkey], new_fig[fkey]):
                        out["figure_changes"].append(
                            {"cell": label, "probe": key, "key": fkey, "old": old_fig[fkey], "new": new_fig[fkey]}
                        )
        for key, before in old_probes.items():
            if key not in {p.key for p in cell.probes} and before.status == ProbeStatus.BROKEN:
                out["status_changes"].append({"cell": label, "probe": key, "old": "broken", "new": None})
    for old in old_cells:
        if id(old) not in matched:
            out["cells_removed"].append(old.label)
    return out


def _breakage(label: str, probe: ShownProbe, old_status: Any) -> dict[str, Any]:
    return {
        "cell": label,
        "probe": probe.key,
        "old_status": old_status,
        "status": probe.status,
        "error": probe.error,
        "classification": probe.classification,
    }


def is_empty(changes: dict[str, Any]) -> bool:
    return not any(v for k, v in changes.items() if k != "baseline")
