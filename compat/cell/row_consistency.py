"""Row-by-row comparison of two extractions of the same sequences (batch vs single prompts,
a repeated call, or vLLM vs a reference): finds a permuted, shifted, mis-sliced or zeroed row
even where a few outlier dimensions (DeepSeek's massive activations) dwarf the rest.

A tolerance on the largest magnitude cannot do that: with outlier dimensions of ~1e3 the
allowance exceeds the whole difference between two unrelated rows. Two checks per row instead:

- relative error ||got_i - want_i|| / ||want_i|| within a bound for the dtype;
- separation: got_i is nearer its own row of `want` than any other row of `want` (every layer,
  every sequence), by a margin: ||got_i - want_i|| <= SEPARATION * ||got_i - nearest other||.
  Distances are measured with each dimension in units of how much it varies between rows of
  `want` (at least ~one bfloat16 step of its typical magnitude): a massive, nearly constant
  outlier dimension then counts for what it tells rows apart, not for its size, and its
  rounding noise cannot outweigh the dimensions that do tell rows apart. A row equal to
  another row of `want` (an exact copy of the wrong row) has separation infinity; a 50/50 mix
  of two rows, about 1. Rows of other sequences with the same token prefix at that position
  are the same row (causal attention), not "another row".

16-bit runs also drift: vLLM is not batch-invariant, and in bfloat16 a near-tie in MoE routing
picks another expert for a token in the batch than alone. Measured on an H200 (official vLLM
0.22.1, MLA, bfloat16): batch vs single, 18 of 3608 rows (scale model) and 38 of 2706 rows
(Kimi-shaped, 3 layers) off by 0.17-0.42 relative, every one still nearest its own row
(separation <= 0.85); a repeated call matched exactly. So in 16-bit a row outside the bound may
count as drift when it is still clearly its own row (separation < DRIFT.separation) and not
far off (relative error <= DRIFT.relative), while such rows are few (<= DRIFT.fraction of
all rows). A permuted, shifted, other-layer or other-sequence row is nearer another row, and a
zeroed row is off by 1.0: none of them is drift.

Inputs are arrays (numpy, or anything np.asarray takes: torch tensors are converted by the
caller with .float().numpy()). Pure: no torch, no vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

# Per-row relative error bounds (BOUNDS), the separation a row keeps (SEPARATION) and the 16-bit drift
# rules (DRIFT: Drift(relative, separation, fraction)) live in compat.shared.tolerances, beside the
# reference check's tolerances, which the harness's re-check of a record imports too.
# docs/kimi-suite.md ("What it checks") has the measured margins.
from compat.shared.tolerances import DRIFT, Drift  # noqa: F401 - Drift: read here too
from compat.shared.tolerances import ROW_BOUNDS as BOUNDS
from compat.shared.tolerances import ROW_SEPARATION as SEPARATION

RESOLUTION = 2.0 ** -7  # a bfloat16 step, relative: the floor of a dimension's unit
MAX_PROBLEMS = 5


class RowCheckError(ValueError):
    """Inputs that cannot be compared (the message names them and what was expected)."""


def bound_for(dtype: str) -> float:
    if dtype not in BOUNDS:
        raise RowCheckError(f"no per-row bound for dtype {dtype!r}; expected one of {sorted(BOUNDS)}")
    return BOUNDS[dtype]


def drift_for(dtype: str) -> Drift | None:
    """The drift a dtype's runs may show (None for float32: deterministic to ~1e-6)."""
    bound_for(dtype)
    return DRIFT.get(dtype)


@dataclass
class _Rows:
    """Every row of `want` stacked, with where each came from."""

    raw: np.ndarray  # [rows, hidden] float64
    matrix: np.ndarray  # the same, whitened: each dimension divided by its unit
    matrix32: np.ndarray
    unit: np.ndarray  # [hidden]: how much each dimension varies between rows
    squared_norms: np.ndarray
    sequence: np.ndarray
    layer: np.ndarray
    position: np.ndarray
    names: list  # how to call each layer index in messages


def _stack(want: Sequence[Sequence[Any]], names: list) -> _Rows:
    blocks, seq, lay, pos = [], [], [], []
    for s, layers in enumerate(want):
        for layer, tensor in enumerate(layers):
            rows = np.asarray(tensor, dtype=np.float64)
            if rows.ndim != 2:
                raise RowCheckError(f"sequence {s} layer {layer}: shape {list(rows.shape)}; expected "
                                    "[seq_len, hidden]")
            blocks.append(rows)
            seq += [s] * len(rows)
            lay += [layer] * len(rows)
            pos += list(range(len(rows)))
    widths = {b.shape[1] for b in blocks}
    if len(widths) > 1:
        raise RowCheckError(f"hidden sizes differ between layers: {sorted(widths)}")
    raw = np.concatenate(blocks) if blocks else np.zeros((0, 0))
    unit = dimension_units(raw)
    matrix = raw / unit
    return _Rows(raw, matrix, matrix.astype(np.float32), unit, (matrix ** 2).sum(axis=1), np.array(seq), np.array(lay),
                 np.array(pos), names)


