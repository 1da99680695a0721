"""The one verdict rule and the CI gate: what a cell's probe records let us claim, and the exit status.

Used by the runner as each cell finishes and by the report for every cell it reads, so a stored
verdict (from another machine or an older harness) is recomputed, never trusted.

Verdict of a cell, from its deciding (non-advisory) probes that apply (status other than `n/a`):
- `install-error`: no probe ran because the environment could not be built.
- `untested-at-runtime`: no runtime cell could run (e.g. the CPU build has no such release); only
  the static layer (compat/harness/static) judged the pair. Always gate 2, never a pass.
- `incompatible`: a probe is `broken` and not `ok` with compat adapters, or a probe's with-compat run
  is `broken` (an adapter that breaks or no longer repairs is a finding against the pair). Where the
  probe run ended early (a crash, a timeout), a broken probe with no with-compat status decides
  nothing (its with-compat run may never have reported): `error` below.
- `error`: otherwise, when anything left the question open: a deciding probe `error` or `skipped`,
  a with-compat run that could not run or never reported, a run-level failure (timeout, crash), no deciding probe,
  or adapters whose repair the reference data did not confirm.
- `unsupported-on-cpu`: otherwise, when the CPU build refused a deciding probe.
- `compatible-with-compat`: every broken probe is `ok` with adapters, and the reference data ran
  and matched with them.
- `compatible`: every deciding probe that applies ran and passed, the reference data among them.

Gate (exit status of `nox -s compat` and `nox -s report`), worst cell wins:
- 1 `FINDING`: a NEW breakage (a failure no registry entry explains, also one found behind an
  exception by the api_only run), or an adapter regression (a with-compat run that is not `ok`
  where the raw failure is known, or a with-compat run that broke a passing probe).
- 2 `UNTESTED`: no NEW finding, but a cell tested nothing or not everything: verdict `error`,
  `install-error` or `unsupported-on-cpu`, a deciding probe (or its with-compat run) `error`,
  `skipped` or `unsupported-on-cpu`, or no cell at all.
- 0 `PASS`: everything that applies ran, and every failure is a known breakage.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable, NoReturn, Optional

from compat.harness.causes import (
    as_not_contract,
    cause_of,
    cause_of_error,
    harness_fault_explained,
    older_harness_leak,
    with_compat_error,
    with_compat_not_contract,
)
from compat.harness.classify import ProbeClass, classify_cell, classify_probe, new_findings
from compat.harness.evidence import recheck, record_probe_set
from compat.harness.nearest_kernels import NEW_LEAD, record_label
from compat.shared.breakages import REFERENCE_PROBE, REGISTRY, Breakage
from compat.shared.records import (
    CellRecord,
    ProbeRecord,
    ProbeStatus,
    RecordError,
    Verdict,
    build,
    to_json,
    validate_cell,
)

PASS, FINDING, UNTESTED = 0, 1, 2
GATE_WORDS = {PASS: "pass", FINDING: "fail: NEW or regression", UNTESTED: "fail: untested"}
UNTESTED_VERDICTS = frozenset({Verdict.ERROR, Verdict.INSTALL_ERROR, Verdict.UNSUPPORTED_ON_CPU,
                               Verdict.UNTESTED_AT_RUNTIME})


@dataclass(frozen=True)
class Stated:
    """What a record said of a probe where its evidence, its cause or its environment set that aside."""
    status: ProbeStatus
    with_compat: Optional[ProbeStatus]


@dataclass(frozen=True)
class CheckedProbe:
    """A probe as its evidence reads (compat.harness.evidence.recheck, compat.harness.causes): the record with its
    status, with-compat status, cause and reason as decided, and what the record stated where that was set aside."""
    record: ProbeRecord
    stated: Optional[Stated] = None

    @property
    def label(self) -> str:
        return self.record.key

    @property
    def why(self) -> str:
        return str(self.record.reason or (self.record.error.message if self.record.error else "")
                   or "no reason recorded").splitlines()[0][:200]

    @property
    def with_compat_set_aside(self) -> bool:
        """Its with-compat run reads `error` because what it stated was set aside: no answer about the adapters."""
        return self.record.with_compat is ProbeStatus.ERROR and self.stated is not None


def checked_probe(probe: dict[str, Any]) -> CheckedProbe:
    """A probe of the re-checked record (JSON, with `stated` where recheck or a cause set the record aside) typed."""
    stated = probe.get("stated")
    record: ProbeRecord = build(ProbeRecord, {k: v for k, v in probe.items() if k != "stated"})
    return CheckedProbe(record, None if not isinstance(stated, dict) else Stated(
        ProbeStatus(stated["status"]), None if stated.get("with_compat") is None
        else ProbeStatus(stated["with_compat"])))


class Outcome(enum.Enum):
    """One deciding probe's part in its cell's verdict: what its status and its with-compat status say together."""
    PASSED = "passed"                        # ok; with compat adapters ok or not run
    REPAIRED = "repaired"                    # broken as released, ok with compat adapters
    UNREPAIRED = "unrepaired"                # broken, and its adapters did not repair it
    ADAPTER_BROKE = "adapter broke"          # not broken as released, broken with compat adapters
    UNREPORTED = "unreported"                # broken, the run ended before its with-compat run could report
    OPEN = "open"                            # it could not answer: error, skipped, flaky
    WITH_COMPAT_OPEN = "with compat open"    # it answered; its with-compat run could not
    REFUSED = "refused"                      # the CPU build refused it
    NOT_APPLICABLE = "not applicable"        # n/a: decides nothing


def _never(value: NoReturn) -> NoReturn:
    raise AssertionError(f"an outcome not decided: {value!r}")


def outcome(probe: CheckedProbe, run_failed: bool) -> Outcome:
    """The one match that decides what a probe's statuses say (`run_failed`: the probe run ended early)."""
    status, adapted = probe.record.status, probe.record.with_compat
    if adapted is ProbeStatus.BROKEN and status is not ProbeStatus.BROKEN:
        return Outcome.ADAPTER_BROKE  # n/a included: the adapters broke something
    answered = adapted in (None, ProbeStatus.OK, ProbeStatus.BROKEN)
    match status:
        case ProbeStatus.NOT_APPLICABLE:
            return Outcome.NOT_APPLICABLE
        case ProbeStatus.BROKEN:
            if run_failed and adapted is None:
                return Outcome.UNREPORTED
            if adapted is ProbeStatus.OK:
                return Outcome.REPAIRED
            return Outcome.WITH_COMPAT_OPEN if probe.with_compat_set_aside else Outcome.UNREPAIRED
        case ProbeStatus.OK:
            return Outcome.PASSED if answered else Outcome.WITH_COMPAT_OPEN
        case ProbeStatus.ERROR | ProbeStatus.SKIPPED | ProbeStatus.FLAKY:
            return Outcome.OPEN
        case ProbeStatus.UNSUPPORTED_ON_CPU:
            return Outcome.REFUSED
        case _:
            _never(status)


