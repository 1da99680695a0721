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

from compat.harness.published import load_rows
from compat.harness.refresh import stale_rows

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "support-refresh.yml"
RECORDED = Path(__file__).parent / "corpus" / "refresh" / "index-2026-12-02.json"


def test_a_row_is_stale_without_a_row_or_where_it_lacks_a_listed_vllm_release():
    rows = {"0.9.0": {"cells": [{"vllm": "0.32.0"}, {"vllm": "0.33.0"}]}, "0.8.1": {"cells": [{"vllm": "0.33.0"}]}}
    assert stale_rows(rows, ["0.33.0", "0.34.0"], ["0.8.1", "0.9.0", "0.10.0"]) == {
        "0.8.1": "its row lacks vLLM 0.34.0", "0.9.0": "its row lacks vLLM 0.34.0", "0.10.0": "no published row"}
    assert stale_rows(rows, ["0.32.0", "0.33.0"], ["0.9.0"]) == {}


def test_a_row_whose_measured_cells_ran_an_older_probe_set_is_stale():
    from compat.shared.manifest import PROBE_SET

    rows = {"0.9.0": {"cells": [{"vllm": "0.32.0", "provenance": "measured", "cell_id": "a"},
                                {"vllm": "0.31.0", "provenance": "inferred", "cell_id": "b"}]}}
    assert stale_rows(rows, ["0.32.0"], ["0.9.0"], {"a": PROBE_SET, "b": 0}) == {}
    assert "probe set 1" in stale_rows(rows, ["0.32.0"], ["0.9.0"], {"a": 1})["0.9.0"]


def test_list_cells_names_a_kept_cell_of_an_older_probe_set():
    from compat.harness.support_run import older_probe_set
    from compat.shared.manifest import PROBE_SET

    assert older_probe_set({"manifest": {"probe_set": PROBE_SET - 1}})
    assert older_probe_set({"manifest": {}})  # written before probe sets: set 0
    assert not older_probe_set({"manifest": {"probe_set": PROBE_SET}})


def _run_step(step_id: str, releases: Path, tmp_path: Path) -> dict[str, str]:
    """The workflow's step, its own `run:` text, in bash with `python` this interpreter."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["plan"]["steps"]
    script = next(s["run"] for s in steps if s.get("id") == step_id)
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
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
