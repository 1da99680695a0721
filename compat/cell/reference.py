"""The Hugging Face reference: the same tiny model in transformers, float32, one forward per
sequence, and the comparison of extracted hidden states against it with explicit tolerances.

Reference table per sequence: index 0 = embeddings, index k = output of decoder layer k-1 as it
enters the next layer (hidden + residual), *before* the final norm. In this table speculators
0.3/0.4's captured layer i sits at index i+1, and vLLM's extract_hidden_states layer id k at
index k (id == num_layers is the last layer's output before the norm; HF's own last
`hidden_states` entry is after the norm). Runs inside a cell venv (needs torch, transformers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from compat.cell.steps import timed
from compat.shared.records import StepKind

# The tolerances, the rule and the 16-bit drift rules live in compat.shared.tolerances, which the
# harness's re-check (compat.harness.evidence) imports too: one home, so the two cannot drift apart.
from compat.shared.tolerances import (  # noqa: F401 - ATOL, RTOL, SUMMARY_KEYS: read here too
    ATOL,
    RTOL,
    RULE,
    SUMMARY_KEYS,
    TOLERANCES,
    Tolerance,
    relative_error,
    summarize,
    tolerance_for,
)

BF16_ATOL, BF16_RTOL = TOLERANCES["bfloat16"]


def load_reference_model(model_dir: str, dtype: Any = None):
    """The transformers model of a tiny fixture in float32 (or `dtype`, a torch dtype: bench/bf16_own_error.py
    loads it in bfloat16 too): a causal LM, or for a vision-language config (one with a `vision_config`) the
    image-text-to-text model, whose hidden states are its language model's."""
    import torch
    import transformers

    dtype = dtype or torch.float32
    vision = "vision_config" in json.loads(Path(model_dir, "config.json").read_text())
    auto = transformers.AutoModelForImageTextToText if vision else transformers.AutoModelForCausalLM
    with timed(StepKind.REFERENCE, "load the transformers model"):
        model = auto.from_pretrained(model_dir, dtype=dtype) if _takes_dtype() else \
            auto.from_pretrained(model_dir, torch_dtype=dtype)
    return model.eval()


def _takes_dtype() -> bool:
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) >= Version("4.56")


def reference_states(model, sequences: Sequence[Sequence[int]],
                     inputs: Sequence[dict[str, Any]] | None = None) -> list[list[Any]]:
    """Per sequence, the table [embeddings, after layer 0, ..., after last layer (pre-norm)]; `inputs`, per
    sequence, the model's other inputs (a vision-language prompt's pixel_values and image_grid_thw)."""
    with timed(StepKind.REFERENCE, f"forward {len(sequences)} sequence(s)"):
        return _reference_states(model, sequences, inputs or [{}] * len(sequences))


def _reference_states(model, sequences: Sequence[Sequence[int]], inputs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    import torch

    layers = _decoder_layers(model)
    tables = []
    for ids, extra in zip(sequences, inputs):
        captured: list[Any] = []
        # the hooks are removed before the next sequence: each one appends to this sequence's list
        hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(  # noqa: B023
            (out[0] if isinstance(out, tuple) else out)[0].detach().clone())) for layer in layers]
        try:
            with torch.no_grad():
                out = model(torch.tensor([list(ids)]), output_hidden_states=True, **extra)
        finally:
            for hook in hooks:
                hook.remove()
        tables.append([out.hidden_states[0][0].detach().clone(), *captured])
    return tables


def _decoder_layers(model):
    base = getattr(model, "model", model)
    base = getattr(base, "language_model", base)  # a vision-language model's text decoder (transformers >= 4.52)
    return list(base.layers)


