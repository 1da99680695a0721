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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

from packaging.version import InvalidVersion, Version

from compat.harness import baseline as _baseline
from compat.harness.classify import ProbeClass, tally
from compat.harness.store import stated_time
from compat.harness.verdict import CheckedProbe, Decision, Stated, decide, worst_gate
from compat.shared.breakages import BY_ID
from compat.shared.records import (
    CellRecord,
    ProbeRecord,
    ProbeStatus,
    RecordError,
    Verdict,
    build,
    held,
    load_record,
    to_json,
)
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


def machine_info(cells: Iterable[CellRecord] = ()) -> dict[str, Any]:
    cells = list(cells)
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "backends": sorted({str(c.backend) for c in cells}),
    }
    # A cell may say where it ran; prefer that over the machine that renders.
    for cell in cells:
        if cell.machine is not None:
            info.update({k: v for k in ("hostname", "cpu_count", "gpu")
                         if (v := getattr(cell.machine, k)) is not None})
            break
    return info


@dataclass(frozen=True)
class RunShown:
    """Of a cell's kept runs: when the newest ran, how many are kept, the harness commit the newest names."""
    ran_at: str
    runs: int
    harness_commit: str


# what compat.json adds to a cell's record (the record's own keys stay as they were read)
REPORT_KEYS = ("verdict_reasons", "gate", "stored_verdict", "run")


@dataclass(frozen=True)
class DecidedCell:
    """A cell as the report shows it: the record as loaded (None where it fails its schema), its Decision (verdict,
    gate, reasons, each probe as its evidence reads with its class), the stored verdict where it is not the one
    derived, and its kept runs (history_section)."""
    record: CellRecord | None
    decision: Decision
    stored_verdict: Verdict | str | None = None
    run: RunShown | None = None

    @property
    def id(self) -> str:
        return self.record.id if self.record is not None else ""

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict

    def to_json(self) -> dict[str, Any]:
        """The cell in compat.json: the record's keys as read, its probes as re-checked (each with what it stated
        where that was set aside, and its class: ProbeClass.as_dict()), then the decision's keys."""
        out: dict[str, Any] = to_json(self.record) if self.record is not None else {}
        loaded = {p.key: p for p in self.record.probes} if self.record is not None else {}
        out["probes"] = [probe_json(probe, cls, loaded.get(probe.label)) for probe, cls in self.decision.probes]
        out.update(verdict=self.decision.verdict, verdict_reasons=list(self.decision.reasons),
                   gate=self.decision.gate)
        if self.stored_verdict is not None:
            out["stored_verdict"] = str(self.stored_verdict)
        if self.run is not None:
            out["run"] = {"ran_at": self.run.ran_at, "runs": self.run.runs, "harness_commit": self.run.harness_commit}
        return out

    @classmethod
    def from_json(cls, cell: Mapping[str, Any]) -> "DecidedCell":
        """A cell of compat.json as the report built it: its record read as shown (its probes as re-checked, its
        verdict the derived one; the stored one, where it differs, is `stored_verdict`)."""
        probes = tuple((CheckedProbe(build(ProbeRecord, _record_keys(p)), _stated(p)),
                        probe_class(p["classification"])) for p in cell["probes"])
        record = {k: v for k, v in cell.items() if k not in REPORT_KEYS}
        typed: CellRecord | None = build(CellRecord, dict(record, probes=[to_json(p.record) for p, _c in probes])) \
            if "id" in record else None
        run = cell["run"] if "run" in cell else None
        return cls(typed, Decision(Verdict(cell["verdict"]), cell["gate"], tuple(cell["verdict_reasons"]),
                                   probes=probes),
                   cell["stored_verdict"] if "stored_verdict" in cell else None,
                   RunShown(run["ran_at"], run["runs"], run["harness_commit"]) if run is not None else None)


