"""The Kimi-K2.5 extraction checks (the seeds saw 771 tensors of shape [512] instead of 4 of
[512, 7168]). Each test reads the shared run of conftest.extraction; a failed check is raised
inside speculators_call(), so it reports `broken` with what was wrong."""

from __future__ import annotations

import pytest

from compat.shared.observe import ContractViolation, speculators_call


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def _dtype(states) -> str:
    """The dtype vLLM returned (bfloat16 for Kimi's "auto"), which picks the per-row bound."""
    return str(states[0][0].dtype).removeprefix("torch.")


def _arrays(states):
    return [[t.float().cpu().numpy() for t in layers] for layers in states]


def _compare_rows(first, second, extraction, probe_detail) -> dict:
    """compat.cell.row_consistency over every row, every layer, every sequence; detail gets the figures."""
    from compat.cell.row_consistency import bound_for, compare_rows, drift_for

    result = compare_rows(_arrays(first), _arrays(second), extraction.sequences, bound_for(_dtype(first)),
                          layer_names=extraction.settings.layers, drift=drift_for(_dtype(first)))
    probe_detail.update(dtype=_dtype(first), **{k: v for k, v in result.items() if k != "ok"})
    return result


@pytest.mark.probe("kimi_layers_returned")
def test_one_tensor_per_layer_per_sequence(extraction, probe_detail):
    with speculators_call():
        extraction.require()
        layers = extraction.settings.layers
        counts = [len(states) for states in extraction.batch]
        probe_detail.update(layers=layers, tensors_per_sequence=counts)
        _check(len(extraction.batch) == len(extraction.sequences),
               f"{len(extraction.batch)} results for {len(extraction.sequences)} sequences")
        _check(all(c == len(layers) for c in counts),
               f"tensors per sequence {counts}; expected {len(layers)} (layers {layers})")


@pytest.mark.probe("kimi_shapes")
def test_shapes_are_seq_len_by_hidden(extraction, probe_detail):
    with speculators_call():
        extraction.require()
        hidden = extraction.settings.hidden_size
        shapes = [[list(t.shape) for t in states] for states in extraction.batch]
        probe_detail["shapes"] = [s[0] if s else None for s in shapes]
        for tokens, states in zip(extraction.sequences, shapes):
            for shape in states:
                _check(shape == [len(tokens), hidden], f"shape {shape}; expected [{len(tokens)}, {hidden}]")


@pytest.mark.probe("kimi_finite")
def test_finite(extraction):
    import torch

    with speculators_call():
        extraction.require()
        for s, states in enumerate(extraction.batch):
            for layer, tensor in zip(extraction.settings.layers, states):
                _check(bool(torch.isfinite(tensor).all()), f"sequence {s} layer {layer}: NaN or inf")


@pytest.mark.probe("kimi_not_degenerate")
def test_not_degenerate(extraction):
    with speculators_call():
        extraction.require()
        layers = extraction.settings.layers
        for s, states in enumerate(extraction.batch):
            for layer, tensor in zip(layers, states):
                _check(bool(tensor.abs().sum() > 0), f"sequence {s} layer {layer}: all zeros")
                same = (tensor[1:] == tensor[:-1]).all(dim=-1).nonzero()
                _check(len(same) == 0, f"sequence {s} layer {layer}: rows {same.flatten()[:5].tolist()} "
                                       "equal the row after them")
            for i in range(len(states)):
                for j in range(i + 1, len(states)):
                    _check(not bool((states[i] == states[j]).all()),
                           f"sequence {s}: layers {layers[i]} and {layers[j]} are identical")


@pytest.mark.probe("kimi_batch_consistency")
def test_batch_matches_single_calls(extraction, probe_detail):
    with speculators_call():
        extraction.require()
        result = _compare_rows(extraction.batch, extraction.singles, extraction, probe_detail)
        _check(result["ok"], "batch and single calls differ row by row: " + "; ".join(result["problems"]))


