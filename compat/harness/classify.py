"""Compare each probe of a cell with the registry of known breakages (compat.shared.breakages).

Classes (`ProbeClass.kind`):
- ``known``: the probe is `broken`, and an entry that applies to this (vLLM, speculators,
  backend) explains it: exception type, message and the vLLM file where it was raised all fit
  (a silent entry: the case and the data symptom fit). A probe that names its breakage in
  `detail["breakage"]` is believed only when its failure also fits that entry.
- ``new``: a `broken` probe no applicable entry explains, with the candidates and why each was
  rejected in the note.
- ``fixed``: an applicable entry says this probe should fail here, but it is `ok`.
- ``as-expected-ok``: `ok`, and no entry expects otherwise.
- ``error``: the probe could not run (status `error`).
- ``not-run``: `skipped`, `n/a` or `unsupported-on-cpu`.

Beside the kind: `behind` classifies what the api_only run (exception-fixing adapters only) of
the reference probe found behind the raw exception, and `adapter_regression` says where the
with-compat run failed although the raw failure is a known breakage with an adapter, or where
the adapters broke a passing probe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, overload

from compat.harness.causes import api_only_run, with_compat_run
from compat.harness.checked import CheckedProbe
from compat.shared.breakages import REGISTRY, Breakage, data_symptoms
from compat.shared.probe_catalog import ids_where
from compat.shared.records import CellRecord, ProbeError, ProbeRecord, ProbeStatus, Word, load_record, to_json
from compat.shared.results import ADVISORY_PROBES, NOT_SELECTED


class ProbeKind(Word):
    """A probe's class against the registry (the module's doc says each)."""
    KNOWN = "known"
    NEW = "new"
    FIXED = "fixed"
    AS_EXPECTED_OK = "as-expected-ok"
    ERROR = "error"
    NOT_RUN = "not-run"


KINDS = tuple(kind.value for kind in ProbeKind)

# Probes that run the whole generator or read what one `vllm serve` run wrote, so any
# exception-raising breakage of that run (not only their own) can be the failure they see: marked
# @pytest.mark.probe(..., composite=True).
COMPOSITE_PROBES = ids_where("composite")
# a layer-id probe's message opens with the case it failed in; records of 2026-12-03 written before the ids'
# summary moved to the end open with that summary (`layer ids not their own reference index: ...; [repeated] ...`)
_CASE_PREFIX = re.compile(r"^(?:layer ids not their own reference index: [^;]*; )?\[(\w+)\] ")
_CASE_FILE = re.compile(r"(?:^|')(\w+)/hs_\d+\.safetensors\b")  # files of a server run: <case>/hs_<i>


_NAMED_CASE = re.compile(r"\[([a-z][a-z0-9_]*)\]|(?:^|[\s'\"(/])([a-z][a-z0-9_]*)/hs_\d+\.safetensors\b")


def named_cases(error: Optional[ProbeError]) -> list[str]:
    """Every server case a failure's message names (`[repeated] ...`, `batch/hs_0.safetensors`), in order."""
    message = str(error.message or "") if error is not None else ""
    return list(dict.fromkeys(a or b for a, b in _NAMED_CASE.findall(message)))


def failing_case(case: Optional[str], error: Optional[ProbeError]) -> Optional[str]:
    """The case a case-scoped entry is checked against: the probe's case; for a probe over a whole
    server run the case its message names (`[repeated] ...`, or the first case file it names:
    `repeated/hs_2.safetensors`); for a per-model probe whose message names the server case it
    failed in, both (`llama/repeated`)."""
    if error is None:
        return case
    message = str(error.message or "")
    if case:
        named = _CASE_PREFIX.match(message)
        return f"{case}/{named.group(1)}" if named and named.group(1) != case else case
    m = _CASE_PREFIX.match(message) or _CASE_FILE.search(message)
    return m.group(1) if m else None


