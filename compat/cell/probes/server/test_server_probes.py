"""Probes of vLLM's extract_hidden_states + ExampleHiddenStatesConnector contract (speculators >= 0.5).

Every file-level probe runs twice: "raw" (vLLM as shipped, its status) and "with_compat" (the
launch flags chosen from what the runs observed, see compat/cell/server_mode_runs.py), which the plugin merges into
the raw record's `with_compat`. Without a GPU both load the CPU connector shim, an environment
shim listed in `env_shims`. When raw was refused for a setting a flag turns off, the raw record
also says in `api_only` what the same check found on the run with only that flag.
Reading the files, the reference and the comparison are ours (a fault there is `error`); only
what vLLM wrote and served is judged inside speculators_call.
"""

from __future__ import annotations

import typing

import pytest

from compat.cell.reference import SUMMARY_KEYS, compare, figures, reference_states, tolerance_for
from compat.cell.server_mode_runs import CASES, ModeRun, file_rows, vllm_backend, vllm_version
from compat.shared import breakages
from compat.shared.observe import CONTRACT_TAG, ContractViolation, describe, speculators_call

pytestmark = pytest.mark.timeout(900)  # the first file probe of a mode starts the server and runs the client

def literal_values(annotation) -> set:
    """Every value a (nested) Literal/Union annotation admits."""
    if typing.get_origin(annotation) is typing.Literal:
        return {v for arg in typing.get_args(annotation) for v in (literal_values(arg) or {arg})}
    return {v for arg in typing.get_args(annotation) for v in literal_values(arg)}


@pytest.mark.probe("extract_hidden_states_method",
                   contract=("config-key", "speculative_config.method=extract_hidden_states"))
def test_extract_hidden_states_method(server_profile, probe_detail):
    import vllm.config.speculative as speculative

    methods = literal_values(getattr(speculative, "SpeculativeMethod", None))
    probe_detail["methods"] = sorted(str(m) for m in methods)
    with speculators_call(getattr(speculative, "SpeculativeConfig", None)):
        if "extract_hidden_states" not in methods:
            raise ContractViolation("SpeculativeConfig does not accept method 'extract_hidden_states' "
                                    f"(accepted: {', '.join(sorted(map(str, methods))) or 'none found'})",
                                    where="vllm/config/speculative.py")


@pytest.mark.probe("hidden_states_connector",
                   contract=("config-key", "kv_transfer_config.kv_connector=ExampleHiddenStatesConnector"))
def test_hidden_states_connector(server_profile, speculators_version, probe_detail, tmp_path):
    """The connector class the release's launch selects (from 0.7 its hidden-states backend
    registry, hs-connectors from 0.8: compat.cell.extraction.launch_transfer_config) resolves in
    this vLLM: registered with KVConnectorFactory, or importable from its kv_connector_module_path."""
    import importlib

    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    from compat.cell.extraction import launch_transfer_config

    config, source = launch_transfer_config(speculators_version, tmp_path)
    name, module_path = config.get("kv_connector"), config.get("kv_connector_module_path")
    probe_detail.update(kv_connector=name, kv_connector_module_path=module_path, selected_by=source)
    with speculators_call(KVConnectorFactory):
        registry = getattr(KVConnectorFactory, "_registry", {})
        probe_detail["registered"] = name in registry
        if module_path:
            found = getattr(importlib.import_module(module_path), name, None)
        else:
            found = registry[name]() if name in registry else None
        if found is None:
            raise ContractViolation(f"{name} is not registered with KVConnectorFactory"
                                    + (f" nor defined in {module_path}" if module_path else ""),
                                    where="vllm/distributed/kv_transfer/kv_connector/factory.py")
        probe_detail["connector_class"] = f"{found.__module__}.{found.__qualname__}"


# -- outcome of a mode's run -------------------------------------------------------------------
def settle(run: ModeRun, probe_detail: dict, cases=CASES) -> None:
    """Turn a run (or, for `cases`, a client run) that did not produce files into this probe's outcome."""
    probe_detail["run"] = run.summary()
    if run.env_shims:
        probe_detail["env_shims"] = run.env_shims
    if run.harness_error:
        raise RuntimeError(run.harness_error)
    if run.interrupted:
        raise RuntimeError(run.interrupted)
    if run.unsupported:
        pytest.skip(f"unsupported-on-cpu: {run.unsupported}")
    failed_case = None if run.failure else next((case for case in cases if case in run.case_failures), None)
    failure = run.failure or (ContractViolation(f"[{failed_case}] {run.case_failures[failed_case]}",
                                                where=run.case_failures[failed_case].where) if failed_case else None)
    if failure:
        error = {"type": "ContractViolation", "message": str(failure), "where": failure.where}
        import importlib.metadata

        spec = importlib.metadata.version("speculators")
        named = [e.id for e in breakages.applicable(vllm_version(), spec, vllm_backend())
                 if not e.symptom.silent and e.symptom.matches(error, failed_case)]
        if named:
            probe_detail["breakage"] = named[0]
        with speculators_call():
            raise ContractViolation(str(failure), where=failure.where)


