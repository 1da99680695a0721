"""README.md's shape: its two set-up commands come first, and no line is wider than 120 characters (a table row
that needs more becomes a list; tests/unit/test_docs.py holds its length, 200 lines)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
WIDTH = 120
SET_UP = ("pip install nox uv && nox -s compat", "pip install nox uv && nox -s tests",
          "pip install . && vllm-spec-compat check --speculators 0.8.0 --vllm 0.24.0")  # the installed command


def wide_lines(text: str) -> list[str]:
    return [f"line {n}: {len(line)} characters" for n, line in enumerate(text.splitlines(), 1) if len(line) > WIDTH]


def first_code_block(text: str) -> list[str]:
    match = re.search(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    return match[1].splitlines() if match else []


def test_no_readme_line_is_wider_than_120_characters():
    wide = wide_lines(README.read_text(encoding="utf-8"))
    assert not wide, f"README.md lines over {WIDTH} characters (reflow them; a wide table becomes a list): {wide}"


def test_the_readme_opens_with_its_set_up_commands_and_the_installed_one():
    commands = [line.split("#")[0].strip() for line in first_code_block(README.read_text(encoding="utf-8"))]
    assert commands == list(SET_UP), f"README.md's first code block is {commands}, not the set-up commands {SET_UP}"


def test_the_checks_see_a_wide_line_and_a_command_moved():
    assert wide_lines("short\n" + "x" * 121) == ["line 2: 121 characters"]
    assert first_code_block("# t\n\n```bash\nnox -s report\n```\n\n```bash\npip install nox uv && nox -s compat\n```") \
        == ["nox -s report"]