@dataclass(frozen=True)
class ProbeClass:
    kind: ProbeKind
    breakage: Breakage | None = None
    note: str = ""
    advisory: bool = False
    behind: "ProbeClass | None" = None
    adapter_regression: str = ""
    with_compat_known: Breakage | None = None  # the entry explaining the with-compat run's own failure

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ProbeKind(self.kind))  # the word, where a caller wrote it (`"new"`)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "breakage": self.breakage.id if self.breakage else None,
            "note": self.note,
            "advisory": self.advisory,
            "adapter_regression": self.adapter_regression or None,
            "new_findings": len(new_findings(self)),
        }
        if self.behind is not None:
            out["behind"] = self.behind.as_dict()
        if self.with_compat_known is not None:
            out["with_compat_breakage"] = self.with_compat_known.id
        return out


def new_findings(cls: ProbeClass) -> tuple[ProbeClass, ...]:
    """What counts as NEW, written once: the probe's failure when no applicable registry entry
    explains it, and what the api_only run found behind its exception when none explains that.
    Every consumer (the gate, the tallies, the report's listings, JUnit, the re-run before a cell
    decides) asks this; an advisory probe's NEW findings are shown but decide nothing."""
    return tuple(c for c in (cls, cls.behind) if c is not None and c.kind is ProbeKind.NEW)


def is_advisory(probe: ProbeRecord, registry: Iterable[Breakage] = REGISTRY) -> bool:
    """Advisory probes decide nothing: by id, by registry entry, or a probe the cell chose not to run.
    A stored `advisory` flag alone never makes a probe that ran (or failed) advisory."""
    if probe.id in ADVISORY_PROBES:
        return True
    if probe.status is ProbeStatus.SKIPPED and str(probe.reason or "").startswith(NOT_SELECTED):
        return True
    return any(e.advisory and e.probe == probe.id for e in registry)


def _failure(probe: ProbeRecord) -> tuple[Optional[ProbeError], set[str]]:
    return probe.error, data_symptoms(probe.detail)


def _named_breakage(probe: ProbeRecord) -> Optional[str]:
    """The breakage the probe names in its own words (`detail.breakage`), unless it is the api_only run's finding
    (classified as `behind`)."""
    named = probe.detail.get("breakage")
    return None if not named or isinstance(probe.detail.get("api_only"), dict) else str(named)


def _words(error: Optional[ProbeError]) -> Optional[dict[str, Any]]:
    """The exception as the registry's symptoms read it (its JSON)."""
    return None if error is None else dict(to_json(error))


def explain_failure(
    pid: str, case: Optional[str], error: Optional[ProbeError], data: set[str], candidates: list[Breakage]
) -> tuple[Breakage | None, list[str]]:
    """The first candidate the failure fits, else None and why each candidate was rejected."""
    rejected = []
    for entry in candidates:
        why_not = entry.symptom.mismatch(_words(error), case, data)
        if why_not is None:
            return entry, []
        rejected.append(f"{entry.id}: {why_not}")
    return None, rejected


def _candidates(pid: str, applicable: list[Breakage]) -> list[Breakage]:
    own = [e for e in applicable if e.probe == pid]
    if pid in COMPOSITE_PROBES:
        own += [e for e in applicable if e.probe != pid and not e.symptom.silent]
    return own


def _got(error: Optional[ProbeError], data: set[str]) -> str:
    if error is not None and error.type:
        where = f" at {error.where}" if error.where else ""
        return f"{error.type}: {str(error.message or '')[:120]}{where}"
    return f"data symptoms {sorted(data) or 'none recorded'}"