def compare(returned: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]],
            expected_index: Sequence[int], tolerance: Tolerance) -> dict[str, Any]:
    """Compare returned[seq][layer] with reference[seq][expected_index[layer]].

    Returns per layer and sequence: shape, max abs and relative error, the reference's largest
    magnitude (`scale`, what the tolerance is relative to), and which reference index the
    returned tensor matches best (the layer-index semantics actually observed); and their summary
    (compat.shared.tolerances.summarize: the largest errors, the scale and allowed error of the row
    with the largest error, the rows compared), which the harness checks against the rows. The
    tolerance is the cell dtype's (tolerance_for). `figures` turns the rows into what the harness
    re-derives the verdict from.
    """
    import torch

    rows = []
    problems = []
    for s, (got_layers, table) in enumerate(zip(returned, reference)):
        if len(got_layers) != len(expected_index):
            problems.append(f"sequence {s}: {len(got_layers)} layers returned, {len(expected_index)} requested")
            continue
        for position, (got, index) in enumerate(zip(got_layers, expected_index)):
            want = table[index]
            row = {"sequence": s, "layer": position, "expected_index": index,
                   "shape": list(got.shape), "expected_shape": list(want.shape)}
            if tuple(got.shape) != tuple(want.shape):
                problems.append(f"sequence {s} layer {position}: shape {list(got.shape)}, expected {list(want.shape)}")
                row.update(max_abs_error=None, max_rel_error=None, scale=None, matches_index=None)
            else:
                got32 = got.to(torch.float32)
                scale = float(want.abs().max())
                max_abs = float((got32 - want).abs().max()) if want.numel() else 0.0
                row.update(max_abs_error=max_abs, max_rel_error=relative_error(max_abs, scale),
                           scale=scale, matches_index=best_index(got32, table, tolerance))
                if not tolerance.allows(max_abs, scale):
                    problems.append(f"sequence {s} layer {position}: max abs error {max_abs:.3g} "
                                    f"(reference index {index}, scale {scale:.3g})")
            rows.append(row)
    if len(returned) != len(reference):
        problems.append(f"{len(returned)} sequences returned, {len(reference)} sent")
    sequence_matches = None if not problems else [
        [r for r, table in enumerate(reference) if _same_sequence(got_layers, table, expected_index, tolerance)]
        for got_layers in returned]
    return {
        "ok": not problems,
        "problems": problems[:20],
        "tolerance": {"atol": tolerance.atol, "rtol": tolerance.rtol},
        **summarize(rows, tolerance),  # max abs / rel error, the scale and allowed of the worst row, rows_compared
        "sequence_matches": sequence_matches,
        "layer_semantics": sorted({(r["expected_index"], r["matches_index"]) for r in rows
                                   if r["matches_index"] is not None}),
        "rows": rows,
    }


TOLERANCE_RULE = RULE  # Tolerance.allows, in words


def drift_rule_for(dtype: str):
    """The 16-bit drift rule (compat.shared.tolerances.DRIFT, measured on an H200); None in float32."""
    from compat.shared.tolerances import DRIFT

    return DRIFT.get(dtype)


