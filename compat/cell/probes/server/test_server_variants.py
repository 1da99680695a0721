"""Server-era probes beyond the tiny Llama's contract: other models, the other model runner, bfloat16
(compat.cell.server_models says what each variant adds to the launch, and why).

- `layer_ids_by_model[llama]`, `[deepseek_v3]` and `[hybrid]` (a tiny Qwen3-Next: Gated DeltaNet
  linear attention + full attention; on CPU in bfloat16 without prefix caching, env shims): every layer id of every file
  against its reference index, the final-layer id included; the detail's `layer_ids` table says per id which
  index it matched and the largest error. `llama` reads the contract probes' own runs (all three
  cases: batch, repeated, shared prefix; no server start of its own); a variant's run drives the
  batch case only (3 prompts of 8, 40 and 200 tokens sent at once).
- `model_runner_v2`: the same check with VLLM_USE_V2_MODEL_RUNNER=1, where the build has a V2
  runner for the platform; `n/a` with vLLM's refusal where it cannot be selected.
- `bfloat16_reference`: the tiny Llama served in bfloat16, against the float32 reference with the
  bfloat16 tolerance; the detail shows, on the reference itself, what a zeroed or shifted row
  would score, and the probe is `error` where the tolerance could not see one.
- Each check records `figures` (compat.cell.reference.figures): every (sequence, layer id) row of
  every case it compared, sequences numbered across the cases and each row naming its case. In
  16-bit, token rows off by a MoE routing flip within row_consistency.DRIFT are set aside as drift
  (reference.set_aside_drift: each row's `drift`, the figures' `drift_rule`; the harness re-checks both).
A variant run starts its own server with the launch flags the cell's main runs chose (raw, then
with_compat), so each variant adds one server start where vLLM runs as shipped. The bfloat16 case
runs only there (where no launch flag was chosen): on a cell whose raw server is refused it would
cost two more starts, and it says n/a with the flags.
"""

from __future__ import annotations

import pytest

from compat.cell import extraction, server_models, workload
from compat.cell.probes.server.test_server_probes import load, returned_layers, settle, skipped_lead
from compat.cell.reference import (
    blind_spots,
    compare,
    drift_rule_for,
    drift_total,
    figures,
    load_reference_model,
    reference_states,
    set_aside_drift,
    summarize,
    tolerance_for,
    wrong_row_margins,
)
from compat.cell.server_mode_runs import (
    CASES,
    IMAGE_CASE,
    SHAPES_CASE,
    VARIANT_CASES,
    Extraction,
    ModeRun,
    vllm_backend,
)
from compat.shared.cell_spec import CellSpec
from compat.shared.observe import ContractViolation, speculators_call
from compat.shared.results import NOT_SELECTED
from compat.shared.schedule_steps import shapes_summary
from compat.shared.tolerances import variant_fixture

pytestmark = pytest.mark.timeout(900)

MODELS = ["llama", "deepseek_v3", "hybrid"]
# The server-era variant each model case decides (`llama` reads the contract probes' own runs: none).
MODEL_VARIANTS = {"deepseek_v3": "deepseek_v3", "hybrid": "hybrid"}


class VariantRuns:
    """name -> (Variant, Extraction), built on first use, for the cell `spec`."""

    def __init__(self, extraction_runs: Extraction, model_dir: str, speculators_version: str, spec: CellSpec):
        self.main, self.model_dir, self.speculators, self.spec = extraction_runs, model_dir, speculators_version, spec
        self.made: dict = {}

    def __call__(self, name: str):
        if name not in self.made:
            chosen = server_models.variant(name, self.model_dir, vllm_backend(), cell_dtype=self.spec.dtype,
                                           cache_root=self.spec.model_cache)
            ids = chosen.layer_ids or (self.main.ids if chosen.model == self.model_dir
                                       else extraction.layer_ids(chosen.num_layers))
            self.made[name] = (chosen, Extraction(chosen.model, self.speculators, ids, self.spec, variant=chosen,
                                                  follows=self.main,
                                                  cases=chosen.cases or self.cases_of(chosen)))
        return self.made[name]

    @staticmethod
    def cases_of(chosen) -> tuple[str, ...]:
        cases = VARIANT_CASES + chosen.extra_cases
        return tuple(c for c in cases if c != SHAPES_CASE) if chosen.shapes_n_a else cases