def classify_probe(
    probe: ProbeRecord | CheckedProbe,
    vllm: str,
    speculators: str,
    registry: tuple[Breakage, ...] = REGISTRY,
    backend: str = "cpu",
) -> ProbeClass:
    """The class of one probe of the cell (vllm, speculators, backend): as recorded, or as its evidence reads."""
    record = probe.record if isinstance(probe, CheckedProbe) else probe
    set_aside = isinstance(probe, CheckedProbe) and probe.with_compat_set_aside
    advisory = is_advisory(record, registry)
    status = record.status
    if status in (ProbeStatus.ERROR, ProbeStatus.FLAKY):
        return ProbeClass(ProbeKind.ERROR, None, record.reason or "could not run", advisory,
                          adapter_regression=_adapter_regression(record, set_aside, None))
    if status not in (ProbeStatus.OK, ProbeStatus.BROKEN):
        return ProbeClass(ProbeKind.NOT_RUN, None, record.reason or str(status), advisory,
                          adapter_regression=_adapter_regression(record, set_aside, None))

    pid, case = record.id, record.case
    applicable = [e for e in registry if e.applies(vllm, speculators, backend)]
    if status is ProbeStatus.OK:
        return _classify_ok(record, set_aside, applicable, advisory, vllm, speculators, backend)

    error, data = _failure(record)
    own_case, case = case, failing_case(case, error)
    named = _named_breakage(record)
    if named:
        cls = _classify_named(named, pid, case, error, data, registry, applicable, vllm, speculators, backend)
    else:
        entry, rejected = explain_failure(pid, case, error, data, _candidates(pid, applicable))
        others = _uncovered_cases(entry, case, error)
        if entry is not None and others:
            cls = ProbeClass(ProbeKind.NEW, None, f"looks like {entry.id} in case {case}, but the message also names "
                                                  f"case(s) {', '.join(others)}, which {entry.id} does not cover")
        elif entry is not None:
            cls = ProbeClass(ProbeKind.KNOWN, entry)
        else:
            cls = ProbeClass(ProbeKind.NEW, None,
                             _new_note(pid, case, error, data, rejected, registry, vllm, speculators, backend))
    repaired_into = _with_compat_known(record, pid, own_case, applicable)
    return ProbeClass(cls.kind, cls.breakage, cls.note, advisory,
                      behind=_behind(record, pid, own_case, applicable, registry, vllm, speculators, backend),
                      adapter_regression=_adapter_regression(record, set_aside, cls, repaired_into),
                      with_compat_known=repaired_into)


def _uncovered_cases(entry: Breakage | None, case: Optional[str], error: Optional[ProbeError]) -> list[str]:
    """Cases the failure's message names beyond the one it was matched in, that the entry does not expect."""
    if entry is None or entry.symptom.cases is None:
        return []
    first = (case or "").rsplit("/", 1)[-1]
    return [c for c in named_cases(error) if c != first and not entry.symptom.expects_case(c)
            and not entry.symptom.expects_case(f"{(case or '').split('/')[0]}/{c}")]


def _classify_ok(probe: ProbeRecord, set_aside: bool, applicable: list[Breakage], advisory: bool,
                 vllm: str, speculators: str, backend: str) -> ProbeClass:
    """`fixed` when an applicable entry expects this probe (this case) to fail here."""
    regression = _adapter_regression(probe, set_aside, None)
    for entry in applicable:
        if entry.probe != probe.id or not entry.symptom.expects_case(probe.case) or entry.prevented_by:
            continue
        if entry.intermittent:
            return ProbeClass(ProbeKind.AS_EXPECTED_OK, None,
                              f"{entry.id} is intermittent (a race) for vLLM {vllm} / speculators {speculators} on "
                              f"{backend}: this run did not meet it, which does not show it fixed", advisory,
                              adapter_regression=regression)
        return ProbeClass(ProbeKind.FIXED, entry,
                          f"registry expects {entry.id} for vLLM {vllm} / speculators {speculators} on {backend}",
                          advisory, adapter_regression=regression)
    return ProbeClass(ProbeKind.AS_EXPECTED_OK, None, "", advisory, adapter_regression=regression)