@dataclass(frozen=True)
class Decision:
    """One cell decided: the verdict, the gate, why; the record as its evidence reads
    (compat.harness.evidence.recheck) and each of its probes' classes, worked out once."""
    verdict: Verdict
    gate: int
    reasons: tuple[str, ...] = field(default=())
    checked: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    classes: tuple[tuple[dict[str, Any], ProbeClass], ...] = field(default=(), compare=False, repr=False)
    probes: tuple[tuple[CheckedProbe, ProbeClass], ...] = field(default=(), compare=False, repr=False)

    @property
    def known_fixes(self) -> tuple[str, ...]:
        """The registry's fix of each known breakage among the probes' classes, once each, in probe order."""
        return tuple(dict.fromkeys(cls.breakage.fix for _, cls in self.classes if cls.breakage is not None))


def cell_verdict(cell: CellRecord, classes: list[tuple[CheckedProbe, ProbeClass]]) -> tuple[Verdict, list[str]]:
    """The verdict and why, from the re-checked probes and their classes (for advisory-ness)."""
    if not cell.probes and cell.verdict is Verdict.INSTALL_ERROR:
        return Verdict.INSTALL_ERROR, [f"the environment could not be built: {cell.error or 'see the install log'}"]
    if not cell.probes and cell.verdict is Verdict.UNTESTED_AT_RUNTIME:
        layer = (cell.static.label or cell.static.verdict) if cell.static else "not run"
        return Verdict.UNTESTED_AT_RUNTIME, [str(cell.runtime or "no runtime cell ran"),
                                             f"static layer: {layer} (read from the wheels; nothing was run)"]
    deciding = [(p, outcome(p, bool(cell.error))) for p, cls in classes if not cls.advisory]
    by: dict[Outcome, list[CheckedProbe]] = {o: [p for p, got in deciding if got is o] for o in Outcome}
    probes = [p for p, got in deciding if got is not Outcome.NOT_APPLICABLE]
    if not probes:
        return Verdict.ERROR, ["no deciding probe applied or ran"]

    if by[Outcome.UNREPAIRED] or by[Outcome.ADAPTER_BROKE]:
        return Verdict.INCOMPATIBLE, (
            [f"{p.label} broken, with compat adapters {p.record.with_compat or 'not run'}"
             for p in by[Outcome.UNREPAIRED]]
            + [f"{p.label} {p.record.status}, but broken with compat adapters" for p in by[Outcome.ADAPTER_BROKE]])

    open_questions = [f"{p.label} {p.record.status}: {p.why}" for p in by[Outcome.OPEN]]
    open_questions += [f"{p.label} broken as released; its with-compat run did not report before the probe run "
                       "ended" for p in by[Outcome.UNREPORTED]]
    open_questions += [f"{p.label} with compat adapters: {p.record.with_compat}"
                       + (f" ({p.why})" if p.stated else "") for p in by[Outcome.WITH_COMPAT_OPEN]]
    if cell.error:
        open_questions.append(f"the probe run failed: {str(cell.error).splitlines()[0]}")
    reference = [p for p in probes if p.record.id == REFERENCE_PROBE]
    broken = [p for p in probes if p.record.status is ProbeStatus.BROKEN]
    if broken and not reference:
        open_questions.append("adapters repair the exceptions, but no reference data confirmed them")
    if open_questions:
        return Verdict.ERROR, open_questions

    if by[Outcome.REFUSED]:
        return Verdict.UNSUPPORTED_ON_CPU, [f"{p.label}: {p.why}" for p in by[Outcome.REFUSED]]
    unconfirmed = [p for p in reference if p.record.with_compat is not ProbeStatus.OK]
    if broken and unconfirmed:
        return Verdict.ERROR, [f"adapters repair the exceptions, but {p.label} has no with-compat data check"
                               for p in unconfirmed]
    if broken:
        return Verdict.COMPATIBLE_WITH_COMPAT, [f"{p.label} broken as released, ok with compat adapters"
                                                for p in broken]
    if not reference:
        return Verdict.ERROR, ["every contract probe passed, but the hidden states were never checked against the "
                               "reference"]
    return Verdict.COMPATIBLE, []


