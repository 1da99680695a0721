"""JUnit XML, one file per cell: reports/junit/<cell-id>.xml.

Each probe is a testcase (name = probe id or id[case], classname = compat.<cell-id>):
`broken` -> <failure>, `error` -> <error>, `skipped` / `n/a` / `unsupported-on-cpu` -> <skipped>
with the reason. A cell without probes (install-error, or a cell that failed before its probes)
gets one testcase "cell" carrying that error.

    write_junit([suite(record, decide(record)) for record in records], out_dir)

A suite is the typed record as loaded, its decided verdict and its probes as their evidence reads, each
with its class (compat.harness.verdict.Decision.probes). A report's cells (compat.json) are read into
the same suites once, at `report_suite`.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from compat.harness.classify import ProbeClass, new_findings
from compat.harness.verdict import CheckedProbe, Decision
from compat.shared.breakages import get as get_breakage
from compat.shared.neutral import neutral
from compat.shared.records import CellRecord, ProbeError, ProbeRecord, ProbeStatus, Verdict, build, to_json
from compat.shared.results import write_bytes_atomic

_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SKIPPED = (ProbeStatus.SKIPPED, ProbeStatus.NOT_APPLICABLE, ProbeStatus.UNSUPPORTED_ON_CPU)
_PASSED = (Verdict.COMPATIBLE, Verdict.COMPATIBLE_WITH_COMPAT)
REPORT_PROBE_KEYS = ("classification", "stated")  # what a report's probe carries beside the record's keys


@dataclass(frozen=True)
class Case:
    """A probe as its testcase says it: the probe as its evidence reads, and of its class
    (compat.harness.classify.ProbeClass) the kind, the registry entry, the note and whether it is NEW."""
    probe: ProbeRecord
    kind: str
    breakage: Optional[str] = None
    note: str = ""
    new: bool = False


@dataclass(frozen=True)
class Suite:
    """What one JUnit file says of a cell: its id, its properties (versions, backend, verdict, environment),
    the verdict decided, the run's own error and its probes' cases."""
    name: str
    properties: tuple[tuple[str, Any], ...]
    verdict: Verdict
    cases: Sequence[Case]
    error: Optional[str] = None
    install_log_tail: Optional[str] = None


def case(probe: CheckedProbe, cls: ProbeClass) -> Case:
    kind = getattr(cls.kind, "value", cls.kind)  # the class's word, a string or an enum of them
    return Case(probe.record, str(kind), cls.breakage.id if cls.breakage else None, cls.note, bool(new_findings(cls)))


def suite(record: CellRecord, decision: Decision) -> Suite:
    """The cell's suite: the record as loaded, its verdict and probes as compat.harness.verdict decided them."""
    env = to_json(record.env) or {}  # the environment as recorded, key for key
    return Suite(cell_id(record), (("vllm", record.vllm), ("speculators", record.speculators),
                                   ("backend", record.backend), ("verdict", decision.verdict),
                                   *((f"env.{k}", v) for k, v in env.items())),
                 decision.verdict, tuple(case(p, cls) for p, cls in decision.probes), record.error,
                 record.install_log_tail)


def report_suite(cell: Mapping[str, Any]) -> Suite:
    """A report's cell (compat.json's `cells`: the record as its evidence reads, each probe with its
    `classification`, ProbeClass.as_dict(), and the report's own keys) as its suite. A record that does not
    hold its schema is reported as it stands (it decided `error`): its keys are read as given."""
    cases = []
    for probe in cell["probes"]:
        said = probe["classification"]  # ProbeClass.as_dict(): the report's JSON, not the record's
        cases.append(Case(build(ProbeRecord, {k: v for k, v in probe.items() if k not in REPORT_PROBE_KEYS}),
                          str(said["kind"]), said["breakage"], str(said["note"] or ""), bool(said["new_findings"])))
    named = [(k, cell.get(k)) for k in ("vllm", "speculators", "backend", "verdict")]
    named = [(k, v) for k, v in named if v is not None] + [(f"env.{k}", v) for k, v in (cell.get("env") or {}).items()]
    return Suite(cell_id(cell), tuple(named), Verdict(cell["verdict"]), cases,
                 cell.get("error"), cell.get("install_log_tail"))


def _clean(text: Any) -> str:
    """Every text of the XML: control and bidirectional characters as visible escapes (compat.shared.neutral;
    newlines and tabs kept), then anything else XML 1.0 cannot hold (lone surrogates) U+FFFD."""
    return _NOT_XML.sub("\ufffd", neutral(text))