def dimension_units(rows: np.ndarray) -> np.ndarray:
    """Per dimension: its standard deviation over the rows, floored at RESOLUTION x its root
    mean square (and at the smallest positive float), so no dimension's noise is magnified."""
    if rows.size == 0:
        return np.ones(rows.shape[1:])
    spread = rows.std(axis=0)
    magnitude = np.sqrt((rows ** 2).mean(axis=0))
    return np.maximum(np.maximum(spread, RESOLUTION * magnitude), np.finfo(np.float64).tiny)


def shared_prefix_lengths(tokens: Sequence[Sequence[int]]) -> np.ndarray:
    """[i, j]: how many leading tokens sequences i and j share."""
    count = len(tokens)
    shared = np.zeros((count, count), dtype=int)
    for i in range(count):
        for j in range(count):
            a, b = tokens[i], tokens[j]
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            shared[i, j] = n
    return shared


def compare_rows(got: Sequence[Sequence[Any]], want: Sequence[Sequence[Any]],
                 tokens: Sequence[Sequence[int]], bound: float,
                 separation: float = SEPARATION, label: str = "layer",
                 layer_names: Sequence[Any] | None = None, drift: Drift | None = None) -> dict[str, Any]:
    """Compare got[seq][layer] ([seq_len, hidden]) with want[seq][layer], row by row.

    Returns ok, problems (the first few, then a count), rows and failed_rows (counts),
    median_relative_error, max_relative_error, worst_row,
    max_separation_ratio (own distance / nearest other row's; must be <= separation),
    min_other_relative_distance (nearest other row / ||want_i||: what a wrong row would score
    against the bound), and the bound and separation used; with `drift`, drifted_rows (rows
    outside the bound counted as drift, not failed) and the drift allowance.
    """
    if len(got) != len(want) or len(want) != len(tokens):
        raise RowCheckError(f"{len(got)} results, {len(want)} to compare with and {len(tokens)} token "
                            "sequences; expected one of each per sequence")
    names = list(layer_names) if layer_names is not None else list(range(max(map(len, want), default=0)))
    rows = _stack(want, names)
    shared = shared_prefix_lengths(tokens)
    problems: list[str] = []
    worst = {"relative": 0.0, "ratio": 0.0, "other": float("inf"), "row": None, "errors": [], "failed": 0,
             "drift": drift, "drifted": []}
    for s, (got_layers, want_layers) in enumerate(zip(got, want)):
        if len(got_layers) != len(want_layers):
            problems.append(f"sequence {s}: {len(got_layers)} layers; expected {len(want_layers)}")
            continue
        for layer, tensor in enumerate(got_layers):
            name = f"sequence {s} {label} {names[layer]}"
            a = np.asarray(tensor, dtype=np.float64)
            b = np.asarray(want_layers[layer], dtype=np.float64)
            if a.shape != b.shape:
                problems.append(f"{name}: shape {list(a.shape)}; expected {list(b.shape)}")
                continue
            _compare_block(a, b, s, layer, rows, shared, bound, separation, name, problems, worst)
    errors = np.concatenate(worst["errors"]) if worst["errors"] else np.zeros(0)
    drifted = worst["drifted"]
    if drift is not None and len(drifted) > drift.fraction * errors.size:
        worst["failed"] += len(drifted)
        problems.append(f"{len(drifted)} of {errors.size} rows drifted beyond {bound:g} (more than "
                        f"{drift.fraction:.0%}: not batch noise); first: {drifted[0]}")
    ok = not problems
    shown = problems[:MAX_PROBLEMS] + ([f"... and {len(problems) - MAX_PROBLEMS} more"]
                                       if len(problems) > MAX_PROBLEMS else [])
    drift_record = ({} if drift is None else
                    {"drifted_rows": len(drifted), "drift": {"relative": drift.relative,
                                                             "separation": drift.separation,
                                                             "fraction": drift.fraction}})
    return {"ok": ok, "problems": shown, "rows": int(errors.size), "failed_rows": worst["failed"],
            "median_relative_error": float(np.median(errors)) if errors.size else None,
            "max_relative_error": worst["relative"],
            "worst_row": worst["row"], "max_separation_ratio": worst["ratio"],
            "min_other_relative_distance": None if worst["other"] == float("inf") else worst["other"],
            "bound": bound, "separation": separation, **drift_record}


