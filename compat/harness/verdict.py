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

from dataclasses import dataclass, field
from typing import Any, Iterable

from compat.harness.causes import (
    as_not_contract,
    cause_of,
    cause_of_error,
    harness_fault_explained,
    with_compat_error,
    with_compat_not_contract,
    with_compat_set_aside,
)
from compat.harness.classify import ProbeClass, classify_cell, classify_probe, new_findings
from compat.harness.evidence import recheck
from compat.shared.axes import BACKENDS
from compat.shared.breakages import REFERENCE_PROBE, REGISTRY, Breakage
from compat.shared.records import migrate

PASS, FINDING, UNTESTED = 0, 1, 2
GATE_WORDS = {PASS: "pass", FINDING: "fail: NEW or regression", UNTESTED: "fail: untested"}
UNTESTED_VERDICTS = frozenset({"error", "install-error", "unsupported-on-cpu", "untested-at-runtime"})


@dataclass(frozen=True)
class Decision:
    """One cell decided: the verdict, the gate, why; the record as its evidence reads
    (compat.harness.evidence.recheck) and each of its probes' classes, worked out once."""
    verdict: str
    gate: int
    reasons: tuple[str, ...] = field(default=())
    checked: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    classes: tuple[tuple[dict[str, Any], ProbeClass], ...] = field(default=(), compare=False, repr=False)


def _label(probe: dict[str, Any]) -> str:
    return f"{probe['id']}[{probe['case']}]" if probe.get("case") else str(probe.get("id"))


def cell_verdict(cell: dict[str, Any], classes: list[tuple[dict[str, Any], ProbeClass]]) -> tuple[str, list[str]]:
    """The verdict and why, from the probe records and their classes (for advisory-ness)."""
    probes = [p for p, cls in classes if not cls.advisory and p.get("status") != "n/a"]
    if not cell.get("probes") and cell.get("verdict") == "install-error":
        return "install-error", [f"the environment could not be built: {cell.get('error') or 'see the install log'}"]
    if not cell.get("probes") and cell.get("verdict") == "untested-at-runtime":
        static = cell.get("static") or {}
        return "untested-at-runtime", [str(cell.get("runtime") or "no runtime cell ran"),
                                       f"static layer: {static.get('label') or static.get('verdict') or 'not run'} "
                                       f"(read from the wheels; nothing was run)"]
    if not probes:
        return "error", ["no deciding probe applied or ran"]

    # No with-compat status: no adapter ran for it; but where the probe run ended early (a crash, a timeout)
    # its with-compat run may never have reported, which says nothing either way: an open question below.
    unreported = [p for p in probes if cell.get("error") and p["status"] == "broken" and p.get("with_compat") is None]
    unrepaired = [p for p in probes if p["status"] == "broken" and p.get("with_compat") != "ok"
                  and not any(p is q for q in unreported) and not with_compat_set_aside(p)]
    adapter_broke = [p for p, cls in classes if not cls.advisory and p.get("status") != "broken"
                     and p.get("with_compat") == "broken"]  # n/a included: the adapters broke something
    if unrepaired or adapter_broke:
        return "incompatible", (
            [f"{_label(p)} broken, with compat adapters {p.get('with_compat') or 'not run'}" for p in unrepaired]
            + [f"{_label(p)} {p['status']}, but broken with compat adapters" for p in adapter_broke])

    open_questions = [f"{_label(p)} {p['status']}: {_why(p)}" for p in probes
                      if p["status"] in ("error", "skipped", "flaky")]
    open_questions += [f"{_label(p)} broken as released; its with-compat run did not report before the probe run "
                       "ended" for p in unreported]
    open_questions += [f"{_label(p)} with compat adapters: {p['with_compat']}"
                       + (f" ({_why(p)})" if p.get("stated") else "") for p in probes
                       if p["status"] in ("ok", "broken") and p.get("with_compat") not in (None, "ok", "broken")]
    if cell.get("error"):
        open_questions.append(f"the probe run failed: {str(cell['error']).splitlines()[0]}")
    reference = [p for p in probes if p["id"] == REFERENCE_PROBE]
    broken = [p for p in probes if p["status"] == "broken"]
    if broken and not reference:
        open_questions.append("adapters repair the exceptions, but no reference data confirmed them")
    if open_questions:
        return "error", open_questions

    refused = [p for p in probes if p["status"] == "unsupported-on-cpu"]
    if refused:
        return "unsupported-on-cpu", [f"{_label(p)}: {_why(p)}" for p in refused]
    unconfirmed = [p for p in reference if p.get("with_compat") != "ok"]
    if broken and unconfirmed:
        return "error", [f"adapters repair the exceptions, but {_label(p)} has no with-compat data check"
                         for p in unconfirmed]
    if broken:
        return "compatible-with-compat", [f"{_label(p)} broken as released, ok with compat adapters" for p in broken]
    if not reference:
        return "error", ["every contract probe passed, but the hidden states were never checked against the reference"]
    return "compatible", []


