"""The Kimi-K2.5 extraction checks (the seeds saw 771 tensors of shape [512] instead of 4 of
[512, 7168]). Each test reads the shared run of conftest.extraction; a failed check is raised
inside speculators_call(), so it reports `broken` with what was wrong."""

from __future__ import annotations

import pytest

from compat.observe import ContractViolation, speculators_call


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def _tolerance(settings):
    from compat.reference import Tolerance

    # float32 on CPU is deterministic to ~1e-6; bf16 with other batch shapes is not bitwise.
    return Tolerance() if settings.dtype == "float32" else Tolerance(atol=0.1, rtol=0.05)


def _max_difference(first, second, tolerance) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for a_layers, b_layers in zip(first, second):
        for a, b in zip(a_layers, b_layers):
            if tuple(a.shape) != tuple(b.shape):
                return float("inf"), False
            diff = float((a.float() - b.float()).abs().max())
            worst = max(worst, diff)
            ok = ok and tolerance.allows(diff, float(b.float().abs().max()))
    return worst, ok


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
        tolerance = _tolerance(extraction.settings)
        worst, ok = _max_difference(extraction.batch, extraction.singles, tolerance)
        probe_detail.update(max_abs_difference=worst, atol=tolerance.atol, rtol=tolerance.rtol)
        _check(ok, f"batch and single calls differ by up to {worst:.3g}")


@pytest.mark.probe("kimi_repeat_consistency")
def test_repeated_call_matches_first(extraction, probe_detail):
    with speculators_call():
        extraction.require()
        tolerance = _tolerance(extraction.settings)
        worst, ok = _max_difference(extraction.repeat, extraction.batch, tolerance)
        probe_detail.update(max_abs_difference=worst, atol=tolerance.atol, rtol=tolerance.rtol)
        _check(ok, f"the repeated call differs from the first by up to {worst:.3g}")


@pytest.mark.probe("kimi_performance")
def test_figures_recorded(extraction, probe_detail):
    probe_detail.update(extraction.figures)
    with speculators_call():
        extraction.require()
        _check(extraction.figures.get("tokens_per_second", 0) > 0, "no extraction throughput measured")


@pytest.mark.probe("kimi_matches_reference")
def test_matches_transformers_reference(extraction, probe_detail):
    if not extraction.settings.scale:
        pytest.skip("n/a: the transformers reference runs on the scale model only (--scale-model)")
    from compat import reference

    with speculators_call():
        extraction.require()
        model = reference.load_reference_model(extraction.settings.model)
        tables = reference.reference_states(model, extraction.sequences)
        # speculators 0.3/0.4 capture layer i's output: reference index i + 1
        result = reference.compare(extraction.batch, tables, [i + 1 for i in extraction.settings.layers])
        probe_detail.update(max_abs_error_vs_reference=result["max_abs_error"],
                            max_rel_error=result["max_rel_error"], tolerance=result["tolerance"],
                            layer_semantics=result["layer_semantics"], problems=result["problems"])
        _check(result["ok"], "hidden states differ from transformers: " + "; ".join(result["problems"][:3]))