_reference_models: dict = {}


def reference_for(model: str):
    if model not in _reference_models:
        _reference_models[model] = load_reference_model(model)
    return _reference_models[model]


def token_ids_problem(case: str, prompt, path, saved) -> list[str]:
    """A saved file's token ids against the prompt it was written for (none, or the one problem)."""
    return [] if saved["token_ids"].tolist() == list(prompt) else [f"[{case}] {path.name}: token_ids differ from "
                                                                    "the prompt"]


def check_layer_ids(run: ModeRun, ids: list[int], model: str, probe_detail: dict,
                    dtype: str, fixture: str, cases: tuple[str, ...] = CASES + (SHAPES_CASE,)) -> None:
    """Every file of every case (of `cases`): token ids equal the prompt, dtype as served, and each layer id
    equal to its reference index (within the tolerance of `dtype` for `fixture`); per id, the index it matched."""
    import torch

    settle(run, probe_detail, cases)
    if not run.files:
        raise RuntimeError("the run wrote no files to check")
    reference = reference_for(model)
    tolerance = tolerance_for(dtype, fixture)
    rule = drift_rule_for(dtype)  # 16-bit MoE drift (row_consistency.DRIFT); None in float32
    per_id: dict[int, dict] = {k: {"reference_index": k, "matches": set()} for k in ids}
    problems, margins = [], {}  # each row outside the rule (`files`: what the files themselves got wrong)
    rows, sequences_sent = [], 0  # every (sequence, layer id) row of every case, for the figures
    files: list[str] = []
    for case in [c for c in cases if c in run.files]:
        items = run.files[case]
        tensors = [load(path) for _, path in items]
        for (prompt, path), t in zip(items, tensors):
            files += token_ids_problem(case, prompt, path, t)
            if t["hidden_states"].dtype != getattr(torch, dtype):
                files.append(f"[{case}] {path.name}: hidden_states dtype {t['hidden_states'].dtype}, served as "
                             f"{dtype}")
        tables = reference_states(reference, [p for p, _ in items], run.model_inputs.get(case))
        result = compare([returned_layers(t) for t in tensors], tables, expected_index=ids, tolerance=tolerance)
        if rule is not None:
            result = set_aside_drift(result, [[x.to(torch.float32).cpu().numpy() for x in returned_layers(t)]
                                              for t in tensors],
                                     [[x.cpu().numpy() for x in table] for table in tables],
                                     [list(p) for p, _ in items], tolerance, rule)
        problems += [f"[{case}] {p}" for p in result["problems"]]
        rows += [{**row, "sequence": sequences_sent + row["sequence"], "case": case} for row in result["rows"]]
        sequences_sent += len(items)
        for row in result["rows"]:
            entry = per_id[ids[row["layer"]]]
            entry["matches"].add(row["matches_index"])
            if (row.get("drift") or {}).get("drifted"):  # its errors are then the other tokens'
                entry["drifted_tokens"] = entry.get("drifted_tokens", 0) + row["drift"]["drifted"]
                entry["drift_max_relative"] = max(entry.get("drift_max_relative", 0.0), row["drift"]["max_relative"])
        if case == "batch":
            margins = {f"seq{s}/id{k}": m for s, table in enumerate(tables)
                       for k, m in wrong_row_margins(table, ids, tolerance).items()}
    table, wrong_ids = {}, []
    for k, entry in per_id.items():
        # the errors of every row of this layer id (all cases), with the scale and allowed error of the
        # worst and how many rows: what the harness checks against the figure rows (compat.shared.tolerances)
        entry.update(summarize([r for r in rows if ids[r["layer"]] == k], tolerance))
        matched = entry.pop("matches")
        entry["matches_index"] = next(iter(matched)) if len(matched) == 1 else None
        table[str(k)] = entry
        if matched != {k}:
            wrong_ids.append(f"{k} -> {sorted(matched, key=str)}")
    # what the files got wrong first, then the rows (each starts `[case]`: the case the classifier reads), and last,
    # always in the message, which ids came back as another layer, all in one line: a registry entry that names
    # one id's fault tells it from a fault of more ids or of the files
    problems = files + problems
    wrong = f"layer ids not their own reference index: {', '.join(wrong_ids)}" if wrong_ids else None
    too_many = ""
    if rule is not None:
        drifted, tokens, too_many = drift_total(rows, rule)
        probe_detail["drift"] = {"drifted_tokens": drifted, "tokens": tokens, "rule": vars(rule)}
        if too_many:
            problems.append(too_many)
    probe_detail.update(layer_ids=table, tolerance={"atol": tolerance.atol, "rtol": tolerance.rtol},
                        model_runner=run.model_runner, final_layer_id=max(ids),
                        problems=problems[:20] + ([wrong] if wrong else []),
                        figures=figures(rows, tolerance, dtype, sequences_sent * len(ids), layers=ids,
                                        drift_rule=rule))
    if run.variant and run.variant.get("mla"):
        probe_detail["mla"] = run.variant["mla"]
    if problems == [too_many] and too_many:  # every drifted token within the rule's bounds, only too many of them
        raise PrecisionDrift(f"{too_many}; every one within relative {rule.relative:g} and still nearest its own row "
                             f"(separation < {rule.separation:g}): 16-bit drift beyond the measured share, not shown "
                             "to be the contract (re-run in float32, or on a larger model)")
    lead = skipped_lead(run, probe_detail)
    with speculators_call():
        if problems or wrong:
            raise ContractViolation("; ".join(lead + problems[:4] + ([wrong] if wrong else [])))
    shapes_shown(run, probe_detail)
    if tolerance.atol > 1e-3:  # a 16-bit tolerance: prove on this data that it still sees a wrong row
        probe_detail["wrong_row_margins"] = margins
        blind = blind_spots(margins)
        if blind:
            raise RuntimeError(f"the tolerance cannot see a wrong row here: {'; '.join(blind[:3])}")