def set_aside_drift(result: dict[str, Any], got: Sequence[Sequence[Any]], tables: Sequence[Sequence[Any]],
                    tokens: Sequence[Sequence[int]], tolerance: Tolerance, rule) -> dict[str, Any]:
    """16-bit MoE drift in a `compare` result (vLLM is not batch-invariant: in 16-bit a near-tie in
    MoE routing picks another expert for a token). Per (sequence, layer) row, the token rows outside
    `max_abs_error <= atol + rtol * scale` that the drift rule (row_consistency.DRIFT) accepts: relative
    error within rule.relative and still nearest their own reference row (separation below
    rule.separation, against every row and layer of the reference tables), are set aside; the row's
    max_abs_error and scale are then the other tokens', it carries `drift: {tokens, drifted,
    max_relative, max_separation}` (every row, drifted 0 where none), and where the other tokens
    pass its problem goes and it matches its own index. A zeroed (relative 1), shifted, permuted
    or other-layer token row (nearer another row) is never drift. The share of all token rows
    (rule.fraction) is checked by the caller over every case (`drift_total`). Arrays: numpy, or
    what np.asarray takes; `got[s][position]`, `tables[s][index]`. Pure: no torch.
    """
    import numpy as np

    from compat.cell.row_consistency import token_measures

    rows = [r for r in result["rows"] if r.get("max_abs_error") is not None]
    measures = token_measures([(r["sequence"], r["expected_index"], got[r["sequence"]][r["layer"]]) for r in rows],
                              tables, tokens) if rows else []
    cleared = set()
    for row, (relative, separation) in zip(rows, measures):
        a = np.asarray(got[row["sequence"]][row["layer"]], dtype=np.float64)
        b = np.asarray(tables[row["sequence"]][row["expected_index"]], dtype=np.float64)
        errors = np.abs(a - b).max(axis=-1)
        magnitudes = np.abs(b).max(axis=-1)
        drifted = np.zeros(len(errors), dtype=bool)
        while True:  # the other tokens' scale may shrink: repeat until nothing more is set aside
            kept = ~drifted
            allowed = tolerance.atol + tolerance.rtol * float(magnitudes[kept].max())
            more = kept & (errors > allowed) & (relative <= rule.relative) & (separation < rule.separation)
            if not more.any() or (drifted | more).all():
                break
            drifted |= more
        count = int(drifted.sum())
        row["drift"] = {"tokens": int(len(errors)), "drifted": count,
                        "max_relative": float(relative[drifted].max()) if count else None,
                        "max_separation": float(separation[drifted].max()) if count else None}
        if not count:
            continue
        kept = ~drifted
        scale = float(magnitudes[kept].max())
        max_abs = float(errors[kept].max())
        row.update(max_abs_error=max_abs, max_rel_error=relative_error(max_abs, scale), scale=scale)
        if tolerance.allows(max_abs, scale):
            row["matches_index"] = row["expected_index"]
            cleared.add((row["sequence"], row["layer"]))
    problems = [p for p in result["problems"]
                if not any(p.startswith(f"sequence {s} layer {position}: max abs error") for s, position in cleared)]
    return {**result, "ok": not problems, "problems": problems, **summarize(result["rows"], tolerance)}


def drift_total(rows: Sequence[dict[str, Any]], rule) -> tuple[int, int, str]:
    """(drifted, tokens, problem) over figure rows: a problem where more than rule.fraction of all
    token rows were set aside (then it is no batch noise)."""
    drifted = sum(r["drift"]["drifted"] for r in rows if r.get("drift"))
    tokens = sum(r["drift"]["tokens"] for r in rows if r.get("drift"))
    if drifted and drifted > rule.fraction * tokens:
        return drifted, tokens, (f"{drifted} of {tokens} token rows set aside as 16-bit drift, more than "
                                 f"{rule.fraction:.0%}: not batch noise")
    return drifted, tokens, ""


def figures(result_or_rows: dict[str, Any] | Sequence[dict[str, Any]], tolerance: Tolerance | dict[str, float],
            dtype: str, rows_expected: int, layers: Sequence[int] | None = None, drift_rule=None) -> dict[str, Any]:
    """The figures a data check records (detail["figures"], lifted by the plugin to the record's
    `figures`) so that the harness can recompute pass/fail itself: the dtype vLLM ran in, the
    tolerance and its rule, how many rows the case should give (sequences sent x layers
    requested), and one row per (sequence, layer) compared, with its error, scale and allowed error
    (atol + rtol * scale, which the harness checks against the two).

    `result_or_rows`: a `compare` result or its rows (a row may carry a `case`, kept). `layers`:
    the requested layers (layer ids) in the order they were returned; a row's `layer` is its
    position in that list, so the figures name the layer itself (without `layers`, the
    position). A row with a shape mismatch has max_abs_error and scale None. With `drift_rule` (a
    row_consistency.Drift, 16-bit only: set_aside_drift), each row's `drift` is kept and the figures
    carry `drift_rule: {relative, separation, fraction}`, which the harness re-checks. Pure: no torch.
    """
    if drift_rule is not None and str(dtype) not in ("bfloat16", "float16"):
        raise ValueError(f"a drift rule is for 16-bit runs only; this one ran in {dtype}")
    rows = result_or_rows["rows"] if isinstance(result_or_rows, dict) else result_or_rows
    if isinstance(tolerance, Tolerance):
        atol, rtol = tolerance.atol, tolerance.rtol
    else:
        atol, rtol = tolerance["atol"], tolerance["rtol"]
    held = Tolerance(float(atol), float(rtol))
    out = []
    for row in rows:
        position = row["layer"]
        scale = _number(row.get("scale"))
        figure = {"sequence": int(row["sequence"]),
                  "layer": int(layers[position]) if layers is not None else int(position),
                  "reference_index": int(row["expected_index"]),
                  "max_abs_error": _number(row.get("max_abs_error")),
                  "scale": scale,
                  "allowed": None if scale is None else held.allowed(scale),
                  "matches_index": None if row.get("matches_index") is None else int(row["matches_index"])}
        if row.get("case") is not None:
            figure["case"] = row["case"]
        if drift_rule is not None and row.get("drift") is not None:
            d = row["drift"]
            figure["drift"] = {"tokens": int(d["tokens"]), "drifted": int(d["drifted"]),
                               "max_relative": _number(d.get("max_relative")),
                               "max_separation": _number(d.get("max_separation"))}
        out.append(figure)
    made = {"dtype": str(dtype), "tolerance": {"atol": float(atol), "rtol": float(rtol), "rule": RULE},
            "rows_expected": int(rows_expected), "rows": out}
    if drift_rule is not None:
        made["drift_rule"] = {"relative": float(drift_rule.relative), "separation": float(drift_rule.separation),
                              "fraction": float(drift_rule.fraction)}
    return made