@pytest.mark.probe("kimi_repeat_consistency")
def test_repeated_call_matches_first(extraction, probe_detail):
    with speculators_call():
        extraction.require()
        result = _compare_rows(extraction.repeat, extraction.batch, extraction, probe_detail)
        _check(result["ok"], "the repeated call differs from the first row by row: " + "; ".join(result["problems"]))


@pytest.mark.probe("kimi_performance")
def test_figures_recorded(extraction, probe_detail):
    probe_detail.update(extraction.figures)
    with speculators_call():
        extraction.require()
        _check(extraction.figures.get("tokens_per_second", 0) > 0, "no extraction throughput measured")


@pytest.mark.probe("kimi_matches_reference")
def test_matches_transformers_reference(extraction, probe_detail):
    if not extraction.settings.reference:
        pytest.skip(f"n/a: {extraction.settings.no_reference}")
    from compat.cell import reference

    with speculators_call():
        extraction.require()
        model = reference.load_reference_model(extraction.settings.model)
        tables = reference.reference_states(model, extraction.sequences)
        # speculators 0.3/0.4 capture layer i's output: reference index i + 1
        indexes = [i + 1 for i in extraction.settings.layers]
        if _dtype(extraction.batch) != "float32":
            _check_16bit_against_reference(extraction, tables, indexes, probe_detail)
            return
        result = reference.compare(extraction.batch, tables, indexes, reference.tolerance_for("float32"))
        probe_detail.update(max_abs_error_vs_reference=result["max_abs_error"],
                            max_rel_error=result["max_rel_error"], tolerance=result["tolerance"],
                            layer_semantics=result["layer_semantics"], problems=result["problems"])
        # the rows the harness recomputes pass/fail from; the 16-bit path's bulk rule has none
        probe_detail["figures"] = reference.figures(result, result["tolerance"], "float32",
                                                    len(extraction.sequences) * len(indexes),
                                                    layers=extraction.settings.layers)
        _check(result["ok"], "hidden states differ from transformers: " + "; ".join(result["problems"][:3]))


# 16-bit against the float32 reference cannot hold every row: a bfloat16 rounding that flips an
# MoE route moves that row (and later ones, through attention) by up to its whole norm. Measured
# on the scale model with transformers' own bfloat16 forward: median per-row relative error
# 0.010-0.020 by layer, 2-10% of rows beyond 0.05, the worst 0.99. So here the rule is on the
# bulk: median within the 16-bit bound and at most UNSTABLE_ROWS of the rows outside it. Batch
# and repeat (same dtype) keep the every-row rule, with row_consistency's 16-bit drift allowance:
# a batch runs other kernel shapes than a single prompt, and on an H200 that moved 0.5-1.4% of
# rows by a routing flip, each still nearest its own row.
UNSTABLE_ROWS = 0.2


def _check_16bit_against_reference(extraction, tables, indexes, probe_detail) -> None:
    """A 16-bit run (the scale model with MLA on a GPU, whose MLA kernels take no float32) against
    the float32 reference."""
    wanted = [[table[i] for i in indexes] for table in tables]
    worst = max(float((got.float() - want.float()).abs().max())
                for got_layers, want_layers in zip(extraction.batch, wanted)
                for got, want in zip(got_layers, want_layers))
    probe_detail.update(max_abs_error_vs_reference=worst, unstable_rows_allowed=UNSTABLE_ROWS)
    result = _compare_rows(extraction.batch, wanted, extraction, probe_detail)
    bulk_ok = result["median_relative_error"] <= result["bound"] and \
        result["failed_rows"] <= UNSTABLE_ROWS * result["rows"]
    _check(bulk_ok, f"hidden states differ from transformers beyond bfloat16's routing noise: median relative "
                    f"error {result['median_relative_error']:.3g} (bound {result['bound']:g}), "
                    f"{result['failed_rows']}/{result['rows']} rows outside it; " + "; ".join(result["problems"][:3]))
