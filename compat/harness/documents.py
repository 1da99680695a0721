"""The documents the store keeps beside cell runs, typed and decided again from the evidence they name.

    kimi = load_kimi(data, source)                   # kimi.json -> KimiRecord, or DocumentError naming the field
    decided = decide_kimi(kimi)                      # its status from its checks, never the stored word
    row = load_support(data, source)                 # results/support/<row>.json -> SupportDocument
    shown, contradictions = rederive_support([(row, data)], {cell_id: verdict})

A Kimi record (compat.harness.kimi) is its suite's checks, one probe record each (the cell's
`ProbeRecord`): its status is `suite_status` over them, the rule `nox -s kimi` wrote it by. A stored
status the checks do not give (`ok` beside a broken check, `ok` with no check at all) contradicts
the record: it reads `error` with cause `record` and why, never the stored status. A stored `error`
stands (a run-level failure the checks cannot show).

A support row or column (compat.harness.support) is its cells: a measured cell is its cell record's
verdict where that record is in the report's scope (decided by compat.harness.verdict; the stored
word is kept as `stored_verdict`), an inferred cell its source's; a cell whose outcome its own
provenance and verdict cannot give (`works` beside `incompatible`, a resolver cell that works) reads
`untested` / `error`. Each disagreement is named, and a report that holds one never passes.

Dataclasses, as compat.shared.records: `records.typed` checks the shape (naming the field) and builds
the frozen classes from the checked value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from compat.harness.evidence import CONTRADICTS
from compat.harness.support import OUTCOME_OF_VERDICT, RUNTIME_PROVENANCES, Answer, Provenance, ranges
from compat.shared.records import ProbeRecord, ProbeStatus, RecordError, Verdict, typed


class DocumentError(ValueError):
    """A kept document that does not have its declared shape; the message names the file and the field."""


class KimiStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


class Outcome(str, enum.Enum):
    WORKS = "works"
    ADAPTERS = "adapters"
    UNTESTED = "untested"
    BROKEN = "broken"


@dataclass(frozen=True)
class KimiRecord:
    """kimi.json: the suite's status and its checks (the other keys, figures and settings, are shown)."""
    status: KimiStatus
    reason: Optional[str] = None
    vllm: Optional[str] = None
    speculators: Optional[str] = None
    cell: Optional[str] = None
    probes: list[ProbeRecord] = field(default_factory=list)


@dataclass(frozen=True)
class InferenceCheck:
    """An inferred cell picked to run anyway (--check-inferred): whether it ran, and what it gave."""
    ran: bool
    text: str
    verdict: Optional[str] = None
    agrees: Optional[bool] = None


@dataclass(frozen=True)
class OtherBackendRun:
    """A run of the cell's pair on another backend than its row's (compat.harness.support.other_backend_runs),
    as a shown document's cell carries it (`elsewhere`)."""
    backend: str
    outcome: Outcome
    verdict: str = ""
    cell_id: str = ""


@dataclass(frozen=True)
class SupportCell:
    """One pair of a support row or column, as compat.harness.support.Answer wrote it."""
    vllm: str
    speculators: str
    provenance: Provenance
    outcome: Outcome
    verdict: Verdict
    notes: list[str] = field(default_factory=list)
    source: Optional[list[str]] = None
    fix: str = ""
    nearest: str = ""
    check: Optional[InferenceCheck] = None
    cell_id: str = ""
    elsewhere: list[OtherBackendRun] = field(default_factory=list)  # a shown document's (with_other_backends)


@dataclass(frozen=True)
class ContractSpan:
    """A run of vLLM releases on which one contract holds (the static layer's, per row)."""
    version_added: str
    version_removed: Optional[str] = None


@dataclass(frozen=True)
class Agreement:
    """What --check-inferred found: inferred cells run anyway, how many agree, and each that does not."""
    checked: int = 0
    agree: int = 0
    disagreements: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CandidateBuild:
    """A candidate row's build (compat.harness.candidate.describe): its wheel and sha256."""
    wheel: Optional[str] = None
    sha256: Optional[str] = None


@dataclass(frozen=True)
class SupportDocument:
    """results/support/<row>.json: one speculators release x every vLLM release (axis vllm), or a column."""
    axis: str
    fixed: str
    cells: list[SupportCell]
    backend: Optional[str] = None
    model_runners: dict[str, str] = field(default_factory=dict)  # vLLM release -> the runner of extract_hidden_states
    contracts: dict[str, list[ContractSpan]] = field(default_factory=dict)  # rows: contracts not on every release
    agreement: Optional[Agreement] = None
    seed: Optional[int] = None
    candidate: Optional[CandidateBuild] = None
    vllm_range: Optional[list[str]] = None