UNTESTED_STATUSES = frozenset({ProbeStatus.ERROR, ProbeStatus.SKIPPED, ProbeStatus.UNSUPPORTED_ON_CPU,
                               ProbeStatus.FLAKY})
ANSWERED = frozenset({ProbeStatus.OK, ProbeStatus.BROKEN})


def cell_gate(verdict: Verdict, classes: list[tuple[CheckedProbe, ProbeClass]]) -> tuple[int, list[str]]:
    findings = []
    for probe, cls in classes:
        if cls.advisory:
            continue
        for finding in new_findings(cls):
            what = "NEW" if finding is cls else "NEW behind the exception"
            findings.append(f"{what}: {probe.label}: {finding.note or 'no registry entry explains it'}")
        if cls.adapter_regression:
            findings.append(f"adapter regression: {probe.label}: {cls.adapter_regression}")
    if findings:
        return FINDING, findings
    deciding = [p.record for p, cls in classes if not cls.advisory]
    untested = [f"{p.key} {p.status}" for p in deciding if p.status in UNTESTED_STATUSES]
    untested += [f"{p.key} with compat adapters {p.with_compat}" for p in deciding
                 if p.status in ANSWERED and p.with_compat is not None and p.with_compat not in ANSWERED]
    if verdict in UNTESTED_VERDICTS or untested:
        return UNTESTED, [f"verdict {verdict}: not everything could be tested"] + untested
    return PASS, []