def _classify_named(named: str, pid: str, case: Optional[str], error: Optional[ProbeError], data: set[str],
                    registry: tuple[Breakage, ...], applicable: list[Breakage], vllm: str, speculators: str,
                    backend: str) -> ProbeClass:
    entry = next((e for e in registry if e.id == named), None)
    if entry is None:
        return ProbeClass(ProbeKind.NEW, None, f"the probe names breakage {named!r}, which is not in the registry")
    if entry not in applicable:
        return ProbeClass(ProbeKind.NEW, entry, f"the probe names {entry.id}, which the registry does not expect for "
                                                f"vLLM {vllm} / speculators {speculators} on {backend} "
                                                f"({entry.scope()})")
    why_not = entry.symptom.mismatch(_words(error), case, data)
    if why_not is not None:
        return ProbeClass(ProbeKind.NEW, entry, f"the probe names {entry.id}, but its failure does not fit: {why_not}")
    return ProbeClass(ProbeKind.KNOWN, entry, "named by the probe, and its failure fits")


def _new_note(pid: str, case: Optional[str], error: Optional[ProbeError], data: set[str], rejected: list[str],
              registry: tuple[Breakage, ...], vllm: str, speculators: str, backend: str) -> str:
    got = _got(error, data)
    if rejected:
        return f"no applicable entry fits {got}; rejected: " + "; ".join(rejected[:4])
    elsewhere = [e for e in registry if e.probe == pid and not e.applies(vllm, speculators, backend)
                 and e.symptom.mismatch(_words(error), case, data) is None]
    if elsewhere:
        e = elsewhere[0]
        return (f"looks like {e.id}, but the registry does not expect it for vLLM {vllm} / speculators "
                f"{speculators} on {backend} ({e.scope()})")
    return f"no registry entry explains {got}"


def _behind(probe: ProbeRecord, pid: str, case: Optional[str], applicable: list[Breakage],
            registry: tuple[Breakage, ...], vllm: str, speculators: str, backend: str) -> ProbeClass | None:
    """What the api_only run found behind the raw exception: a silent entry of this case, or NEW."""
    api_only = api_only_run(probe)
    if api_only.status != "broken":
        return None
    data = data_symptoms(api_only.words)
    error = api_only.error
    if not data and error is None:
        return ProbeClass(ProbeKind.ERROR, None,
                          f"the api_only run did not finish: {str(api_only.words.get('error'))[:200]}")
    case = failing_case(case, error)
    candidates = [e for e in applicable if e.probe == pid and e.symptom.silent] + _candidates(pid, applicable)
    entry, rejected = explain_failure(pid, case, error, data, candidates)
    if entry is not None:
        return ProbeClass(ProbeKind.KNOWN, entry, "found behind the exception by the api_only run")
    return ProbeClass(ProbeKind.NEW, None,
                      _new_note(pid, case, error, data, rejected, registry, vllm, speculators, backend))


def _with_compat_known(probe: ProbeRecord, pid: str, case: Optional[str],
                       applicable: list[Breakage]) -> Breakage | None:
    """The applicable entry that explains the with-compat run's own failure (another breakage the
    repair uncovered, e.g. a model's fault behind a launch refusal), if any."""
    adapted = with_compat_run(probe)
    if adapted.status != "broken":
        return None
    inner = raw if isinstance(raw := adapted.detail, dict) else {}
    error = adapted.error
    entry, _ = explain_failure(pid, failing_case(case, error), error, data_symptoms(inner),
                               _candidates(pid, applicable))
    return entry


NOTHING_SAID = (None, ProbeStatus.OK, ProbeStatus.NOT_APPLICABLE, ProbeStatus.UNSUPPORTED_ON_CPU, ProbeStatus.SKIPPED)