def _load(tp: Any, data: Any, what: str, source: str) -> Any:
    try:
        return typed(tp, data)
    except RecordError as exc:
        raise DocumentError(f"{what} {source}: {exc}") from exc


def load_kimi(data: Any, source: str = "") -> KimiRecord:
    record: KimiRecord = _load(KimiRecord, data, "kimi result", source)
    return record


def load_support(data: Any, source: str = "") -> SupportDocument:
    document: SupportDocument = _load(SupportDocument, data, "support table", source)
    return document


# ---- the Kimi record -----------------------------------------------------------------------------

def suite_status(checks: Sequence[ProbeRecord], error: str | None) -> tuple[KimiStatus, str | None]:
    """ok when every check passed (or does not apply); skipped when all skipped (with their reason);
    error when the suite could not run or reported nothing; else failed, naming each check that did not pass."""
    if error or not checks:
        return KimiStatus.ERROR, error or "the suite reported no tests"
    fine = (ProbeStatus.OK, ProbeStatus.NOT_APPLICABLE)
    if all(c.status in (ProbeStatus.SKIPPED, ProbeStatus.NOT_APPLICABLE) for c in checks):
        return KimiStatus.SKIPPED, checks[0].reason
    bad = [c for c in checks if c.status not in fine]
    if bad:
        return KimiStatus.FAILED, "; ".join(f"{c.id}: {c.status.value}" for c in bad)
    return KimiStatus.OK, None


@dataclass(frozen=True)
class KimiDecision:
    status: KimiStatus
    reason: Optional[str]
    stored: KimiStatus
    contradiction: Optional[str] = None  # why the stored status is not what the checks give


def decide_kimi(record: KimiRecord) -> KimiDecision:
    """The status its checks give. A stored `error` stands (the run failed where no check shows it); with
    no check recorded a stored `skipped` or `failed` stands (it claims nothing); any other stored status
    that the checks do not give contradicts the record: `error`, cause `record`."""
    stored = KimiStatus(record.status)
    if stored is KimiStatus.ERROR or (not record.probes and stored is not KimiStatus.OK):
        return KimiDecision(stored, record.reason, stored)
    derived, why = suite_status(record.probes, None)
    if derived is stored:
        return KimiDecision(stored, record.reason, stored)
    said = f"its status says {stored.value}, its checks give {derived.value}" + (f" ({why})" if why else "")
    return KimiDecision(KimiStatus.ERROR, CONTRADICTS + said, stored, said)


def kimi_shown(data: Mapping[str, Any], decision: KimiDecision) -> dict[str, Any]:
    """The document as the report shows it: its decided status and reason; the stored status kept
    (`stored_status`) and the cause `record` where they disagree."""
    out = dict(data)
    if decision.contradiction is not None:
        out.update(status=decision.status.value, reason=decision.reason, stored_status=decision.stored.value,
                   cause="record")
    return out


# ---- the support rows and columns ----------------------------------------------------------------

def _outcome_fits(cell: SupportCell) -> bool:
    """Whether the cell's outcome is one its provenance and verdict can give (compat.harness.support.answer)."""
    provenance, verdict, outcome = cell.provenance, cell.verdict, cell.outcome
    if provenance is Provenance.RESOLVER:
        return verdict is Verdict.INSTALL_ERROR and outcome is Outcome.BROKEN
    if provenance is Provenance.STATIC_ONLY:
        return verdict is Verdict.UNTESTED_AT_RUNTIME and outcome in (Outcome.BROKEN, Outcome.UNTESTED)
    return OUTCOME_OF_VERDICT[verdict.value] == outcome.value


@dataclass(frozen=True)
class DecidedVerdict:
    """A cell of the report (one record in its scope) and the verdict compat.harness.verdict gives it."""
    id: str
    backend: str
    vllm: str
    speculators: str
    verdict: Verdict

    @classmethod
    def of_report_cell(cls, cell: Mapping[str, Any]) -> "DecidedVerdict":
        """A report's cell (compat.json's `cells`: a record as its evidence reads, its verdict decided)."""
        return cls(str(cell["id"]), str(cell["backend"]), str(cell["vllm"]), str(cell["speculators"]),
                   Verdict(cell["verdict"]))


