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
from collections.abc import Callable, Mapping
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
from compat.harness.checked import CheckedProbe as CheckedProbe  # the re-checked probe's home; read from here too
from compat.harness.checked import Stated as Stated
from compat.harness.checked import revised
from compat.harness.classify import ProbeClass, ProbeKind, classify_cell, classify_probe, new_findings
from compat.harness.evidence import recheck, record_probe_set
from compat.harness.nearest_kernels import NEW_LEAD, record_label
from compat.shared.breakages import REFERENCE_PROBE, REGISTRY, Breakage
from compat.shared.records import (
    CellRecord,
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
    """One cell decided: the verdict, the gate, why; its probes as their evidence reads
    (compat.harness.evidence.recheck) with their classes, worked out once, and the record as decided. The report
    writes a probe's JSON from its CheckedProbe (`as_json`) where it writes compat.json."""
    verdict: Verdict
    gate: int
    reasons: tuple[str, ...] = field(default=())
    probes: tuple[tuple[CheckedProbe, ProbeClass], ...] = field(default=(), compare=False, repr=False)
    record: Optional[CellRecord] = field(default=None, compare=False, repr=False)

    @property
    def known_fixes(self) -> tuple[str, ...]:
        """The registry's fix of each known breakage among the probes' classes, once each, in probe order."""
        return tuple(dict.fromkeys(cls.breakage.fix for _, cls in self.probes if cls.breakage is not None))


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


Classified = list[tuple[CheckedProbe, ProbeClass]]


def decide(cell: CellRecord | Mapping[str, Any], registry: tuple[Breakage, ...] = REGISTRY) -> Decision:
    """The verdict and the gate of one cell record, from what its evidence supports. Problems of the
    record as a whole (manifest, installed versions) leave it `error`; a run-level failure (`error`
    beside probes: a crash or timeout) gates at least untested. The record (typed, as load_cell gives it, or its
    JSON, as the runner and the store hold it) is validated and migrated first (records.validate_cell): one that does
    not hold its schema decides `error`, naming the field. The re-check, the classes, the causes, the verdict and the
    gate then read the typed record and its typed, re-checked probes."""
    try:
        raw = validate_cell(to_json(cell) if isinstance(cell, CellRecord) else dict(cell))
    except RecordError as exc:
        return Decision(Verdict.ERROR, UNTESTED, (f"the record does not hold its schema: {exc} (expected what "
                                                  f"docs/record.schema.json lists)",))
    record: CellRecord = build(CellRecord, raw)
    checked, problems = recheck(record)
    classes = classify_cell(record, registry, checked)
    # the environment's or our fixture's failure, no registry entry claims it: error
    classes = _replaced(record, classes, registry, _not_contract)
    # a record older than a probe's isolation, holding another probe's known exception under it: that breakage,
    # labelled (causes.older_harness_leak), never a NEW finding
    classes = _older_harness(record, classes)
    # the same for a with-compat run alone (a known raw failure, its repair stopped by the machine): with_compat error
    classes = _replaced(record, classes, registry, _with_compat_not_contract)
    classes = _replaced(record, classes, registry, _error_caused)
    verdict, reasons = cell_verdict(record, classes)
    gate, gate_reasons = cell_gate(verdict, classes)
    if problems and verdict not in (Verdict.INSTALL_ERROR, Verdict.UNTESTED_AT_RUNTIME):
        verdict, reasons = Verdict.ERROR, problems + reasons
    if gate == PASS and (problems or (record.probes and record.error)):
        gate = UNTESTED
        gate_reasons = [f"the probe run failed: {str(record.error).splitlines()[0]}"] if not problems else []
    said = reasons + gate_reasons
    label = record_label(record)
    if label:  # its own evidence class (issue 46): what ran heads the reasons, and a NEW finding of it is a lead
        said = [label] + [f"{r} ({NEW_LEAD})" if r.startswith("NEW") else r for r in said]
    return Decision(verdict, gate, tuple(said), tuple(classes), record)


def _classify(record: CellRecord, probe: CheckedProbe, registry: tuple[Breakage, ...]) -> ProbeClass:
    return classify_probe(probe, record.vllm, record.speculators, registry, record.backend.value)


def _not_contract(probe: CheckedProbe, cls: ProbeClass) -> Optional[CheckedProbe]:
    """A NEW failure whose exception a cause rule names (the environment's, our fixture's): `error` with its cause."""
    rule = cause_of(probe.record.error) if probe.record.status is ProbeStatus.BROKEN and cls.kind is ProbeKind.NEW \
        else None
    return as_not_contract(probe, rule) if rule is not None else None


def _with_compat_not_contract(probe: CheckedProbe, cls: ProbeClass) -> Optional[CheckedProbe]:
    """A with-compat run broken for a cause rule's reason, no registry entry explaining it: with_compat `error`."""
    record = probe.record
    if record.status not in (ProbeStatus.OK, ProbeStatus.BROKEN) or record.with_compat is not ProbeStatus.BROKEN \
            or cls.with_compat_known is not None:
        return None
    rule = cause_of(with_compat_error(record))
    return with_compat_not_contract(probe, rule) if rule is not None else None


def _error_caused(probe: CheckedProbe, _cls: ProbeClass) -> Optional[CheckedProbe]:
    """A probe that could not run and names no cause, where its record shows one (causes.cause_of_error)."""
    record = probe.record
    cause = cause_of_error(record) if record.status is ProbeStatus.ERROR and record.cause is None else None
    if cause is None:
        return None
    reason = harness_fault_explained(record)
    return CheckedProbe(revised(record, cause=cause, **({"reason": reason} if reason else {})), probe.stated)


def _older_harness(record: CellRecord, classes: Classified) -> Classified:
    known = {p.record.id: cls.breakage for p, cls in classes if cls.kind is ProbeKind.KNOWN and cls.breakage}
    probe_set, probes = record_probe_set(record), [p.record for p, _cls in classes]
    out = []
    for p, cls in classes:
        leak = older_harness_leak(p.record, probes, probe_set, record.harness_commit) \
            if cls.kind is ProbeKind.NEW else None
        if leak is not None and known.get(leak[0]) is not None:
            cls = dataclasses.replace(cls, kind=ProbeKind.KNOWN, breakage=known[leak[0]], note=leak[1])
        out.append((p, cls))
    return out


def _replaced(record: CellRecord, classes: Classified, registry: tuple[Breakage, ...],
              replace: Callable[[CheckedProbe, ProbeClass], Optional[CheckedProbe]]) -> Classified:
    """The probes with those `replace` gives another reading of replaced, only those classified again."""
    out = []
    for probe, cls in classes:
        new = replace(probe, cls)
        out.append((new, _classify(record, new, registry)) if new is not None else (probe, cls))
    return out


def matrix_gate(cells: Iterable[CellRecord | Mapping[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> int:
    """The exit status for a set of cells: the worst cell's gate; no cell at all tested nothing."""
    return worst_gate(decide(cell, registry).gate for cell in cells)


def worst_gate(gates: Iterable[int]) -> int:
    """A NEW finding beats untested beats pass; no gate at all tested nothing."""
    gates = list(gates)
    if not gates:
        return UNTESTED
    return FINDING if FINDING in gates else max(gates)