def shapes_shown(run: ModeRun, probe_detail: dict) -> None:
    """Where the run sent the shapes case: its scheduler (compat.worker.schedule_observer) must show a prompt ending on
    a block boundary and, where chunked prefill is on, one prefilled in chunks; else it cannot pass as covering them."""
    if SHAPES_CASE not in run.files or run.schedule_log is None:
        return
    lines = workload.read_lines(run.schedule_log)
    engine = workload.engine_of(lines)
    seen = shapes_summary(lines, engine.block_size)
    probe_detail["engine_steps"] = {"block_size": engine.block_size, **seen}
    missing = [] if seen["block_multiple_ends"] else [f"a prompt ending on a block boundary (B = {engine.block_size})"]
    if engine.chunked_prefill is False and not seen["chunked_prompts"]:
        probe_detail["shapes_n_a"] = {"chunked_prefill": "the launch turns chunked prefill off: no prompt is chunked"}
    elif not seen["chunked_prompts"]:
        missing.append("a prompt prefilled in chunks")
    if missing:
        raise RuntimeError(f"the {SHAPES_CASE} case's scheduler never showed {' nor '.join(missing)}: not covered, so "
                           "not a pass")


class PrecisionDrift(RuntimeError):
    """16-bit drift beyond the share row_consistency.DRIFT allows, every drifted token within its bounds
    (compat.harness.causes: cause precision, `error`)."""


def selected(name: str, spec: CellSpec) -> None:
    """The cell may serve only some variants (`--variants`, or its matrix entry's `variants`; in the cell spec)."""
    if spec.variants is not None and name not in spec.variants:
        wanted = ",".join(spec.variants) or "none"
        pytest.skip(f"{NOT_SELECTED} this cell serves the variants {wanted} only (the run's `--variants` or its "
                    f"matrix entry's `variants` in compat/harness/matrix.toml), so this decides nothing here; "
                    f"an ad hoc pair (`nox -s compat -- --vllm V --speculators S`) serves every variant")


def variant_run(variants: VariantRuns, name: str, mode: str, probe_detail: dict) -> tuple:
    selected(name, variants.spec)
    chosen, runs = variants(name)
    probe_detail["variant"] = {"name": name, **chosen.record()}
    if chosen.shapes_n_a:
        probe_detail["shapes_n_a"] = {SHAPES_CASE: chosen.shapes_n_a}
    if chosen.not_applicable:
        pytest.skip(f"n/a: {chosen.not_applicable}")
    run = runs.get(mode)
    refused = str(run.failure or "")
    if name == "llama-runner_v2" and server_models.refuses_v2(refused):
        probe_detail["run"] = run.summary()
        pytest.skip(f"n/a: this build cannot select Model Runner V2 here; vllm serve refused it: {refused[:300]}")
    if name == "llama-fp8_kv" and server_models.refuses_fp8_kv(refused):
        probe_detail["run"] = run.summary()
        pytest.skip(f"n/a: this build cannot serve an fp8 KV cache here; vllm serve refused it: {refused[:300]}")
    return chosen, runs, run


