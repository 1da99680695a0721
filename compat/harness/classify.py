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
from typing import Any, Iterable

from compat.harness.causes import with_compat_set_aside
from compat.shared.breakages import REGISTRY, Breakage, data_symptoms
from compat.shared.probe_catalog import ids_where
from compat.shared.results import ADVISORY_PROBES, NOT_SELECTED

KINDS = ("known", "new", "fixed", "as-expected-ok", "error", "not-run")

# Probes that run the whole generator or read what one `vllm serve` run wrote, so any
# exception-raising breakage of that run (not only their own) can be the failure they see: marked
# @pytest.mark.probe(..., composite=True).
COMPOSITE_PROBES = ids_where("composite")
# a layer-id probe's message opens with the case it failed in; records of 2026-12-03 written before the ids'
# summary moved to the end open with that summary (`layer ids not their own reference index: ...; [repeated] ...`)
_CASE_PREFIX = re.compile(r"^(?:layer ids not their own reference index: [^;]*; )?\[(\w+)\] ")
_CASE_FILE = re.compile(r"(?:^|')(\w+)/hs_\d+\.safetensors\b")  # files of a server run: <case>/hs_<i>


_NAMED_CASE = re.compile(r"\[([a-z][a-z0-9_]*)\]|(?:^|[\s'\"(/])([a-z][a-z0-9_]*)/hs_\d+\.safetensors\b")


def named_cases(error: dict[str, Any] | None) -> list[str]:
    """Every server case a failure's message names (`[repeated] ...`, `batch/hs_0.safetensors`), in order."""
    message = str((error or {}).get("message") or "")
    return list(dict.fromkeys(a or b for a, b in _NAMED_CASE.findall(message)))


def failing_case(case: str | None, error: dict[str, Any] | None) -> str | None:
    """The case a case-scoped entry is checked against: the probe's case; for a probe over a whole
    server run the case its message names (`[repeated] ...`, or the first case file it names:
    `repeated/hs_2.safetensors`); for a per-model probe whose message names the server case it
    failed in, both (`llama/repeated`)."""
    if not error:
        return case
    message = str(error.get("message") or "")
    if case:
        named = _CASE_PREFIX.match(message)
        return f"{case}/{named.group(1)}" if named and named.group(1) != case else case
    m = _CASE_PREFIX.match(message) or _CASE_FILE.search(message)
    return m.group(1) if m else None


@dataclass(frozen=True)
class ProbeClass:
    kind: str
    breakage: Breakage | None = None
    note: str = ""
    advisory: bool = False
    behind: "ProbeClass | None" = None
    adapter_regression: str = ""
    with_compat_known: Breakage | None = None  # the entry explaining the with-compat run's own failure

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
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
    return tuple(c for c in (cls, cls.behind) if c is not None and c.kind == "new")


def is_advisory(probe: dict[str, Any], registry: Iterable[Breakage] = REGISTRY) -> bool:
    """Advisory probes decide nothing: by id, by registry entry, or a probe the cell chose not to run.
    A stored `advisory` flag alone never makes a probe that ran (or failed) advisory."""
    if probe.get("id") in ADVISORY_PROBES:
        return True
    if probe.get("status") == "skipped" and str(probe.get("reason") or "").startswith(NOT_SELECTED):
        return True
    return any(e.advisory and e.probe == probe.get("id") for e in registry)


def _failure(probe: dict[str, Any]) -> tuple[dict[str, Any] | None, set[str]]:
    detail = raw if isinstance(raw := probe.get("detail"), dict) else {}
    return probe.get("error"), data_symptoms(detail)


def explain_failure(
    pid: str, case: str | None, error: dict[str, Any] | None, data: set[str], candidates: list[Breakage]
) -> tuple[Breakage | None, list[str]]:
    """The first candidate the failure fits, else None and why each candidate was rejected."""
    rejected = []
    for entry in candidates:
        why_not = entry.symptom.mismatch(error, case, data)
        if why_not is None:
            return entry, []
        rejected.append(f"{entry.id}: {why_not}")
    return None, rejected


def _candidates(pid: str, applicable: list[Breakage]) -> list[Breakage]:
    own = [e for e in applicable if e.probe == pid]
    if pid in COMPOSITE_PROBES:
        own += [e for e in applicable if e.probe != pid and not e.symptom.silent]
    return own


def _got(error: dict[str, Any] | None, data: set[str]) -> str:
    if error and error.get("type"):
        where = f" at {error['where']}" if error.get("where") else ""
        return f"{error['type']}: {str(error.get('message') or '')[:120]}{where}"
    return f"data symptoms {sorted(data) or 'none recorded'}"