def cell_id(cell: CellRecord | Mapping[str, Any]) -> str:
    """The cell's id, or one built from its versions; safe as a file name. `cell`: the record, or a report's
    cell (its JSON)."""
    named: tuple[Any, ...]
    if isinstance(cell, CellRecord):
        named = (cell.id, cell.vllm, cell.speculators, cell.backend.value)
    else:  # a report's cell, its JSON
        named = (cell.get("id"), cell.get("vllm"), cell.get("speculators"), cell.get("backend"))
    raw = named[0] or "__".join(
        x for x in (f"vllm-{named[1]}", f"speculators-{named[2]}", named[3]) if x
    )
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(raw))


def cell_xml(given: Suite | Mapping[str, Any]) -> ET.ElementTree:
    """The cell's testsuite (a suite, or a report's cell: report_suite)."""
    cell = given if isinstance(given, Suite) else report_suite(given)
    cid = cell.name
    suite_el = ET.Element("testsuite", name=cid)
    props = ET.SubElement(suite_el, "properties")
    for name, value in cell.properties:
        ET.SubElement(props, "property", name=_clean(name), value=_clean(value))

    failures = errors = skipped = 0
    total_time = 0.0
    for probe_case in cell.cases:
        probe = probe_case.probe
        seconds = float(probe.seconds or 0.0)
        total_time += seconds
        case = ET.SubElement(
            suite_el, "testcase", classname=f"compat.{cid}", name=_clean(probe.key), time=f"{seconds:.3f}"
        )
        err = probe.error
        body = _body(probe_case)
        if probe.status is ProbeStatus.BROKEN:
            failures += 1
            prefix = "NEW " if probe_case.new else ("known " if probe_case.kind == "known" else "")
            kind = (err.type if err else "") or "broken"
            el = ET.SubElement(
                case,
                "failure",
                type=_clean(kind),
                message=_clean(f"{prefix}{kind}: {(err.message if err else '') or ''}".strip())[:1000],
            )
            el.text = body
        elif probe.status in (ProbeStatus.ERROR, ProbeStatus.FLAKY):
            errors += 1
            el = ET.SubElement(
                case,
                "error",
                type=_clean((err.type if err else "") or "error"),
                message=_clean(probe.reason or (err.message if err else "") or "could not run")[:1000],
            )
            el.text = body
        elif probe.status in _SKIPPED:
            skipped += 1
            reason = probe.reason or (err.message if err else "") or ""
            ET.SubElement(case, "skipped", message=_clean(f"{probe.status}: {reason}".strip().rstrip(":")))
        if probe.with_compat:
            ET.SubElement(case, "system-out").text = _clean(f"with_compat: {probe.with_compat}")

    if not cell.cases:
        case = ET.SubElement(suite_el, "testcase", classname=f"compat.{cid}", name="cell", time="0.000")
        verdict = cell.verdict
        text = "\n".join(
            x for x in (cell.error, cell.install_log_tail) if x
        ) or f"cell verdict {verdict} and no probe ran"
        if verdict in _PASSED:
            pass
        elif verdict is Verdict.UNSUPPORTED_ON_CPU:
            skipped += 1
            ET.SubElement(case, "skipped", message=_clean(cell.error or "unsupported-on-cpu"))
        else:
            errors += 1
            el = ET.SubElement(case, "error", type=_clean(verdict), message=_clean(text.splitlines()[0])[:1000])
            el.text = _clean(text)

    suite_el.set("tests", str(max(len(cell.cases), 1)))
    suite_el.set("failures", str(failures))
    suite_el.set("errors", str(errors))
    suite_el.set("skipped", str(skipped))
    suite_el.set("time", f"{total_time:.3f}")
    return ET.ElementTree(suite_el)


def _error_line(err: ProbeError) -> list[str]:
    return [f"{err.type}: {err.message}"] + ([f"where: {err.where}"] if err.where else [])


def _body(probe_case: Case) -> str:
    probe = probe_case.probe
    lines = _error_line(probe.error) if probe.error else []
    if probe.reason:
        lines.append(f"reason: {probe.reason}")
    if probe.with_compat:
        lines.append(f"with_compat: {probe.with_compat}")
    breakage = f" ({probe_case.breakage})" if probe_case.breakage else ""
    lines.append(f"classification: {probe_case.kind}{breakage}")
    if probe_case.note:
        lines.append(f"note: {probe_case.note}")
    entry = get_breakage(probe_case.breakage) if probe_case.breakage else None  # the registry's own words
    if entry is not None:
        lines.append(entry.explain("junit"))
    return _clean("\n".join(lines))


def write_junit(cells: Iterable[Suite | Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Write one XML file per cell (a suite, or a report's cell: report_suite) under out_dir; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for given in cells:
        cell = given if isinstance(given, Suite) else report_suite(given)
        tree = cell_xml(cell)
        ET.indent(tree)
        path = out_dir / f"{cell.name}.xml"
        buffer = io.BytesIO()
        tree.write(buffer, encoding="utf-8", xml_declaration=True)
        write_bytes_atomic(path, buffer.getvalue())
        paths.append(path)
    return paths