def variant_layer_ids(variants: VariantRuns, name: str, mode: str, probe_detail: dict) -> None:
    """A variant's run of `mode`, every file of it against the reference, layer id by layer id, in its own dtype."""
    chosen, runs, run = variant_run(variants, name, mode, probe_detail)
    check_layer_ids(run, runs.ids, chosen.model, probe_detail, dtype=chosen.dtype, fixture=chosen.fixture)


# -- the probes, raw then with_compat --------------------------------------------------------
@pytest.mark.probe("layer_ids_by_model", data=True, composite=True, variant=MODEL_VARIANTS)
@pytest.mark.parametrize("model", MODELS)
def test_layer_ids_by_model(extraction_runs, variants, model_dir, model, probe_detail):
    layer_ids_by_model(extraction_runs, variants, model_dir, model, "raw", probe_detail)


@pytest.mark.probe("layer_ids_by_model", data=True, composite=True, variant=MODEL_VARIANTS)
@pytest.mark.compat_mode("with_compat")
@pytest.mark.parametrize("model", MODELS)
def test_layer_ids_by_model_with_compat(extraction_runs, variants, model_dir, model, probe_detail):
    layer_ids_by_model(extraction_runs, variants, model_dir, model, "with_compat", probe_detail)


def layer_ids_by_model(extraction_runs, variants, model_dir, model, mode, probe_detail):
    if model == "llama":
        run, ids, path = extraction_runs.get(mode), extraction_runs.ids, model_dir
        probe_detail["variant"] = {"name": "llama", "model": model_dir, "num_layers": max(ids)}
    else:
        chosen, runs, run = variant_run(variants, model, mode, probe_detail)
        ids, path = runs.ids, chosen.model
    check_layer_ids(run, ids, path, probe_detail, dtype=_served_dtype(run, variants.spec),
                    fixture=variant_fixture(model))


@pytest.mark.probe("model_runner_v2", composite=True, variant="llama-runner_v2")
def test_model_runner_v2(variants, probe_detail):
    variant_layer_ids(variants, "llama-runner_v2", "raw", probe_detail)


@pytest.mark.probe("model_runner_v2", composite=True, variant="llama-runner_v2")
@pytest.mark.compat_mode("with_compat")
def test_model_runner_v2_with_compat(variants, probe_detail):
    variant_layer_ids(variants, "llama-runner_v2", "with_compat", probe_detail)


def bfloat16_applies(extraction_runs) -> None:
    flags = extraction_runs.chosen_flags()
    if flags:
        pytest.skip(f"n/a: the bfloat16 case runs where vLLM serves as shipped; here the runs chose "
                    f"{', '.join(flags)} (each variant costs a server start per mode)")


@pytest.mark.probe("bfloat16_reference", data=True, composite=True, variant="llama-bfloat16")
def test_bfloat16_reference(extraction_runs, variants, probe_detail):
    bfloat16_applies(extraction_runs)
    chosen, runs, run = variant_run(variants, "llama-bfloat16", "raw", probe_detail)
    check_layer_ids(run, runs.ids, chosen.model, probe_detail, dtype="bfloat16", fixture=chosen.fixture)


@pytest.mark.probe("bfloat16_reference", data=True, composite=True, variant="llama-bfloat16")
@pytest.mark.compat_mode("with_compat")
def test_bfloat16_reference_with_compat(extraction_runs, variants, probe_detail):
    bfloat16_applies(extraction_runs)
    chosen, runs, run = variant_run(variants, "llama-bfloat16", "with_compat", probe_detail)
    check_layer_ids(run, runs.ids, chosen.model, probe_detail, dtype="bfloat16", fixture=chosen.fixture)


@pytest.mark.probe("every_layer_id", data=True, composite=True, variant="llama-every_layer_id", since=1)
def test_every_layer_id(variants, probe_detail):
    variant_layer_ids(variants, "llama-every_layer_id", "raw", probe_detail)


