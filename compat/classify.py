"""Compare each probe of a cell with the registry of known breakages (compat.breakages).

Classes (`ProbeClass.kind`):
- ``known``: the probe is `broken`, and an entry that applies to this (vLLM, speculators) pair
  explains it (exception type and message match the entry's symptom).
- ``new``: a `broken` probe no applicable entry explains; this includes a failure that looks
  like an entry's symptom but with an unexpected exception type or message, and a failure that
  matches an entry which does not apply to this pair (versions outside the entry's range).
- ``fixed``: an applicable entry says this pair should be broken here, but the probe is `ok`.
- ``as-expected-ok``: `ok`, and no entry expects otherwise.
- ``error``: the probe could not run (status `error`).
- ``not-run``: `skipped`, `n/a` or `unsupported-on-cpu`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from compat.breakages import REFERENCE_PROBE, REGISTRY, Breakage
from compat.results import ADVISORY_PROBES

KINDS = ("known", "new", "fixed", "as-expected-ok", "error", "not-run")

# Probes that run the whole generator, so any breakage (not only their own) can be the first
# failure they see.
COMPOSITE_PROBES = frozenset({REFERENCE_PROBE})


@dataclass(frozen=True)
class ProbeClass:
    kind: str
    breakage: Breakage | None = None
    note: str = ""
    advisory: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "breakage": self.breakage.id if self.breakage else None,
            "note": self.note,
            "advisory": self.advisory,
        }


def is_advisory(probe: dict[str, Any], registry: Iterable[Breakage] = REGISTRY) -> bool:
    if probe.get("advisory") or probe.get("id") in ADVISORY_PROBES:
        return True
    return any(e.advisory and e.probe == probe.get("id") for e in registry)


def _own_entries(probe_id: str, entries: Iterable[Breakage]) -> list[Breakage]:
    own = [e for e in entries if e.probe == probe_id]
    # Specific silent entries (with a case pattern) before a catch-all one.
    return sorted(own, key=lambda e: 0 if e.symptom.cases else 1)


def _fits(entry: Breakage, probe: dict[str, Any]) -> bool:
    return entry.symptom.matches(probe.get("error"), probe.get("case"))


def classify_probe(
    probe: dict[str, Any],
    vllm: str,
    speculators: str,
    registry: tuple[Breakage, ...] = REGISTRY,
) -> ProbeClass:
    """The class of one probe of the cell (vllm, speculators)."""
    advisory = is_advisory(probe, registry)
    status = probe.get("status")
    pid = probe.get("id", "")
    applicable = [e for e in registry if e.applies(vllm, speculators)]
    by_id = {e.id: e for e in registry}

    if status == "error":
        return ProbeClass("error", None, probe.get("reason") or "could not run", advisory)
    if status not in ("ok", "broken"):
        return ProbeClass("not-run", None, probe.get("reason") or str(status), advisory)

    own = _own_entries(pid, applicable)
    if status == "ok":
        for entry in own:
            if entry.symptom.cases and not (probe.get("case") and _fits(entry, probe)):
                continue
            if entry.symptom.silent and not entry.symptom.cases and probe.get("case"):
                continue  # a catch-all silent entry is not disproved by one passing case
            return ProbeClass(
                "fixed", entry, f"registry expects {entry.id} for vLLM {vllm} / speculators {speculators}", advisory
            )
        return ProbeClass("as-expected-ok", None, "", advisory)

    # broken
    detail = probe.get("detail") or {}
    named = detail.get("breakage") if isinstance(detail, dict) else None
    if named:
        entry = by_id.get(named)
        if entry is None:
            return ProbeClass("new", None, f"result names breakage {named!r}, which is not in the registry", advisory)
        if entry in applicable:
            return ProbeClass("known", entry, "named by the probe", advisory)
        return ProbeClass(
            "new", entry, f"named {entry.id}, but that entry does not apply to vLLM {vllm} / speculators {speculators}", advisory
        )

    candidates = list(own)
    if pid in COMPOSITE_PROBES:
        candidates += [e for e in applicable if e not in own and not e.symptom.silent]
    for entry in candidates:
        if _fits(entry, probe):
            return ProbeClass("known", entry, "", advisory)

    error = probe.get("error") or {}
    if own:
        entry = own[0]
        got = f"{error.get('type') or 'no exception'}: {str(error.get('message') or '')[:120]}"
        return ProbeClass(
            "new", entry, f"expected {entry.id} ({_expected(entry)}), got {got}", advisory
        )
    # Matches a known symptom, but the entry does not apply to this pair?
    for entry in registry:
        if entry.probe == pid and not entry.symptom.silent and _fits(entry, probe):
            return ProbeClass(
                "new",
                entry,
                f"looks like {entry.id}, but the registry does not expect it for vLLM {vllm} / speculators {speculators} "
                f"(introduced in vLLM {entry.introduced_in}, speculators {entry.affects})",
                advisory,
            )
    return ProbeClass("new", None, "no registry entry explains this failure", advisory)


def _expected(entry: Breakage) -> str:
    s = entry.symptom
    if s.silent:
        return s.description or "silent mismatch"
    return f"{'/'.join(s.exception) or 'any exception'} matching /{s.message}/"


def classify_cell(cell: dict[str, Any], registry: tuple[Breakage, ...] = REGISTRY) -> list[tuple[dict[str, Any], ProbeClass]]:
    """Every probe of a cell record with its class."""
    return [
        (probe, classify_probe(probe, str(cell.get("vllm")), str(cell.get("speculators")), registry))
        for probe in cell.get("probes") or []
    ]


def annotate(cell: dict[str, Any], registry: tuple[Breakage, ...] = REGISTRY) -> dict[str, Any]:
    """A copy of the cell whose probes carry a "classification" key (ProbeClass.as_dict())."""
    out = dict(cell)
    out["probes"] = []
    for probe, cls in classify_cell(cell, registry):
        p = dict(probe)
        p["classification"] = cls.as_dict()
        out["probes"].append(p)
    return out


def counts(cells: Iterable[dict[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> dict[str, int]:
    """How many probes of each class, over deciding probes only ("advisory" counted apart)."""
    out = {k: 0 for k in KINDS}
    out["advisory-new"] = 0
    for cell in cells:
        for _probe, cls in classify_cell(cell, registry):
            if cls.advisory:
                if cls.kind == "new":
                    out["advisory-new"] += 1
                continue
            out[cls.kind] += 1
    return out


def exit_code(cells: Iterable[dict[str, Any]], registry: tuple[Breakage, ...] = REGISTRY) -> int:
    """The CI gate: 0 only when nothing is NEW and no deciding probe is `error`.

    - 1: at least one deciding probe is classified ``new`` (a breakage the registry does not
      explain, or one that appears where the registry does not expect it).
    - 2: no NEW breakage, but at least one deciding probe has status `error` (it could not run,
      so the question is open).
    - 0: otherwise. Known breakages, ``fixed`` entries (an expected breakage that now passes:
      update the registry, but it does not fail the gate), skipped / n/a / unsupported-on-cpu
      probes do not fail the gate.

    Advisory probes (e.g. ``worker_logging``) never affect the exit code. A cell without probes
    (e.g. verdict ``install-error``) has no deciding probe and does not affect it either; it is
    shown in the report.
    """
    new = errors = 0
    for cell in cells:
        for probe, cls in classify_cell(cell, registry):
            if cls.advisory:
                continue
            if cls.kind == "new":
                new += 1
            elif probe.get("status") == "error":
                errors += 1
    if new:
        return 1
    if errors:
        return 2
    return 0