def load(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def returned_layers(tensors) -> list:
    states = tensors["hidden_states"]
    return [states[:, j, :] for j in range(states.shape[1])]


# -- probes of the written files ---------------------------------------------------------------
def payload_schema(run: ModeRun, ids: list[int], dtype: str, probe_detail: dict) -> None:
    import torch

    settle(run, probe_detail)
    problems, seen = [], []
    for case, items in run.files.items():
        for prompt, path in items:
            if not path.is_file():
                problems.append(f"{case}: {path.name} missing")
                continue
            try:
                tensors = load(path)
            except Exception as exc:  # noqa: BLE001 - a file vLLM wrote that does not read back
                problems.append(f"{case}/{path.name}: unreadable ({type(exc).__name__}: {str(exc)[:120]})")
                continue
            keys = sorted(tensors)
            if not {"token_ids", "hidden_states"} <= set(keys):
                problems.append(f"{case}/{path.name}: keys {keys}")
                continue
            hs, tok = tensors["hidden_states"], tensors["token_ids"]
            seen.append({"case": case, "file": path.name, "keys": keys, "hidden_states": list(hs.shape),
                         "dtype": str(hs.dtype).removeprefix("torch."),
                         "token_ids_dtype": str(tok.dtype).removeprefix("torch.")})
            if hs.ndim != 3 or hs.shape[0] != len(prompt) or hs.shape[1] != len(ids):
                problems.append(f"{case}/{path.name}: hidden_states {list(hs.shape)}, expected [{len(prompt)}, "
                                f"{len(ids)}, hidden]")
            if hs.dtype != getattr(torch, dtype):
                problems.append(f"{case}/{path.name}: hidden_states dtype {hs.dtype}, served as {dtype}")
            if tok.tolist() != list(prompt):
                problems.append(f"{case}/{path.name}: token_ids differ from the prompt")
    probe_detail["files"] = seen
    with speculators_call():
        if problems:
            raise ContractViolation("; ".join(problems[:6]))


def write_completion(run: ModeRun, probe_detail: dict) -> None:
    settle(run, probe_detail)
    folders = [d for d in [run.storage, *run.out_dirs] if d and d.exists()]
    locks = sorted(str(p.relative_to(run.storage.parent)) for d in folders for p in d.rglob("*.lock"))
    unmoved = sorted(p.name for p in run.storage.rglob("*.safetensors")) if run.storage.exists() else []
    short = [f"{case}/{path.name}" for case, items in run.files.items() for prompt, path in items
             if not whole(path, prompt)]
    probe_detail.update(lock_files_left=locks, files_left_in_storage=unmoved, incomplete=short)
    with speculators_call():
        if locks or short:
            raise ContractViolation(f"after the client finished: lock files left {locks[:4]}, "
                                    f"incomplete or missing files {short[:4]}")


def whole(path, prompt) -> bool:
    """The file is there, reads back, and holds one row per prompt token."""
    try:
        return file_rows(path) == len(prompt)
    except Exception:  # noqa: BLE001 - unreadable: not complete
        return False


def layer_numbering(run: ModeRun, ids: list[int], model, dtype: str, probe_detail: dict) -> None:
    import torch

    settle(run, probe_detail, cases=[next((c for c in CASES if c in run.files), CASES[0])])
    items = next(iter(run.files.values()))
    prompts = [p for p, _ in items]
    got = [returned_layers(load(path)) for _, path in items]
    tables = reference_states(model, prompts)
    result = compare(got, tables, expected_index=ids, tolerance=tolerance_for(dtype))
    matches = {}
    for row in result["rows"]:
        matches.setdefault(ids[row["layer"]], set()).add(row["matches_index"])
    probe_detail["id_to_reference_index"] = {str(k): sorted(v, key=str) for k, v in matches.items()}
    last = len(tables[0]) - 1  # == num_layers: the last layer's output before the final norm
    # a sequence whose file holds another number of layers than ids gives no rows (compare() skips it): not a pass
    if len(result["rows"]) != len(prompts) * len(ids):
        with speculators_call():
            raise ContractViolation(f"{len(result['rows'])} of {len(prompts) * len(ids)} (sequence, layer id) rows "
                                    f"compared: {'; '.join(result['problems'][:3])}")
    if last in ids:
        with torch.no_grad():
            post_norm = model.model.norm(tables[0][last])
        diff = float((got[0][ids.index(last)] - post_norm).abs().max())
        probe_detail["num_layers_id"] = {"id": last, "is": "pre-norm" if matches.get(last) == {last} else "other",
                                         "max_abs_diff_to_post_norm": diff}
    with speculators_call():
        wrong = {k: sorted(v, key=str) for k, v in matches.items() if v != {k}}
        if wrong:
            raise ContractViolation(f"layer id -> reference index {wrong}: expected id k to be the output of "
                                    f"decoder layer k-1 (0 = embeddings, {last} = last layer before the norm)")


def match_reference(run: ModeRun, ids: list[int], model, case: str, dtype: str, probe_detail: dict) -> None:
    settle(run, probe_detail, cases=[case])
    items = run.files[case]
    got = [returned_layers(load(path)) for _, path in items]
    result = compare(got, reference_states(model, [p for p, _ in items]), expected_index=ids,
                     tolerance=tolerance_for(dtype))
    probe_detail.update({k: result[k] for k in (*SUMMARY_KEYS, "tolerance", "problems")},
                        layer_ids=ids, sequences=[len(p) for p, _ in items])
    probe_detail["figures"] = figures(result, result["tolerance"], dtype, len(items) * len(ids), layers=ids)
    lead = skipped_lead(run, probe_detail)
    with speculators_call():
        if not result["ok"]:
            raise ContractViolation("; ".join(lead + [f"hidden states differ from the transformers reference ({case}): "
                                                      + "; ".join(result["problems"][:3])]))


def skipped_lead(run: ModeRun, probe_detail: dict) -> list[str]:
    """The checkpoint tensors the run's server skipped at load (kept in the detail), as a data probe's failure's
    first words: a load that skipped weights explains rows that match nothing, so it is said before them."""
    skipped = run.skipped_weights
    if not skipped:
        return []
    probe_detail["skipped_weights"] = skipped
    return [f"vLLM skipped loading {len(skipped)} checkpoint tensor(s) ({', '.join(skipped[:2])}"
            f"{', ...' if len(skipped) > 2 else ''}): those weights were never loaded"]


# -- the probes, raw then with_compat ----------------------------------------------------------
API_ONLY_KEPT = ("breakage", "problems", "incomplete", *SUMMARY_KEYS, "figures")  # figures: that run's own


def raw_and_behind(runs, check, probe_detail: dict) -> None:
    """`check` on the raw run; when that fails and raw was refused for a setting a launch flag
    turns off, the same check on the run with that flag too (recorded in `api_only`)."""
    try:
        check(runs.get("raw"), probe_detail)
    except BaseException:
        behind = runs.api_only()
        if behind is not None:
            probe_detail["api_only"] = outcome_of(check, behind)
        raise


def outcome_of(check, run: ModeRun) -> dict:
    seen: dict = {}
    status, error = "ok", None
    try:
        check(run, seen)
    except pytest.skip.Exception as exc:
        status, error = "unsupported-on-cpu", {"type": "Skipped", "message": str(exc), "where": None}
    except Exception as exc:  # noqa: BLE001 - recorded as what that run showed
        status, error = ("broken" if hasattr(exc, CONTRACT_TAG) else "error"), describe(exc)
    return {"status": status, "error": error, "flags": run.flags, "env_shims": run.env_shims,
            **{k: seen[k] for k in API_ONLY_KEPT if k in seen}}


@pytest.mark.probe("payload_schema", composite=True)
def test_payload_schema(extraction_runs, probe_detail):
    raw_and_behind(extraction_runs,
                   lambda run, detail: payload_schema(run, extraction_runs.ids, extraction_runs.spec.dtype, detail),
                   probe_detail)


@pytest.mark.probe("write_completion", composite=True)
def test_write_completion(extraction_runs, probe_detail):
    raw_and_behind(extraction_runs, write_completion, probe_detail)


@pytest.mark.probe("layer_numbering", composite=True)
def test_layer_numbering(extraction_runs, reference_model, probe_detail):
    raw_and_behind(extraction_runs, lambda run, detail: layer_numbering(run, extraction_runs.ids, reference_model,
                                                                        extraction_runs.spec.dtype, detail),
                   probe_detail)


@pytest.mark.probe("hidden_states_match_reference", data=True, composite=True)
@pytest.mark.parametrize("case", CASES)
def test_reference(extraction_runs, reference_model, case, probe_detail):
    raw_and_behind(extraction_runs, lambda run, detail: match_reference(run, extraction_runs.ids, reference_model,
                                                                        case, extraction_runs.spec.dtype, detail),
                   probe_detail)


@pytest.mark.probe("payload_schema", composite=True)
@pytest.mark.compat_mode("with_compat")
def test_payload_schema_with_compat(extraction_runs, probe_detail):
    payload_schema(extraction_runs.get("with_compat"), extraction_runs.ids, extraction_runs.spec.dtype, probe_detail)


@pytest.mark.probe("write_completion", composite=True)
@pytest.mark.compat_mode("with_compat")
def test_write_completion_with_compat(extraction_runs, probe_detail):
    write_completion(extraction_runs.get("with_compat"), probe_detail)


@pytest.mark.probe("layer_numbering", composite=True)
@pytest.mark.compat_mode("with_compat")
def test_layer_numbering_with_compat(extraction_runs, reference_model, probe_detail):
    layer_numbering(extraction_runs.get("with_compat"), extraction_runs.ids, reference_model,
                    extraction_runs.spec.dtype, probe_detail)


@pytest.mark.probe("hidden_states_match_reference", data=True, composite=True)
@pytest.mark.compat_mode("with_compat")
@pytest.mark.parametrize("case", CASES)
def test_reference_with_compat(extraction_runs, reference_model, case, probe_detail):
    match_reference(extraction_runs.get("with_compat"), extraction_runs.ids, reference_model, case,
                    extraction_runs.spec.dtype, probe_detail)