@pytest.mark.probe("every_layer_id", data=True, composite=True, variant="llama-every_layer_id", since=1)
@pytest.mark.compat_mode("with_compat")
def test_every_layer_id_with_compat(variants, probe_detail):
    variant_layer_ids(variants, "llama-every_layer_id", "with_compat", probe_detail)


# An 8-bit format has 256 codes; with one scale per tensor (or per head: here one head per layer id) a layer of a
# file stored through it holds at most 256 distinct values, where the model dtype gives one per value almost surely.
EIGHT_BIT_CODES = 256


def check_storage_precision(run: ModeRun, ids: list[int], model: str, probe_detail: dict) -> None:
    """Whether the saved states were stored at 8 bits (FP8 KV cache): per (file, layer id), the number of distinct
    values among its tokens x hidden values; and, for the record, how far each layer is from the unquantized
    reference (attention read an fp8 cache: not judged here)."""
    import torch

    settle(run, probe_detail)
    if not run.files:
        raise RuntimeError("the run wrote no files to check")
    reference = reference_for(model)
    slots, problems = [], []
    for case in [c for c in CASES if c in run.files]:
        items = run.files[case]
        tensors = [load(path) for _, path in items]
        tables = reference_states(reference, [p for p, _ in items])
        for (prompt, path), saved, table in zip(items, tensors, tables):
            problems += token_ids_problem(case, prompt, path, saved)
            for j, layer in enumerate(returned_layers(saved)):
                values = layer.to(torch.float32)
                slots.append({"case": case, "file": path.name, "layer_id": ids[j], "dtype": str(layer.dtype),
                              "values": int(values.numel()), "distinct": int(torch.unique(values).numel()),
                              "max_abs_error_vs_unquantized": float((values - table[ids[j]].to(torch.float32))
                                                                    .abs().max())})
    stored_8_bit = [s for s in slots if s["values"] > EIGHT_BIT_CODES and s["distinct"] <= EIGHT_BIT_CODES]
    probe_detail.update(kv_cache_dtype="fp8", slots=slots[:24], slots_checked=len(slots),
                        stored_at_8_bits=len(stored_8_bit),
                        rule=f"stored at 8 bits: a layer of a file holds at most {EIGHT_BIT_CODES} distinct values "
                             f"among more than {EIGHT_BIT_CODES} (an 8-bit format's codes, one scale per tensor or "
                             "head); the error against the unquantized reference is shown, not judged (attention "
                             "read an fp8 cache)")
    with speculators_call():
        if stored_8_bit:
            worst = stored_8_bit[0]
            raise ContractViolation(
                f"with --kv-cache-dtype fp8 the hidden states are stored at 8 bits: {len(stored_8_bit)} of "
                f"{len(slots)} (file, layer id) slots hold at most {EIGHT_BIT_CODES} distinct values (e.g. "
                f"[{worst['case']}] {worst['file']} id {worst['layer_id']}: {worst['distinct']} of {worst['values']}, "
                f"max abs error {worst['max_abs_error_vs_unquantized']:.3g} against the unquantized reference): "
                f"silent precision loss in every draft trained on them")
        if problems:
            raise ContractViolation("; ".join(problems[:4]))


@pytest.mark.probe("kv_cache_fp8", composite=True, variant="llama-fp8_kv", since=1)
def test_kv_cache_fp8(variants, probe_detail):
    chosen, runs, run = variant_run(variants, "llama-fp8_kv", "raw", probe_detail)
    check_storage_precision(run, runs.ids, chosen.model, probe_detail)


@pytest.mark.probe("kv_cache_fp8", composite=True, variant="llama-fp8_kv", since=1)
@pytest.mark.compat_mode("with_compat")
def test_kv_cache_fp8_with_compat(variants, probe_detail):
    chosen, runs, run = variant_run(variants, "llama-fp8_kv", "with_compat", probe_detail)
    check_storage_precision(run, runs.ids, chosen.model, probe_detail)


@pytest.mark.probe("layer_ids_qwen3_moe", data=True, composite=True, variant="qwen3_moe", since=2)
def test_layer_ids_qwen3_moe(variants, probe_detail):
    variant_layer_ids(variants, "qwen3_moe", "raw", probe_detail)


@pytest.mark.probe("layer_ids_qwen3_moe", data=True, composite=True, variant="qwen3_moe", since=2)
@pytest.mark.compat_mode("with_compat")
def test_layer_ids_qwen3_moe_with_compat(variants, probe_detail):
    variant_layer_ids(variants, "qwen3_moe", "with_compat", probe_detail)