def probe_json(probe: CheckedProbe, cls: ProbeClass, loaded: ProbeRecord | None) -> dict[str, Any]:
    """A re-checked probe in compat.json: the keys its record held as read, then those the check added (a cause),
    what it stated where that was set aside, and its class."""
    out: dict[str, Any] = to_json(probe.record)
    if loaded is not None:
        out = {**{k: v for k, v in out.items() if held(loaded, k)}, **out}
    if probe.stated is not None:
        out["stated"] = {"status": probe.stated.status.value,
                         "with_compat": probe.stated.with_compat.value if probe.stated.with_compat else None}
    out["classification"] = cls.as_dict()
    return out


def _record_keys(probe: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in probe.items() if k not in ("stated", "classification")}


def _stated(probe: Mapping[str, Any]) -> Stated | None:
    stated = probe["stated"] if "stated" in probe else None
    if not isinstance(stated, Mapping):
        return None
    adapted = stated["with_compat"]
    return Stated(ProbeStatus(stated["status"]), None if adapted is None else ProbeStatus(adapted))


def probe_class(shown: Mapping[str, Any]) -> ProbeClass:
    """A class as compat.json holds it (ProbeClass.as_dict()), the registry's entries by id."""
    behind = shown["behind"] if "behind" in shown else None
    with_compat = shown["with_compat_breakage"] if "with_compat_breakage" in shown else None
    return ProbeClass(kind=shown["kind"], breakage=BY_ID.get(shown["breakage"]) if shown["breakage"] else None,
                      note=shown["note"], advisory=shown["advisory"], behind=probe_class(behind) if behind else None,
                      adapter_regression=shown["adapter_regression"] or "",
                      with_compat_known=BY_ID.get(with_compat) if with_compat else None)


@dataclass
class Decided:
    """What the sections read: the cells, each decided once (and as compat.json shows them), and what else is kept."""
    cells: list[DecidedCell]
    shown: list[dict[str, Any]]
    kimi: dict[str, Any] | None = None
    bisect: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] | None = None
    runs: dict[str, Sequence[Any]] = field(default_factory=dict)  # cell id -> its stored runs, oldest first


Section = Callable[[Decided], dict[str, Any]]


def matrix_section(d: Decided) -> dict[str, Any]:
    return {
        "summary": {
            "verdicts": {v: sum(1 for c in d.cells if c.verdict == v) for v in CELL_VERDICTS},
            # tally reads the classes alone
            "probes": tally(cast(Iterable[tuple[dict[str, Any], ProbeClass]], c.decision.probes) for c in d.cells),
            "exit_code": worst_gate(c.decision.gate for c in d.cells),
        },
        "cells": d.shown,
    }


def breakages_section(d: Decided) -> dict[str, Any]:
    classes = [cls for c in d.cells for _p, cls in c.decision.probes]
    used = {cls.breakage.id for cls in classes if cls.breakage is not None}
    used |= {cls.behind.breakage.id for cls in classes if cls.behind is not None and cls.behind.breakage is not None}
    used |= {cls.with_compat_known.id for cls in classes if cls.with_compat_known is not None}
    return {"breakages": [BY_ID[b].as_dict() for b in sorted(used) if b in BY_ID]}


def kimi_section(d: Decided) -> dict[str, Any]:
    return {"kimi": d.kimi} if d.kimi is not None else {}


def changes_section(d: Decided) -> dict[str, Any]:
    return {"changes": _baseline.diff(d.baseline, d.shown)} if d.baseline is not None else {}


def bisect_section(d: Decided) -> dict[str, Any]:
    return {"bisect": d.bisect} if d.bisect else {}


def history_section(d: Decided) -> dict[str, Any]:
    """Per cell id: how many runs are kept and when the newest ran; a verdict that changed between
    two consecutive runs is a flip, with both dates (the older run decided again, by today's rules)."""
    if not d.runs:
        return {}
    flips = []
    for cell in d.cells:
        runs = list(d.runs.get(cell.id) or [])
        if not runs:
            continue
        verdicts = [decide(r.record).verdict for r in runs[:-1]] + [cell.verdict]
        for (older, old), (newer, new) in zip(zip(runs, verdicts), list(zip(runs, verdicts))[1:]):
            if old != new:
                flips.append({"cell": cell.id, "label": _baseline.cell_label(to_json(cell.record)), "old": old,
                              "old_at": older.ran_at, "new": new, "new_at": newer.ran_at})
    return {"flips": flips}