def _why(probe: dict[str, Any]) -> str:
    return str(probe.get("reason") or (probe.get("error") or {}).get("message")
               or "no reason recorded").splitlines()[0][:200]


def cell_gate(verdict: str, classes: list[tuple[dict[str, Any], ProbeClass]]) -> tuple[int, list[str]]:
    findings = []
    for probe, cls in classes:
        if cls.advisory:
            continue
        for finding in new_findings(cls):
            what = "NEW" if finding is cls else "NEW behind the exception"
            findings.append(f"{what}: {_label(probe)}: {finding.note or 'no registry entry explains it'}")
        if cls.adapter_regression:
            findings.append(f"adapter regression: {_label(probe)}: {cls.adapter_regression}")
    if findings:
        return FINDING, findings
    untested = [f"{_label(p)} {p['status']}" for p, cls in classes
                if not cls.advisory and p.get("status") in ("error", "skipped", "unsupported-on-cpu", "flaky")]
    untested += [f"{_label(p)} with compat adapters {p['with_compat']}" for p, cls in classes
                 if not cls.advisory and p.get("status") in ("ok", "broken")
                 and p.get("with_compat") not in (None, "ok", "broken")]
    if verdict in UNTESTED_VERDICTS or untested:
        return UNTESTED, [f"verdict {verdict}: not everything could be tested"] + untested
    return PASS, []


def decide(cell: dict[str, Any], registry: tuple[Breakage, ...] = REGISTRY) -> Decision:
    """The verdict and the gate of one cell record, from what its evidence supports. Problems of the
    record as a whole (manifest, installed versions, no backend) leave it `error`; a run-level
    failure (`error` beside probes: a crash or timeout) gates at least untested."""
    checked, problems = recheck(migrate(cell))
    if checked.get("backend") not in BACKENDS:
        problems.append(f"backend {checked.get('backend')!r}: expected {' or '.join(BACKENDS)} (no registry entry can "
                        "apply)")
    classes = classify_cell(checked, registry)
    # the environment's or our fixture's failure, no registry entry claims it: error
    checked, classes = _replaced(checked, classes, registry, {
        id(p): as_not_contract(p, rule) for p, cls in classes if p.get("status") == "broken" and cls.kind == "new"
        for rule in [cause_of(p.get("error"))] if rule is not None})
    # the same for a with-compat run alone (a known raw failure, its repair stopped by the machine): with_compat error
    checked, classes = _replaced(checked, classes, registry, {
        id(p): with_compat_not_contract(p, rule) for p, cls in classes
        if p.get("status") in ("ok", "broken") and p.get("with_compat") == "broken" and cls.with_compat_known is None
        for rule in [cause_of(with_compat_error(p))] if rule is not None})
    checked, classes = _replaced(checked, classes, registry, {
        id(p): dict(p, cause=cause, **harness_fault_explained(p)) for p, _cls in classes
        if p.get("status") == "error" and not p.get("cause") for cause in [cause_of_error(p)] if cause})
    verdict, reasons = cell_verdict(checked, classes)
    gate, gate_reasons = cell_gate(verdict, classes)
    if problems and verdict not in ("install-error", "untested-at-runtime"):
        verdict, reasons = "error", problems + reasons
    if gate == PASS and (problems or (checked.get("probes") and checked.get("error"))):
        gate = UNTESTED
        gate_reasons = [f"the probe run failed: {str(checked['error']).splitlines()[0]}"] if not problems else []
    return Decision(verdict, gate, tuple(reasons + gate_reasons), checked, tuple(classes))


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


def matrix_gate(cells: Iterable[dict[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> int:
    """The exit status for a set of cells: the worst cell's gate; no cell at all tested nothing."""
    return worst_gate(decide(cell, registry).gate for cell in cells)


def worst_gate(gates: Iterable[int]) -> int:
    """A NEW finding beats untested beats pass; no gate at all tested nothing."""
    gates = list(gates)
    if not gates:
        return UNTESTED
    return FINDING if FINDING in gates else max(gates)