@pytest.mark.probe("every_layer_id_deepseek_v3", data=True, composite=True, variant="deepseek_v3-every_layer_id",
                    since=4)
def test_every_layer_id_deepseek_v3(variants, probe_detail):
    variant_layer_ids(variants, "deepseek_v3-every_layer_id", "raw", probe_detail)


@pytest.mark.probe("every_layer_id_deepseek_v3", data=True, composite=True, variant="deepseek_v3-every_layer_id",
                    since=4)
@pytest.mark.compat_mode("with_compat")
def test_every_layer_id_deepseek_v3_with_compat(variants, probe_detail):
    variant_layer_ids(variants, "deepseek_v3-every_layer_id", "with_compat", probe_detail)


# The case names the served model, as layer_ids_by_model's do: entries keyed on a hybrid's case (a model class
# without the EAGLE-3 interface) fit this probe's failure too.
HYBRID_EVERY_ID = {"hybrid": "hybrid-every_layer_id"}
HYBRID_MODELS = ["hybrid"]


@pytest.mark.probe("every_layer_id_hybrid", data=True, composite=True, variant=HYBRID_EVERY_ID, since=5)
@pytest.mark.parametrize("model", HYBRID_MODELS)
def test_every_layer_id_hybrid(variants, model, probe_detail):
    variant_layer_ids(variants, HYBRID_EVERY_ID[model], "raw", probe_detail)


@pytest.mark.probe("every_layer_id_hybrid", data=True, composite=True, variant=HYBRID_EVERY_ID, since=5)
@pytest.mark.compat_mode("with_compat")
@pytest.mark.parametrize("model", HYBRID_MODELS)
def test_every_layer_id_hybrid_with_compat(variants, model, probe_detail):
    variant_layer_ids(variants, HYBRID_EVERY_ID[model], "with_compat", probe_detail)


@pytest.mark.probe("vlm_image_layer_ids", data=True, composite=True, variant="qwen2_5_vl", since=3)
def test_vlm_image_layer_ids(variants, probe_detail):
    vlm_image_layer_ids(variants, "raw", probe_detail)


@pytest.mark.probe("vlm_image_layer_ids", data=True, composite=True, variant="qwen2_5_vl", since=3)
@pytest.mark.compat_mode("with_compat")
def test_vlm_image_layer_ids_with_compat(variants, probe_detail):
    vlm_image_layer_ids(variants, "with_compat", probe_detail)


def vlm_image_layer_ids(variants: VariantRuns, mode: str, probe_detail: dict) -> None:
    """The tiny Qwen2.5-VL's image prompt (compat.cell.image_prompt) through the release's chat client: the
    rendered token ids are the processor's, and every row (the image's tokens too) matches its reference layer."""
    chosen, runs, run = variant_run(variants, "qwen2_5_vl", mode, probe_detail)
    settle(run, probe_detail, (IMAGE_CASE,))
    why = run.cases_not_run.get(IMAGE_CASE)
    if why and why.startswith("n/a:"):
        pytest.skip(why)
    if IMAGE_CASE not in run.files:
        raise RuntimeError(why or "the image case wrote no file")
    probe_detail["image_prompt"] = {"tokens": len(run.files[IMAGE_CASE][0][0]),
                                    "image_tokens": run.files[IMAGE_CASE][0][0].count(chosen.notes["image_token_id"])}
    check_layer_ids(run, runs.ids, chosen.model, probe_detail, dtype=chosen.dtype, fixture=chosen.fixture,
                    cases=(IMAGE_CASE,))


@pytest.mark.probe("vlm_text_layer_ids", data=True, composite=True, variant="qwen2_5_vl", since=2)
def test_vlm_text_layer_ids(variants, probe_detail):
    variant_layer_ids(variants, "qwen2_5_vl", "raw", probe_detail)


@pytest.mark.probe("vlm_text_layer_ids", data=True, composite=True, variant="qwen2_5_vl", since=2)
@pytest.mark.compat_mode("with_compat")
def test_vlm_text_layer_ids_with_compat(variants, probe_detail):
    variant_layer_ids(variants, "qwen2_5_vl", "with_compat", probe_detail)


def _served_dtype(run: ModeRun, spec: CellSpec) -> str:
    return (run.variant or {}).get("dtype") or spec.dtype