def classify_probe(
    probe: dict[str, Any],
    vllm: str,
    speculators: str,
    registry: tuple[Breakage, ...] = REGISTRY,
    backend: str = "cpu",
) -> ProbeClass:
    """The class of one probe of the cell (vllm, speculators, backend)."""
    advisory = is_advisory(probe, registry)
    status = probe.get("status")
    if status in ("error", "flaky"):
        return ProbeClass("error", None, probe.get("reason") or "could not run", advisory,
                          adapter_regression=_adapter_regression(probe, None))
    if status not in ("ok", "broken"):
        return ProbeClass("not-run", None, probe.get("reason") or str(status), advisory,
                          adapter_regression=_adapter_regression(probe, None))

    pid, case = probe.get("id", ""), probe.get("case")
    applicable = [e for e in registry if e.applies(vllm, speculators, backend)]
    if status == "ok":
        return _classify_ok(probe, pid, case, applicable, advisory, vllm, speculators, backend)

    error, data = _failure(probe)
    own_case, case = case, failing_case(case, error)
    detail = raw if isinstance(raw := probe.get("detail"), dict) else {}
    named = detail.get("breakage")
    if named and isinstance(detail.get("api_only"), dict):
        named = None  # the name is the api_only run's finding, classified as `behind` below
    if named:
        cls = _classify_named(named, pid, case, error, data, registry, applicable, vllm, speculators, backend)
    else:
        entry, rejected = explain_failure(pid, case, error, data, _candidates(pid, applicable))
        others = _uncovered_cases(entry, case, error)
        if entry is not None and others:
            cls = ProbeClass("new", None, f"looks like {entry.id} in case {case}, but the message also names "
                                          f"case(s) {', '.join(others)}, which {entry.id} does not cover")
        elif entry is not None:
            cls = ProbeClass("known", entry)
        else:
            cls = ProbeClass("new", None,
                             _new_note(pid, case, error, data, rejected, registry, vllm, speculators, backend))
    repaired_into = _with_compat_known(probe, pid, own_case, applicable)
    return ProbeClass(cls.kind, cls.breakage, cls.note, advisory,
                      behind=_behind(probe, pid, own_case, applicable, registry, vllm, speculators, backend),
                      adapter_regression=_adapter_regression(probe, cls, repaired_into),
                      with_compat_known=repaired_into)


def _uncovered_cases(entry: Breakage | None, case: str | None, error: dict[str, Any] | None) -> list[str]:
    """Cases the failure's message names beyond the one it was matched in, that the entry does not expect."""
    if entry is None or entry.symptom.cases is None:
        return []
    first = (case or "").rsplit("/", 1)[-1]
    return [c for c in named_cases(error) if c != first and not entry.symptom.expects_case(c)
            and not entry.symptom.expects_case(f"{(case or '').split('/')[0]}/{c}")]


def _classify_ok(probe: dict[str, Any], pid: str, case: str | None, applicable: list[Breakage], advisory: bool,
                 vllm: str, speculators: str, backend: str) -> ProbeClass:
    """`fixed` when an applicable entry expects this probe (this case) to fail here."""
    for entry in applicable:
        if entry.probe != pid or not entry.symptom.expects_case(case) or entry.prevented_by:
            continue
        if entry.intermittent:
            return ProbeClass("as-expected-ok", None,
                              f"{entry.id} is intermittent (a race) for vLLM {vllm} / speculators {speculators} on "
                              f"{backend}: this run did not meet it, which does not show it fixed", advisory,
                              adapter_regression=_adapter_regression(probe, None))
        return ProbeClass("fixed", entry,
                          f"registry expects {entry.id} for vLLM {vllm} / speculators {speculators} on {backend}",
                          advisory, adapter_regression=_adapter_regression(probe, None))
    return ProbeClass("as-expected-ok", None, "", advisory, adapter_regression=_adapter_regression(probe, None))


def _classify_named(named: str, pid: str, case: str | None, error: dict[str, Any] | None, data: set[str],
                    registry: tuple[Breakage, ...], applicable: list[Breakage], vllm: str, speculators: str,
                    backend: str) -> ProbeClass:
    entry = next((e for e in registry if e.id == named), None)
    if entry is None:
        return ProbeClass("new", None, f"the probe names breakage {named!r}, which is not in the registry")
    if entry not in applicable:
        return ProbeClass("new", entry, f"the probe names {entry.id}, which the registry does not expect for "
                                        f"vLLM {vllm} / speculators {speculators} on {backend} ({entry.scope()})")
    why_not = entry.symptom.mismatch(error, case, data)
    if why_not is not None:
        return ProbeClass("new", entry, f"the probe names {entry.id}, but its failure does not fit: {why_not}")
    return ProbeClass("known", entry, "named by the probe, and its failure fits")


def _new_note(pid: str, case: str | None, error: dict[str, Any] | None, data: set[str], rejected: list[str],
              registry: tuple[Breakage, ...], vllm: str, speculators: str, backend: str) -> str:
    got = _got(error, data)
    if rejected:
        return f"no applicable entry fits {got}; rejected: " + "; ".join(rejected[:4])
    elsewhere = [e for e in registry if e.probe == pid and not e.applies(vllm, speculators, backend)
                 and e.symptom.mismatch(error, case, data) is None]
    if elsewhere:
        e = elsewhere[0]
        return (f"looks like {e.id}, but the registry does not expect it for vLLM {vllm} / speculators "
                f"{speculators} on {backend} ({e.scope()})")
    return f"no registry entry explains {got}"


