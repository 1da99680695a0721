"""The merged report, built from what is kept: every cell decided once, then each section in turn.

    report = build_report(cells, kimi=None, baseline=None, bisect=None, runs=None)

A section is a function of the decided cells (`Decided`) that returns the top-level keys it adds
to compat.json; SECTIONS lists them in order, so a new section is one more line there (the
templates read its key). Each cell is decided (compat.harness.verdict.decide: its verdict, gate,
and its probes' classes) exactly once per report; every section reads that Decision.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from packaging.version import InvalidVersion, Version

from compat.harness import baseline as _baseline
from compat.harness.classify import annotate, tally
from compat.harness.store import stated_time
from compat.harness.verdict import Decision, decide, worst_gate
from compat.shared.breakages import BY_ID
from compat.shared.results import CELL_VERDICTS


def harness_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("vllm-spec-compat")
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover
        pass
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    try:
        match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        if match:
            return match.group(1)
    except OSError:
        pass
    return "unknown"


def machine_info(cells: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    cells = list(cells)
    backends = sorted({str(c.get("backend")) for c in cells if c.get("backend")})
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "backends": backends,
    }
    # A cell may say where it ran; prefer that over the machine that renders.
    for cell in cells:
        m = cell.get("machine")
        if isinstance(m, dict):
            for k in ("hostname", "cpu_count", "gpu"):
                if m.get(k) is not None:
                    info[k] = m[k]
            break
    return info


@dataclass
class Decided:
    """What the sections read: the records as given, each decided once, and what else is kept."""
    raw: list[dict[str, Any]]
    decisions: list[Decision]
    cells: list[dict[str, Any]]  # the records as their evidence reads, probes classified, verdict derived
    kimi: dict[str, Any] | None = None
    bisect: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] | None = None
    runs: dict[str, Sequence[Any]] = field(default_factory=dict)  # cell id -> its stored runs, oldest first


Section = Callable[[Decided], dict[str, Any]]


def matrix_section(d: Decided) -> dict[str, Any]:
    return {
        "summary": {
            "verdicts": {v: sum(1 for c in d.cells if c["verdict"] == v) for v in CELL_VERDICTS},
            "probes": tally(x.classes for x in d.decisions),
            "exit_code": worst_gate(x.gate for x in d.decisions),
        },
        "cells": d.cells,
    }


def breakages_section(d: Decided) -> dict[str, Any]:
    used = {cls.breakage.id for x in d.decisions for _p, cls in x.classes if cls.breakage is not None}
    used |= {cls.behind.breakage.id for x in d.decisions for _p, cls in x.classes
             if cls.behind is not None and cls.behind.breakage is not None}
    used |= {cls.with_compat_known.id for x in d.decisions for _p, cls in x.classes
             if cls.with_compat_known is not None}
    return {"breakages": [BY_ID[b].as_dict() for b in sorted(used) if b in BY_ID]}


def kimi_section(d: Decided) -> dict[str, Any]:
    return {"kimi": d.kimi} if d.kimi is not None else {}


def changes_section(d: Decided) -> dict[str, Any]:
    return {"changes": _baseline.diff(d.baseline, d.cells)} if d.baseline is not None else {}


def bisect_section(d: Decided) -> dict[str, Any]:
    return {"bisect": d.bisect} if d.bisect else {}


def history_section(d: Decided) -> dict[str, Any]:
    """Per cell id: how many runs are kept and when the newest ran; a verdict that changed between
    two consecutive runs is a flip, with both dates (the older run decided again, by today's rules)."""
    if not d.runs:
        return {}
    flips = []
    for cell in d.cells:
        runs = list(d.runs.get(cell["id"]) or [])
        if not runs:
            continue
        cell["run"] = {"ran_at": runs[-1].ran_at, "runs": len(runs), "harness_commit": runs[-1].harness_commit}
        verdicts = [decide(r.record).verdict for r in runs[:-1]] + [cell["verdict"]]
        for (older, old), (newer, new) in zip(zip(runs, verdicts), list(zip(runs, verdicts))[1:]):
            if old != new:
                flips.append({"cell": cell["id"], "label": _baseline.cell_label(cell), "old": old,
                              "old_at": older.ran_at, "new": new, "new_at": newer.ran_at})
    return {"flips": flips}


SECTIONS: tuple[Section, ...] = (
    matrix_section,
    breakages_section,
    kimi_section,
    changes_section,
    bisect_section,
    history_section,
)


def build_report(
    cells: Iterable[dict[str, Any]],
    kimi: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
    generated_at: str | None = None,
    bisect: list[dict[str, Any]] | None = None,
    runs: Mapping[str, Sequence[Any]] | None = None,
    sections: Sequence[Section] = SECTIONS,
) -> dict[str, Any]:
    """The merged report: contract keys plus harness_version, generated_at, machine, and each section's keys."""
    raw = sorted(cells, key=_cell_sort_key)
    decisions = [decide(c) for c in raw]
    decided = Decided(raw, decisions, [_decided(c, x) for c, x in zip(raw, decisions)], kimi=kimi,
                      bisect=list(bisect or []), baseline=baseline, runs=dict(runs or {}))
    report: dict[str, Any] = {
        "harness_version": harness_version(),
        "generated_at": generated_at
        or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "machine": machine_info(raw),
        "newest_record": newest_record(raw),
    }
    for section in sections:
        report.update(section(decided))
    return report


def newest_record(cells: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """When the newest record finished and the harness commit it states: the date and commit a report
    shows of its evidence, the same however often (and wherever) it is rendered."""
    dated = [(stated_time(c.get("finished_at")), str(c.get("id") or ""), c) for c in cells]
    found = max(((t, i, c) for t, i, c in dated if t), default=None, key=lambda x: (x[0], x[1]))
    if found is None:
        return None
    at, cell_id, cell = found
    return {"finished_at": at, "harness_commit": str(cell.get("harness_commit") or "not recorded"), "id": cell_id}


def _decided(cell: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The cell as its evidence reads, with classified probes and the verdict derived from them
    (compat.harness.verdict); a stored verdict that disagrees is kept as `stored_verdict`, and the
    report says so."""
    out = annotate(decision.checked, classes=decision.classes)
    out.update(verdict=decision.verdict, verdict_reasons=list(decision.reasons), gate=decision.gate)
    if cell.get("verdict") != decision.verdict:
        out["stored_verdict"] = cell.get("verdict")
    else:
        out.pop("stored_verdict", None)
    return out


def version_key(text: Any) -> tuple[int, Version, str]:
    try:
        return (0, Version(str(text)), "")
    except InvalidVersion:
        return (1, Version("0"), str(text))


def _cell_sort_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    return (version_key(cell.get("vllm")), version_key(cell.get("speculators")), str(cell.get("backend") or ""),
            str(cell.get("id") or ""))