def _number(value: Any) -> float | None:
    """A plain float (JSON), unchanged in value: what Tolerance.allows was given."""
    return None if value is None else float(value)


def _same_sequence(got_layers, table, expected_index, tolerance: Tolerance) -> bool:
    """Every returned layer equals that reference sequence's layer (a permutation check)."""
    import torch

    for got, index in zip(got_layers, expected_index):
        want = table[index]
        if tuple(got.shape) != tuple(want.shape):
            return False
        if not tolerance.allows(float((got.to(torch.float32) - want).abs().max()), float(want.abs().max())):
            return False
    return len(got_layers) == len(expected_index)


def is_permutation(sequence_matches: list[list[int]] | None) -> bool:
    """Each returned sequence is exactly one *other* sent sequence, all of them used once."""
    if not sequence_matches or any(len(m) != 1 for m in sequence_matches):
        return False
    order = [m[0] for m in sequence_matches]
    return sorted(order) == list(range(len(order))) and order != list(range(len(order)))


def best_index(tensor, table, tolerance: Tolerance) -> int | None:
    """The reference index this tensor matches within tolerance, if any."""
    for index, candidate in enumerate(table):
        if tuple(candidate.shape) == tuple(tensor.shape):
            scale = float(candidate.abs().max())
            if tolerance.allows(float((tensor - candidate).abs().max()), scale):
                return index
    return None


def wrong_row_margins(table: Sequence[Any], ids: Sequence[int], tolerance: Tolerance) -> dict[str, dict[str, float]]:
    """Per layer id, on this sequence's reference: what the tolerance allows, and the smallest
    error a wrong row would score here — a zeroed row (its own largest magnitude) and a row
    shifted by one position (the largest difference to its neighbour). A wrong row passes
    unseen where its figure is within `allowed`."""
    import numpy as np

    out = {}
    for k in ids:
        want = np.asarray(table[k], dtype=np.float32)  # a CPU tensor or an array
        scale = float(np.abs(want).max())
        zero = float(np.abs(want).max(axis=-1).min())
        shifted = float(np.abs(want[1:] - want[:-1]).max(axis=-1).min()) if want.shape[0] > 1 else float("inf")
        out[str(k)] = {"allowed": tolerance.atol + tolerance.rtol * scale, "zero_row": zero, "shifted_row": shifted}
    return out


def blind_spots(margins: dict[str, dict[str, float]]) -> list[str]:
    """The wrong rows `wrong_row_margins` says the tolerance would let through."""
    return [f"layer id {k}: a {kind.replace('_', ' ')} scores {m[kind]:.3g}, within the allowed {m['allowed']:.3g}"
            for k, m in margins.items() for kind in ("zero_row", "shifted_row") if m[kind] <= m["allowed"]]