def token_measures(blocks: Sequence[tuple[int, int, Any]], want: Sequence[Sequence[Any]],
                   tokens: Sequence[Sequence[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per (sequence, layer index of `want`, got block [seq_len, hidden]): each token row's relative
    error against want[sequence][layer] and its separation ratio (own distance / nearest other row
    of `want`, every sequence and layer of it; what compare_rows and its drift rule judge). For the
    reference check: `want` is the full reference table per sequence, so an other-layer row is
    nearer that layer's row."""
    rows = _stack(want, list(range(max(map(len, want), default=0))))
    shared = shared_prefix_lengths(tokens)
    out = []
    for s, layer, block in blocks:
        a = np.asarray(block, dtype=np.float64)
        b = np.asarray(want[s][layer], dtype=np.float64)
        if a.shape != b.shape:
            raise RowCheckError(f"sequence {s} layer {layer}: shape {list(a.shape)}; expected {list(b.shape)}")
        relative = _ratio(np.sqrt(((a - b) ** 2).sum(axis=1)), np.sqrt((b ** 2).sum(axis=1)))
        whitened = a / rows.unit
        own = np.sqrt(((whitened - b / rows.unit) ** 2).sum(axis=1))
        other, _ = _nearest_other(whitened, s, layer, rows, shared)
        out.append((relative, _ratio(own, other)))
    return out


def _compare_block(a, b, s, layer, rows: _Rows, shared, bound, separation, name, problems, worst) -> None:
    norms = np.sqrt((b ** 2).sum(axis=1))
    relative = _ratio(np.sqrt(((a - b) ** 2).sum(axis=1)), norms)
    whitened = a / rows.unit
    own = np.sqrt(((whitened - b / rows.unit) ** 2).sum(axis=1))
    other, nearest = _nearest_other(whitened, s, layer, rows, shared)
    ratio = _ratio(own, other)
    worst["errors"].append(relative)
    for t in range(len(a)):
        if relative[t] > worst["relative"]:
            worst.update(relative=float(relative[t]), row=f"{name} row {t}")
        worst["ratio"] = max(worst["ratio"], float(ratio[t]))
        if nearest[t] >= 0 and norms[t] > 0:  # what the nearest wrong row would score
            wrong = float(np.sqrt(((a[t] - rows.raw[nearest[t]]) ** 2).sum())) / float(norms[t])
            worst["other"] = min(worst["other"], wrong)
        if relative[t] > bound or not ratio[t] <= separation:
            drift = worst["drift"]
            if drift is not None and relative[t] <= drift.relative and ratio[t] < drift.separation:
                worst["drifted"].append(_describe(name, t, relative[t], ratio[t], bound, separation, "its own row"))
                continue
            worst["failed"] += 1
            label = "its own row" if own[t] <= other[t] else _row_label(rows, nearest[t])
            problems.append(_describe(name, t, relative[t], ratio[t], bound, separation, label))


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, with x/0 = inf and 0/0 = 0."""
    safe = np.where(denominator > 0, denominator, 1.0)
    return np.where(denominator > 0, numerator / safe, np.where(numerator > 0, np.inf, 0.0))


def _nearest_other(whitened: np.ndarray, s: int, layer: int, rows: _Rows, shared):
    """Per row t: the (whitened) distance to the nearest row of `want` that is not row t itself
    (nor the same row of another sequence with the same token prefix), and that row's index."""
    if not len(rows.matrix):
        return np.full(len(whitened), np.inf), np.full(len(whitened), -1)
    # float32 product (fast at Kimi's 3608 rows x 7168); the own row, whose distance is small
    # and needs precision, is masked here and measured directly by the caller.
    products = (whitened.astype(np.float32) @ rows.matrix32.T).astype(np.float64)
    squared = (whitened ** 2).sum(axis=1)[:, None] + rows.squared_norms[None, :] - 2.0 * products
    squared = np.maximum(squared, 0.0)
    squared[_same_row_mask(len(whitened), s, layer, rows, shared)] = np.inf
    nearest = squared.argmin(axis=1)
    distance = np.sqrt(squared[np.arange(len(whitened)), nearest])
    return distance, np.where(np.isfinite(distance), nearest, -1)


def _same_row_mask(count: int, s: int, layer: int, rows: _Rows, shared) -> np.ndarray:
    """[t, row]: that row of `want` is row t of sequence s at this layer, or equal to it by a
    shared token prefix (tokens 0..t the same)."""
    positions = np.arange(count)[:, None]
    same_layer = rows.layer[None, :] == layer
    same_position = rows.position[None, :] == positions
    prefix = shared[s][rows.sequence][None, :] > positions
    return same_layer & same_position & prefix


def _row_label(rows: _Rows, index: int) -> str:
    if index < 0:
        return "no other row"
    return f"sequence {rows.sequence[index]} layer {rows.names[rows.layer[index]]} row {rows.position[index]}"


def _describe(name, t, relative, ratio, bound, separation, nearest) -> str:
    reasons = []
    if relative > bound:
        reasons.append(f"relative error {relative:.3g} > {bound:g}")
    if not ratio <= separation:
        reasons.append(f"separation {ratio:.3g} > {separation:g}")
    return f"{name} row {t}: {', '.join(reasons)}; nearest: {nearest}"