def decide(cell: CellRecord | Mapping[str, Any], registry: tuple[Breakage, ...] = REGISTRY) -> Decision:
    """The verdict and the gate of one cell record, from what its evidence supports. Problems of the
    record as a whole (manifest, installed versions) leave it `error`; a run-level failure (`error`
    beside probes: a crash or timeout) gates at least untested. The record (typed, as load_cell gives it, or its
    JSON, as the runner and the store hold it) is validated and migrated first (records.validate_cell): one that does
    not hold its schema decides `error`, naming the field. The re-check and the classes still read its JSON (a typed
    record's, records.to_json: key for key what was read); the verdict and the gate are decided on the typed record
    and its typed, re-checked probes."""
    try:
        raw = validate_cell(to_json(cell) if isinstance(cell, CellRecord) else dict(cell))
    except RecordError as exc:
        return Decision(Verdict.ERROR, UNTESTED, (f"the record does not hold its schema: {exc} (expected what "
                                                  f"docs/record.schema.json lists)",))
    record: CellRecord = build(CellRecord, raw)
    checked, problems = recheck(raw)
    classes = classify_cell(checked, registry)
    # the environment's or our fixture's failure, no registry entry claims it: error
    checked, classes = _replaced(checked, classes, registry, {
        id(p): as_not_contract(p, rule) for p, cls in classes if p.get("status") == "broken" and cls.kind == "new"
        for rule in [cause_of(p.get("error"))] if rule is not None})
    # a record older than a probe's isolation, holding another probe's known exception under it: that breakage,
    # labelled (causes.older_harness_leak), never a NEW finding
    classes = _older_harness(checked, classes)
    # the same for a with-compat run alone (a known raw failure, its repair stopped by the machine): with_compat error
    checked, classes = _replaced(checked, classes, registry, {
        id(p): with_compat_not_contract(p, rule) for p, cls in classes
        if p.get("status") in ("ok", "broken") and p.get("with_compat") == "broken" and cls.with_compat_known is None
        for rule in [cause_of(with_compat_error(p))] if rule is not None})
    checked, classes = _replaced(checked, classes, registry, {
        id(p): dict(p, cause=cause, **harness_fault_explained(p)) for p, _cls in classes
        if p.get("status") == "error" and not p.get("cause") for cause in [cause_of_error(p)] if cause})
    typed = [(checked_probe(p), cls) for p, cls in classes]
    verdict, reasons = cell_verdict(record, typed)
    gate, gate_reasons = cell_gate(verdict, typed)
    if problems and verdict not in (Verdict.INSTALL_ERROR, Verdict.UNTESTED_AT_RUNTIME):
        verdict, reasons = Verdict.ERROR, problems + reasons
    if gate == PASS and (problems or (record.probes and record.error)):
        gate = UNTESTED
        gate_reasons = [f"the probe run failed: {str(record.error).splitlines()[0]}"] if not problems else []
    said = reasons + gate_reasons
    label = record_label(record)
    if label:  # its own evidence class (issue 46): what ran heads the reasons, and a NEW finding of it is a lead
        said = [label] + [f"{r} ({NEW_LEAD})" if r.startswith("NEW") else r for r in said]
    return Decision(verdict, gate, tuple(said), checked, tuple(classes), tuple(typed))


def _older_harness(checked: dict[str, Any], classes: list[tuple[dict[str, Any], ProbeClass]],
                   ) -> list[tuple[dict[str, Any], ProbeClass]]:
    known = {str(p.get("id")): cls.breakage for p, cls in classes if cls.kind == "known" and cls.breakage}
    probe_set, probes = record_probe_set(checked), checked.get("probes") or []
    out = []
    for p, cls in classes:
        leak = older_harness_leak(p, probes, probe_set, checked.get("harness_commit")) if cls.kind == "new" else None
        if leak is not None and known.get(leak[0]) is not None:
            cls = dataclasses.replace(cls, kind="known", breakage=known[leak[0]], note=leak[1])
        out.append((p, cls))
    return out


def _replaced(checked: dict[str, Any], classes: list[tuple[dict[str, Any], ProbeClass]], registry: tuple[Breakage, ...],
              replacements: dict[int, dict[str, Any]],
              ) -> tuple[dict[str, Any], list[tuple[dict[str, Any], ProbeClass]]]:
    """The record with some probes replaced (by id() of the old probe), only those classified again."""
    if not replacements:
        return checked, classes
    vllm, speculators, backend = str(checked.get("vllm")), str(checked.get("speculators")), str(checked.get("backend"))
    classes = [(new, classify_probe(new, vllm, speculators, registry, backend)) if (new := replacements.get(id(p)))
               else (p, cls) for p, cls in classes]
    return dict(checked, probes=[p for p, _cls in classes]), classes


def matrix_gate(cells: Iterable[CellRecord | Mapping[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> int:
    """The exit status for a set of cells: the worst cell's gate; no cell at all tested nothing."""
    return worst_gate(decide(cell, registry).gate for cell in cells)


def worst_gate(gates: Iterable[int]) -> int:
    """A NEW finding beats untested beats pass; no gate at all tested nothing."""
    gates = list(gates)
    if not gates:
        return UNTESTED
    return FINDING if FINDING in gates else max(gates)