def _adapter_regression(probe: ProbeRecord, set_aside: bool, cls: ProbeClass | None,
                        behind_repair: Breakage | None = None) -> str:
    compat = probe.with_compat
    if compat in NOTHING_SAID or set_aside:
        return ""  # refused, not run, or set aside (the machine stopped it): nothing said about the adapters
    if probe.status is ProbeStatus.BROKEN and behind_repair is not None \
            and (cls is None or behind_repair is not cls.breakage):
        return ""  # the repair worked; what fails now is another known breakage (the verdict still says incompatible)
    if probe.status is not ProbeStatus.BROKEN and compat is ProbeStatus.BROKEN:
        return f"{probe.status} as released, broken with compat adapters"
    if cls is not None and cls.kind is ProbeKind.KNOWN and cls.breakage is not None and cls.breakage.adapter:
        return f"known {cls.breakage.id}, but its repair ({cls.breakage.adapter}) leaves it {compat}"
    return ""


@overload
def classify_cell(cell: CellRecord, registry: tuple[Breakage, ...] = REGISTRY,
                  ) -> list[tuple[ProbeRecord, ProbeClass]]: ...


@overload
def classify_cell(cell: CellRecord, registry: tuple[Breakage, ...],
                  probes: Sequence[CheckedProbe]) -> list[tuple[CheckedProbe, ProbeClass]]: ...


def classify_cell(cell: CellRecord, registry: tuple[Breakage, ...] = REGISTRY,
                  probes: Sequence[CheckedProbe] | None = None,
                  ) -> list[tuple[ProbeRecord, ProbeClass]] | list[tuple[CheckedProbe, ProbeClass]]:
    """Every probe of a cell record with its class: the record's own, or `probes`, the cell's probes as their
    evidence reads (compat.harness.evidence.recheck)."""
    vllm, speculators, backend = cell.vllm, cell.speculators, cell.backend.value
    if probes is None:
        return [(probe, classify_probe(probe, vllm, speculators, registry, backend)) for probe in cell.probes]
    return [(checked, classify_probe(checked, vllm, speculators, registry, backend)) for checked in probes]


def annotate(cell: CellRecord | dict[str, Any], registry: tuple[Breakage, ...] = REGISTRY,
             classes: Iterable[tuple[ProbeRecord | CheckedProbe | dict[str, Any], ProbeClass]] | None = None,
             ) -> dict[str, Any]:
    """The cell's JSON whose probes carry a "classification" key (ProbeClass.as_dict()): the classes given (its
    probes as their evidence reads), or the record's own probes classified."""
    out: dict[str, Any] = to_json(cell) if isinstance(cell, CellRecord) else dict(cell)
    if classes is None:
        classes = classify_cell(cell if isinstance(cell, CellRecord) else load_record(cell), registry)
    out["probes"] = [{**_probe_json(probe), "classification": cls.as_dict()} for probe, cls in classes]
    return out


def _probe_json(probe: ProbeRecord | CheckedProbe | dict[str, Any]) -> dict[str, Any]:
    if isinstance(probe, CheckedProbe):
        return probe.as_json()
    return dict(to_json(probe)) if isinstance(probe, ProbeRecord) else dict(probe)


def counts(cells: Iterable[CellRecord], registry: tuple[Breakage, ...] = REGISTRY) -> dict[str, int]:
    """How many probes of each class, over deciding probes only ("advisory" counted apart);
    NEW findings behind an exception count as `new`, adapter regressions apart."""
    return tally(classify_cell(cell, registry) for cell in cells)


def tally(classes_per_cell: Iterable[Iterable[tuple[object, ProbeClass]]]) -> dict[str, int]:
    """`counts` over probes already classified, one iterable of (probe, class) per cell."""
    out = {k: 0 for k in KINDS}
    out["advisory-new"] = 0
    out["adapter-regression"] = 0
    for classes in classes_per_cell:
        for _probe, cls in classes:
            if cls.advisory:
                out["advisory-new"] += bool(new_findings(cls))
                continue
            if cls.kind is not ProbeKind.NEW:
                out[cls.kind.value] += 1
            out["new"] += len(new_findings(cls))
            if cls.adapter_regression:
                out["adapter-regression"] += 1
    return out