def rederive_support(documents: Iterable[tuple[SupportDocument, Mapping[str, Any]]],
                     cells: Iterable[DecidedVerdict | Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each document (typed, with the data it was read from) as the report shows it, and each
    contradiction found, by pair. `cells`: the report's decided cells (id, backend, vllm, speculators and
    the verdict compat.harness.verdict gives the record), the records in this report's scope. A measured
    cell reads its record's verdict; an inferred cell its source's (the measured cell of the pair it
    names, in any of these documents, else the one record of that pair on the row's backend); a cell
    whose outcome its provenance and verdict cannot give reads untested (`error`). A cell whose record
    is not in scope, and one whose source is not, stays as stored (checked only for its outcome)."""
    decided_cells = [c if isinstance(c, DecidedVerdict) else DecidedVerdict.of_report_cell(c) for c in cells]
    verdicts = {c.id: c.verdict.value for c in decided_cells}
    by_pair: dict[tuple[str, str, str], list[str]] = {}
    for c in decided_cells:
        if "@" not in c.id:  # a second file of one cell id is not the pair's record
            by_pair.setdefault((c.backend, c.vllm, c.speculators), []).append(c.verdict.value)
    documents = list(documents)
    # what is shown: each document's own JSON (key for key, its other keys kept), its contradicted cells replaced
    shown = [dict(data, cells=[dict(c) for c in data["cells"]]) for _doc, data in documents]
    decided: dict[tuple[str, str], str] = {}  # pair -> the verdict of its measured cell, once decided
    contradictions: list[str] = []
    for measured in (True, False):  # measured cells first: an inferred cell reads its source's verdict
        for (doc, _data), out in zip(documents, shown):
            records = {pair[1:]: found[0] for pair, found in by_pair.items()
                       if pair[0] == str(doc.backend) and len(found) == 1}
            for i, cell in enumerate(doc.cells):
                if (cell.provenance in RUNTIME_PROVENANCES) != measured:
                    continue
                changed, why = _rederive_cell(cell, verdicts, {**records, **decided})
                if measured:
                    decided[(cell.vllm, cell.speculators)] = changed or cell.verdict.value
                if changed is None:
                    continue
                contradictions.append(f"support table {doc.axis} {doc.fixed}: vLLM {cell.vllm} x speculators "
                                      f"{cell.speculators}: {why}")
                out["cells"][i] = dict(out["cells"][i], verdict=changed, outcome=OUTCOME_OF_VERDICT[changed],
                                       stored_verdict=cell.verdict.value, stored_outcome=cell.outcome.value,
                                       notes=[why] + cell.notes)
    for (doc, data), out in zip(documents, shown):
        if out["cells"] != data["cells"]:
            out["ranges"] = ranges([Answer(str(c["vllm"]), str(c["speculators"]), str(c["provenance"]),
                                           str(c["outcome"]), str(c["verdict"])) for c in out["cells"]], doc.axis)
    return shown, contradictions


def _rederive_cell(cell: SupportCell, verdicts: Mapping[str, str],
                   decided: Mapping[tuple[str, str], str]) -> tuple[str | None, str]:
    """(the verdict the cell's evidence gives where it is not the stored one, why); (None, "") where it holds."""
    stored, provenance = cell.verdict.value, cell.provenance
    if provenance in RUNTIME_PROVENANCES and cell.cell_id in verdicts:
        own = verdicts[cell.cell_id]
        if own != stored or not _outcome_fits(cell):
            return own, (f"the table says {cell.outcome.value} ({stored}), its record {cell.cell_id} "
                         f"decides {own}")
        return None, ""
    if provenance is Provenance.INFERRED and cell.source and len(cell.source) == 2 \
            and (cell.source[0], cell.source[1]) in decided:
        source = decided[(cell.source[0], cell.source[1])]
        if source != stored or not _outcome_fits(cell):
            return source, (f"the table says {cell.outcome.value} ({stored}), inferred from vLLM "
                            f"{cell.source[0]} x speculators {cell.source[1]}, which reads {source}")
        return None, ""
    if not _outcome_fits(cell):
        return Verdict.ERROR.value, (f"{CONTRADICTS}{provenance.value}, {cell.outcome.value} beside "
                                     f"{stored}, which gives {OUTCOME_OF_VERDICT.get(stored, '?')}")
    return None, ""
