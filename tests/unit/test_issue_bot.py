"""The issue bot (.github/workflows/explain-issue.yml): on a new issue it runs compat.harness.issue_comment
on the event payload and posts what that writes. Tested offline on recorded `issues` events
(tests/unit/corpus/issue_events/): the comment for a known, a not-known and a no-exception issue, the
workflow as YAML, and the workflow's own two run steps executed with `gh` replaced by a recorder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compat.harness.issue_comment import MARKER, main

ROOT = Path(__file__).resolve().parents[2]
EVENTS = Path(__file__).parent / "corpus" / "issue_events"
WORKFLOW = ROOT / ".github" / "workflows" / "explain-issue.yml"
SCRIPT_RUN = 'python -m compat.harness.issue_comment "$GITHUB_EVENT_PATH" "$RUNNER_TEMP/comment.md"'


def write_comment(event: Path, tmp_path: Path) -> tuple[int, str | None]:
    out = tmp_path / "comment.md"
    code = main([str(event), str(out)])
    return code, out.read_text() if out.exists() else None


def test_a_known_breakage_gets_its_entry_range_and_fix(tmp_path):
    code, body = write_comment(EVENTS / "opened-known.json", tmp_path)
    assert code == 0 and body is not None
    assert body.startswith(MARKER) and "**Known breakage.**" in body
    assert "**`deepseek_final_layer`**" in body
    assert "applies to vLLM from 0.17.0 up to 0.25.0 (excluded), speculators >=0.5, observed on cpu, gpu" in body
    assert "fix: vLLM 0.25.0 or later" in body and "vllm-project/speculators#705" in body
    assert "RuntimeError: The expanded size of the tensor (6)" in body
    assert "Versions read from the issue: vLLM 0.23" in body and "speculators 0.6" in body


def test_an_unknown_error_is_said_to_be_unknown(tmp_path):
    code, body = write_comment(EVENTS / "opened-not-known.json", tmp_path)
    assert code == 0 and body is not None
    assert "**No known breakage matches**" in body and "Known breakage." not in body
    assert "AttributeError: 'ColumnParallelLinear' object has no attribute 'input_scale'" in body
    assert "  - no known breakage matches" in body and "**`" not in body


def test_a_vision_language_target_refused_by_speculative_config_is_known(tmp_path):
    """vllm#39017's paste (vLLM 0.18.0, Qwen2.5-VL): the registry's vlm_text_config since 2026-12-03."""
    code, body = write_comment(EVENTS / "opened-known-vlm.json", tmp_path)
    assert code == 0 and body is not None
    assert "Known breakage." in body and "`vlm_text_config`" in body, body
    assert "vLLM 0.18.0" in body


def test_an_issue_without_an_exception_gets_no_comment(tmp_path, capsys):
    code, body = write_comment(EVENTS / "opened-no-exception.json", tmp_path)
    assert code == 0 and body is None
    assert "no exception in issue #707: no comment" in capsys.readouterr().out


def test_the_event_is_read_from_a_real_shaped_payload():
    event = json.loads((EVENTS / "opened-known.json").read_text())
    assert event["action"] == "opened" and {"issue", "repository", "sender"} <= event.keys()
    assert {"number", "title", "body", "user", "html_url"} <= event["issue"].keys()


@pytest.mark.parametrize(("content", "says"), [
    (None, "No such file"),
    ("{not json", "Expecting property name"),
    ('{"action": "opened", "pull_request": {}}', "no 'issue' object"),
    ("[1, 2]", "a JSON object is expected"),
], ids=["missing", "not-json", "not-an-issue-event", "not-an-object"])
def test_a_bad_event_file_is_named_with_what_is_expected(tmp_path, capsys, content, says):
    event = tmp_path / "event.json"
    if content is not None:
        event.write_text(content)
    assert main([str(event), str(tmp_path / "comment.md")]) == 2
    err = capsys.readouterr().err
    assert str(event) in err and says in err and "'issues' event" in err
    assert not (tmp_path / "comment.md").exists()


def test_the_workflow_parses_and_only_calls_the_script_and_gh():
    flow = yaml.safe_load(WORKFLOW.read_text())
    trigger = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert trigger == {"issues": {"types": ["opened"]}}
    assert flow["permissions"] == {"contents": "read", "issues": "write"}
    steps = flow["jobs"]["explain"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert SCRIPT_RUN in runs
    post = next(r for r in runs if "gh issue comment" in r)
    assert '--body-file "$RUNNER_TEMP/comment.md"' in post
    assert runs.index(SCRIPT_RUN) < runs.index(post)
    # the issue's text reaches the script through the event file only, never a shell line
    for step in steps:
        assert "github.event.issue.body" not in json.dumps(step) and "github.event.issue.title" not in json.dumps(step)


def _run_steps(event: Path, tmp_path: Path) -> Path:
    """The workflow's two run steps in bash, `python` being this interpreter and `gh` a recorder."""
    flow = yaml.safe_load(WORKFLOW.read_text())
    steps = [s for s in flow["jobs"]["explain"]["steps"] if "run" in s and "pip install" not in s["run"]]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    calls = tmp_path / "gh-calls"
    (bin_dir / "gh").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{calls}"\n'
                                f'while [ $# -gt 0 ]; do [ "$1" = --body-file ] && cp "$2" "{tmp_path}/posted.md"; '
                                'shift; done\n')
    (bin_dir / "gh").chmod(0o755)
    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GITHUB_EVENT_PATH": str(event), "RUNNER_TEMP": str(runner_temp),
           "GITHUB_REPOSITORY": "vllm-project/speculators", "ISSUE": "705", "GH_TOKEN": "unused",
           "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    for step in steps:
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    return calls


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_the_workflow_steps_post_the_comment_and_skip_an_issue_without_an_exception(tmp_path):
    calls = _run_steps(EVENTS / "opened-known.json", tmp_path / "known")
    assert calls.read_text().splitlines()[:5] == ["issue", "comment", "705", "--repo", "vllm-project/speculators"]
    assert "**`deepseek_final_layer`**" in (tmp_path / "known" / "posted.md").read_text()
    calls = _run_steps(EVENTS / "opened-no-exception.json", tmp_path / "none")
    assert not calls.exists()