def with_runs(cells: list[DecidedCell], runs: Mapping[str, Sequence[Any]]) -> list[DecidedCell]:
    """Each cell with its kept runs (the newest last): when the newest ran, how many, its harness commit."""
    return [replace(cell, run=RunShown(kept[-1].ran_at, len(kept), kept[-1].harness_commit))
            if (kept := list(runs.get(cell.id) or [])) else cell for cell in cells]


SECTIONS: tuple[Section, ...] = (
    matrix_section,
    breakages_section,
    kimi_section,
    changes_section,
    bisect_section,
    history_section,
)


def build_report(
    cells: Iterable[CellRecord | Mapping[str, Any]],
    kimi: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
    generated_at: str | None = None,
    bisect: list[dict[str, Any]] | None = None,
    runs: Mapping[str, Sequence[Any]] | None = None,
    sections: Sequence[Section] = SECTIONS,
) -> dict[str, Any]:
    """The merged report: contract keys plus harness_version, generated_at, machine, and each section's keys."""
    given = [decided_cell(c) for c in cells]
    given.sort(key=lambda c: _cell_sort_key(c.record))
    if runs and history_section in sections:
        given = with_runs(given, runs)
    decided = Decided(given, [c.to_json() for c in given], kimi=kimi, bisect=list(bisect or []), baseline=baseline,
                      runs=dict(runs or {}))
    records = [c.record for c in given if c.record is not None]
    report = Report({
        "harness_version": harness_version(),
        "generated_at": generated_at
        or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "machine": machine_info(records),
        "newest_record": newest_record(records),
    }, given, decided.shown)
    for section in sections:
        report.update(section(decided))
    return report


class Report(dict[str, Any]):
    """compat.json as built (the JSON that is written and read), with the typed cells its `cells` were written
    from: what renders it reads those (`decided_cells`), not the JSON again."""

    def __init__(self, data: Mapping[str, Any], cells: Sequence[DecidedCell], shown: list[dict[str, Any]]):
        super().__init__(data)
        self.typed = tuple(cells)
        self.shown = shown


def decided_cells(report: Mapping[str, Any]) -> list[DecidedCell]:
    """The report's cells, typed: those it was built from while its `cells` are the ones they were written as,
    else read from its JSON (DecidedCell.from_json)."""
    shown = report["cells"] if "cells" in report else []
    if isinstance(report, Report) and shown is report.shown:
        return list(report.typed)
    return [DecidedCell.from_json(c) for c in shown]


def decided_cell(cell: CellRecord | Mapping[str, Any]) -> DecidedCell:
    """The cell decided once (compat.harness.verdict.decide); a record that fails its schema decides `error`."""
    decision = decide(cell)
    if isinstance(cell, CellRecord):
        record = cell
    else:
        try:
            record = load_record(dict(cell))
        except RecordError:
            stored = cell["verdict"] if "verdict" in cell else None
            return DecidedCell(None, decision, stored if stored != decision.verdict else None)
    return DecidedCell(record, decision, record.verdict if record.verdict is not decision.verdict else None)


def newest_record(cells: Iterable[CellRecord]) -> dict[str, Any] | None:
    """When the newest record finished and the harness commit it states: the date and commit a report
    shows of its evidence, the same however often (and wherever) it is rendered."""
    dated = [(stated_time(c.finished_at), c.id, c) for c in cells]
    found = max(((t, i, c) for t, i, c in dated if t), default=None, key=lambda x: (x[0], x[1]))
    if found is None:
        return None
    at, cell_id, cell = found
    return {"finished_at": at, "harness_commit": cell.harness_commit or "not recorded", "id": cell_id}


def version_key(text: Any) -> tuple[int, Version, str]:
    try:
        return (0, Version(str(text)), "")
    except InvalidVersion:
        return (1, Version("0"), str(text))


def _cell_sort_key(cell: CellRecord | None) -> tuple[Any, ...]:
    if cell is None:  # a record that fails its schema: first, as its unread versions sort
        return (version_key(None), version_key(None), "", "")
    return (version_key(cell.vllm), version_key(cell.speculators), str(cell.backend), cell.id)
