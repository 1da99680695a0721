"""The reusable workflow another repository calls with its built speculators wheel
(.github/workflows/candidate.yml), run on recorded calls (tests/unit/corpus/candidate_events/): the
workflow's own `run:` steps in bash, `nox` replaced by a recorder that plays the recorded run (or runs the
real command where it answers at once), the `${{ }}` expressions read from the call. The job summary opens
with the answer and fits GitHub's 1 MiB; the job exits with the run's code (README, "Exit status").
Also compat.harness.job_summary on its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compat.harness import job_summary

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "candidate.yml"
EVENTS = Path(__file__).parent / "corpus" / "candidate_events"
LIMIT = 1024 * 1024

NOX_RECORDER = """#!{python}
import json, os, shutil, subprocess, sys
argv = sys.argv[1:]
with open(os.path.join(os.environ["RUNNER_TEMP"], "nox-argv.json"), "w") as handle:
    json.dump(argv, handle)
assert argv[:3] == ["-s", "compat", "--"], argv
recorded = os.environ.get("RECORDED_REPORT")
if recorded:
    os.makedirs("reports", exist_ok=True)
    shutil.copyfile(recorded, "reports/compat.md")
    sys.exit(int(os.environ["RECORDED_STATUS"]))
sys.exit(subprocess.call([sys.executable, "-m", "compat", "run", *argv[3:]]))
"""


def _flow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _expand(text: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if expression.startswith("inputs."):
            return inputs[expression.removeprefix("inputs.")]
        if expression.startswith("steps.run.outputs."):
            return outputs.get(expression.removeprefix("steps.run.outputs."), "")
        raise AssertionError(f"an expression this test does not evaluate: {expression}")
    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def run_call(event: Path, tmp_path: Path, report: Path | None = None) -> dict:
    """The job's run steps on one recorded call, in order, as the runner runs them (bash -eo pipefail;
    `if: always()` steps after a failure too). Returns each step's exit code, the summary, nox's argv."""
    call = json.loads(event.read_text())
    flow = _flow()
    job = flow["jobs"]["candidate"]
    inputs = {name: str(spec.get("default", "")) for name, spec in
              (flow[True] if True in flow else flow["on"])["workflow_call"]["inputs"].items()}
    inputs.update(call["inputs"])
    work, temp, bin_dir = tmp_path / "work", tmp_path / "runner-temp", tmp_path / "bin"
    for folder in (work, temp / "candidate", bin_dir):
        folder.mkdir(parents=True)
    for name in call["artifact"]:  # what actions/download-artifact puts there
        (temp / "candidate" / name).write_bytes(b"PK\x05\x06" + bytes(18))
    (bin_dir / "nox").write_text(NOX_RECORDER.format(python=sys.executable))
    (bin_dir / "nox").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    summary = tmp_path / "step-summary.md"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "RUNNER_TEMP": str(temp),
           "GITHUB_STEP_SUMMARY": str(summary), "PYTHONPATH": str(ROOT)}
    run = call.get("run")
    if isinstance(run, dict):
        env.update(RECORDED_REPORT=str(report or EVENTS / run["report"]), RECORDED_STATUS=str(run["status"]))
    env.update({k: _expand(str(v), inputs, {}) for k, v in (job.get("env") or {}).items()})
    outputs: dict[str, str] = {}
    codes: dict[str, int] = {}
    said: dict[str, str] = {}
    failed = False
    for step in job["steps"]:
        if "run" not in step:
            continue  # checkout, setup-python, download-artifact, upload-artifact: the runner's own actions
        name = step.get("id") or step.get("name") or step["run"].split()[0]
        if failed and "always()" not in str(step.get("if", "")):
            continue
        if step["run"].strip() == "pip install nox uv":
            continue
        output = tmp_path / f"output-{len(codes)}"
        output.write_text("")
        step_env = {**env, "GITHUB_OUTPUT": str(output),
                    **{k: _expand(str(v), inputs, outputs) for k, v in (step.get("env") or {}).items()}}
        assert "${{" not in step["run"], f"{name}: an expression in the script itself (inject it through env)"
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work,
                              env=step_env, capture_output=True, text=True)
        codes[name] = done.returncode
        said[name] = done.stdout + done.stderr
        failed = failed or done.returncode != 0
        if step.get("id") == "run":
            outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    argv_file = temp / "nox-argv.json"
    return {"codes": codes, "said": said, "outputs": outputs, "temp": temp,
            "summary": summary.read_text() if summary.exists() else "",
            "nox": json.loads(argv_file.read_text()) if argv_file.exists() else None}


def _gate(result: dict) -> tuple[int, str]:
    name = 'gate on the exit status (README, "Exit status")'
    return result["codes"][name], result["said"][name]


def test_the_recorded_candidate_run_writes_the_answer_first_and_the_job_exits_with_its_code(tmp_path):
    result = run_call(EVENTS / "called-range-0.31-0.32.json", tmp_path)
    wheel = str(result["temp"] / "candidate" / "speculators-0.9.1.dev0+compat-py3-none-any.whl")
    assert result["nox"] == ["-s", "compat", "--", "--speculators", wheel, "--vllm-range", "0.31.0..0.32.0",
                             "--variants", "none"]
    recorded = json.loads((EVENTS / "called-range-0.31-0.32.json").read_text())["run"]
    assert result["outputs"]["status"] == str(recorded["status"])
    summary = result["summary"]
    assert summary.startswith("**candidate speculators-0.9.1.dev0+compat-py3-none-any.whl against vLLM "
                              f"0.31.0..0.32.0: exit {recorded['status']}, "), summary[:300]
    first = summary.index("Candidate speculators 0.9.1.dev0+compat: the build speculators-0.9.1.dev0+compat-py3-"
                          "none-any.whl")
    assert first < summary.index("| speculators |") and "| 0.9.1.dev0+compat (candidate) |" in summary
    assert len(summary.encode()) <= LIMIT
    code, said = _gate(result)
    assert code == recorded["status"], said
    assert f"exit {recorded['status']}: nox -s compat -- --speculators speculators-0.9.1.dev0+compat" in said


def test_a_report_over_githubs_limit_is_cut_to_fit_the_answer_still_first(tmp_path):
    recorded = (EVENTS / "compat-0.9.1.dev0+compat.md").read_text()
    padding = "".join(f"| {i} | {'x' * 200} |\n" for i in range(20000))  # ~4 MB of table rows
    huge = tmp_path / "huge.md"
    huge.write_text(recorded + "\n| n | filler |\n|---|---|\n" + padding)
    assert len(huge.read_bytes()) > 3 * LIMIT
    result = run_call(EVENTS / "called-range-0.31-0.32.json", tmp_path / "run", report=huge)
    summary = result["summary"]
    assert len(summary.encode()) <= LIMIT
    assert "Candidate speculators 0.9.1.dev0+compat" in summary[:4000]
    assert summary.rstrip().endswith("the whole report: the candidate-reports artifact of this run._")


def test_an_artifact_of_two_wheels_runs_nothing_and_exits_with_the_usage_code(tmp_path):
    result = run_call(EVENTS / "called-two-wheels.json", tmp_path)
    assert result["nox"] is None and result["outputs"]["status"] == "64"
    assert "the artifact holds 2 speculators-*.whl files; expected exactly one" in result["said"]["run"]
    code, said = _gate(result)
    assert code == 64 and "::error::exit 64: the candidate artifact (2 speculators wheels): bad usage or input" in said
    assert result["summary"].startswith("**candidate speculators against vLLM 0.31.0..0.32.0: exit 64, ")
    assert "No report was written" in result["summary"]


def test_a_reversed_range_is_refused_by_the_real_command_with_the_usage_code(tmp_path):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    result = run_call(EVENTS / "called-reversed-range.json", tmp_path)
    assert result["outputs"]["status"] == "64", result["codes"]
    assert ("'0.32.0..0.25.0': 0.32.0 is after 0.25.0; expected two vLLM versions, the lower first"
            in result["said"]["run"])
    code, said = _gate(result)
    assert code == 64 and "::error::exit 64:" in said


def test_the_workflow_is_called_with_a_wheel_and_says_its_status():
    flow = _flow()
    triggers = flow[True] if True in flow else flow["on"]
    assert set(triggers) == {"workflow_call"}
    call = triggers["workflow_call"]
    assert call["inputs"]["wheel-artifact"]["required"] is True
    assert call["outputs"]["status"]["value"] == "${{ jobs.candidate.outputs.status }}"
    steps = flow["jobs"]["candidate"]["steps"]
    names = [s.get("name") or s.get("uses") or s.get("run") for s in steps]
    summary = next(i for i, n in enumerate(names) if str(n).startswith("the answer first"))
    upload = next(i for i, n in enumerate(names) if str(n).startswith("actions/upload-artifact"))
    assert summary < upload < len(steps) - 1 and names[-1] == 'gate on the exit status (README, "Exit status")'


def test_fit_keeps_whole_lines_a_tables_header_with_it_and_closes_what_it_opened():
    text = "# report\n\n<details>\n| a | b |\n|---|---|\n" + "".join(f"| {i} | x |\n" for i in range(100)) + \
        "</details>\n"
    out = job_summary.fit(text, 300, whole="the artifact")
    assert len(out.encode()) <= 300 and out.endswith("the whole report: the artifact._\n")
    body = out.split("\n\n_The report was cut")[0]
    assert body.count("<details>") == body.count("</details>") == 1
    assert all(line.startswith("| ") or line in ("# report", "", "<details>", "|---|---|", "</details>")
               for line in body.splitlines())
    assert job_summary.fit("short\n", 300) == "short\n"
    limit = 400
    intro = "i" * (limit - len(job_summary.cut_note(limit, "w").encode()) - len("\n| a | b |\n") - 2) + "\n"
    header_only = job_summary.fit(intro + "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 50, limit, "w")
    assert header_only.startswith(intro.rstrip()) and "| a | b |" not in header_only  # a lone header renders as text


def test_the_summary_says_the_status_first_and_a_missing_report(tmp_path):
    out = job_summary.summary(tmp_path / "none.md", 2, "candidate x")
    assert out.startswith("**candidate x: exit 2, something could not be tested")
    assert "No report was written" in out


def test_the_summary_command_exits_with_the_usage_code_on_a_bad_command_line(capsys):
    with pytest.raises(SystemExit) as exc:
        job_summary.main(["--status", "banana", "x.md"])
    assert exc.value.code == 64


def test_the_summary_of_recorded_statuses_says_each_commands_status_first(tmp_path):
    recorded = tmp_path / "exit-status"
    recorded.write_text("0 nox -s report, float32\n1 nox -s report, bfloat16\nbanana\n")
    (tmp_path / "compat.md").write_text("# the answer\n")
    out = job_summary.summary(tmp_path / "compat.md", None, "x", statuses=recorded)
    assert out.startswith("**nox -s report, float32: exit 0, ")
    assert "**nox -s report, bfloat16: exit 1, " in out and "no exit status: 'banana'" in out
    assert out.endswith("# the answer\n")
    assert "no exit status was recorded" in job_summary.summary(tmp_path / "compat.md", None, "x",
                                                                 statuses=tmp_path / "absent")
    with pytest.raises(SystemExit) as exc:  # one of the two, never both
        job_summary.main(["--status", "0", "--statuses", str(recorded), "x.md"])
    assert exc.value.code == 64