def _behind(probe: dict[str, Any], pid: str, case: str | None, applicable: list[Breakage],
            registry: tuple[Breakage, ...], vllm: str, speculators: str, backend: str) -> ProbeClass | None:
    """What the api_only run found behind the raw exception: a silent entry of this case, or NEW."""
    detail = raw if isinstance(raw := probe.get("detail"), dict) else {}
    api_only = detail.get("api_only")
    if not isinstance(api_only, dict) or api_only.get("status") != "broken":
        return None
    data = data_symptoms(api_only)
    error = api_only.get("error") if isinstance(api_only.get("error"), dict) else None
    if not data and not error:
        return ProbeClass("error", None, f"the api_only run did not finish: {str(api_only.get('error'))[:200]}")
    case = failing_case(case, error)
    candidates = [e for e in applicable if e.probe == pid and e.symptom.silent] + _candidates(pid, applicable)
    entry, rejected = explain_failure(pid, case, error, data, candidates)
    if entry is not None:
        return ProbeClass("known", entry, "found behind the exception by the api_only run")
    return ProbeClass("new", None, _new_note(pid, case, error, data, rejected, registry, vllm, speculators, backend))


def _with_compat_known(probe: dict[str, Any], pid: str, case: str | None,
                       applicable: list[Breakage]) -> Breakage | None:
    """The applicable entry that explains the with-compat run's own failure (another breakage the
    repair uncovered, e.g. a model's fault behind a launch refusal), if any."""
    detail = raw if isinstance(raw := probe.get("detail"), dict) else {}
    adapted = raw if isinstance(raw := detail.get("with_compat"), dict) else {}
    if adapted.get("status") != "broken":
        return None
    inner = raw if isinstance(raw := adapted.get("detail"), dict) else {}
    error = adapted.get("error") if isinstance(adapted.get("error"), dict) else None
    entry, _ = explain_failure(pid, failing_case(case, error), error, data_symptoms(inner),
                               _candidates(pid, applicable))
    return entry


def _adapter_regression(probe: dict[str, Any], cls: ProbeClass | None, behind_repair: Breakage | None = None) -> str:
    compat = probe.get("with_compat")
    if compat in (None, "ok", "n/a", "unsupported-on-cpu", "skipped") or with_compat_set_aside(probe):
        return ""  # refused, not run, or set aside (the machine stopped it): nothing said about the adapters
    if probe.get("status") == "broken" and behind_repair is not None \
            and (cls is None or behind_repair is not cls.breakage):
        return ""  # the repair worked; what fails now is another known breakage (the verdict still says incompatible)
    if probe.get("status") != "broken" and compat == "broken":
        return f"{probe.get('status')} as released, broken with compat adapters"
    if cls is not None and cls.kind == "known" and cls.breakage is not None and cls.breakage.adapter:
        return f"known {cls.breakage.id}, but its repair ({cls.breakage.adapter}) leaves it {compat}"
    return ""


def classify_cell(cell: dict[str, Any],
                  registry: tuple[Breakage, ...] = REGISTRY) -> list[tuple[dict[str, Any], ProbeClass]]:
    """Every probe of a cell record with its class."""
    vllm, speculators = str(cell.get("vllm")), str(cell.get("speculators"))
    backend = str(cell.get("backend"))  # no default: a record without one matches no entry
    return [(probe, classify_probe(probe, vllm, speculators, registry, backend)) for probe in cell.get("probes") or []]


def annotate(cell: dict[str, Any], registry: tuple[Breakage, ...] = REGISTRY,
             classes: Iterable[tuple[dict[str, Any], ProbeClass]] | None = None) -> dict[str, Any]:
    """A copy of the cell whose probes carry a "classification" key (ProbeClass.as_dict())."""
    out = dict(cell)
    out["probes"] = []
    for probe, cls in (classify_cell(cell, registry) if classes is None else classes):
        p = dict(probe)
        p["classification"] = cls.as_dict()
        out["probes"].append(p)
    return out


def counts(cells: Iterable[dict[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> dict[str, int]:
    """How many probes of each class, over deciding probes only ("advisory" counted apart);
    NEW findings behind an exception count as `new`, adapter regressions apart."""
    return tally(classify_cell(cell, registry) for cell in cells)


def tally(classes_per_cell: Iterable[Iterable[tuple[dict[str, Any], ProbeClass]]]) -> dict[str, int]:
    """`counts` over probes already classified, one iterable of (probe, class) per cell."""
    out = {k: 0 for k in KINDS}
    out["advisory-new"] = 0
    out["adapter-regression"] = 0
    for classes in classes_per_cell:
        for _probe, cls in classes:
            if cls.advisory:
                out["advisory-new"] += bool(new_findings(cls))
                continue
            if cls.kind != "new":
                out[cls.kind] += 1
            out["new"] += len(new_findings(cls))
            if cls.adapter_regression:
                out["adapter-regression"] += 1
    return out
