"""The README stays short and the documentation stays true to the repository: every relative link
and every repository path named in backticks exists, every `nox -s X` is a session of noxfile.py,
and every `--option` written after one of our commands is an option that command's parser takes."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# Top-level names of this repository a documented path may start with.
REPO_TOPS = ("compat/", "tests/", "fixtures/", "docs/", "bench/", "reports/", ".github/", ".ci/", "noxfile.py",
             "pyproject.toml")
# What a run writes under reports/ (the committed runs live in its subfolders).
RUN_OUTPUTS = ("reports/compat.", "reports/compat-screenshot", "reports/junit/", "reports/compat-cells/",
               "reports/compat-comment.md", "published/compat-cells/")
NOX_SESSION = re.compile(r"nox -s ([\w-]+)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _relative(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES} are accepted: move detail into docs/")


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_relative_link_resolves_to_a_file_and_heading(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{_relative(page)}: " + "; ".join(broken)


def _repo_paths(text: str) -> set[str]:
    """Repository paths a page names in backticks (`compat/harness/verdict.py`, `tests/probes/`);
    placeholders (`results/<cell>.json`), globs and brace lists are not paths."""
    found = set()
    for span in CODE_SPAN.findall(text):
        for word in span.split():
            word = word.rstrip(".,;:)").split(":")[0]
            if word.startswith(REPO_TOPS) and not re.search(r"[<>{}*$]", word):
                found.add(word)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_repository_path_named_exists(page):
    missing = sorted(p for p in _repo_paths(page.read_text(encoding="utf-8"))
                     if not (ROOT / p).exists() and not p.startswith(RUN_OUTPUTS))
    assert not missing, f"{_relative(page)} names paths the repository does not have: {', '.join(missing)}"


def _nox_sessions() -> set[str]:
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    sessions = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr == "session":
                    sessions.add(node.name)
    return sessions


def test_the_noxfile_reader_finds_the_sessions():
    assert {"compat", "tests", "report", "explain", "kimi", "bisect"} <= _nox_sessions()


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_nox_session_named_exists(page):
    named = set(NOX_SESSION.findall(page.read_text(encoding="utf-8")))
    unknown = sorted(named - _nox_sessions())
    assert not unknown, (f"{_relative(page)} names nox session(s) {', '.join(unknown)}; noxfile.py has "
                         f"{', '.join(sorted(_nox_sessions()))}")


def _options_of(main, argv=("--help",)) -> set[str]:
    """Every option string of the argparse parsers a command's `main` builds while it reads `argv`."""
    parsers: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_known_args

    def recording(self, *args, **kwargs):
        parsers.append(self)
        return original(self, *args, **kwargs)

    sigterm = signal.getsignal(signal.SIGTERM)  # `compat run` installs its own handler
    argparse.ArgumentParser.parse_known_args = recording
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(SystemExit):
                main(list(argv))
    finally:
        argparse.ArgumentParser.parse_known_args = original
        signal.signal(signal.SIGTERM, sigterm)
    assert parsers, f"{main.__module__}.main read no argument parser"
    return {opt for p in parsers for action in p._actions for opt in action.option_strings} - {"-h", "--help"}


@pytest.fixture(scope="module")
def command_options() -> dict[str, set[str]]:
    """Each command of ours, keyed by the words that name it in the docs, with its parser's options."""
    from compat.harness import bisect_cli as bisect
    from compat.harness import check, cli, explain, kimi, report_cli, run_command

    run = _options_of(run_command.main)
    named = {"nox -s compat": run, "compat run": run,
             "nox -s report": _options_of(report_cli.main), "compat.report_cli": _options_of(report_cli.main),
             "nox -s explain": _options_of(explain.main), "nox -s bisect": _options_of(bisect.main),
             "nox -s kimi": _options_of(kimi.main), "compat.kimi": _options_of(kimi.main),
             "compat check": _options_of(check.main)}
    for name in cli.COMMANDS:  # the installed command's subcommands (issue 44)
        named[f"vllm-spec-compat {name}"] = _options_of(lambda argv, name=name: cli.main([name, *argv]))
    return named


def test_the_run_options_are_its_one_parsers(command_options):
    # `compat run` reads its cell selection, support rows, cell settings, run and output with one parser
    assert {"--vllm", "--only", "--list-cells", "--dtype", "--variants", "--no-static", "--all-vllm",
            "--results"} <= command_options["compat run"]


def _named_after_commands(text: str, commands) -> list[tuple[int, str, str]]:
    """(line number, command, option) for each `--option` written after a command on its line,
    up to the next command named on that line."""
    out = []
    marker = re.compile("|".join(re.escape(c) for c in sorted(commands, key=len, reverse=True)))
    for number, line in enumerate(text.splitlines(), 1):
        hits = list(marker.finditer(line))
        for hit, following in zip(hits, hits[1:] + [None]):
            segment = line[hit.end():following.start() if following else len(line)]
            out += [(number, hit[0], option) for option in OPTION.findall(segment)]
    return out


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_option_written_after_a_command_is_one_it_takes(page, command_options):
    wrong = [f"line {n}: {option} is not an option of `{command}` (it takes "
             f"{', '.join(sorted(command_options[command]))})"
             for n, command, option in _named_after_commands(page.read_text(encoding="utf-8"), command_options)
             if option not in command_options[command]]
    assert not wrong, f"{_relative(page)}:\n" + "\n".join(wrong)


def test_every_option_in_the_readme_is_one_of_our_commands(command_options):
    ours = set().union(*command_options.values())
    unknown = sorted(set(OPTION.findall(README.read_text(encoding="utf-8"))) - ours)
    assert not unknown, f"README.md names options no command of ours takes: {', '.join(unknown)}"


def test_the_readme_names_every_option_of_compat_run(command_options):
    named = set(OPTION.findall(README.read_text(encoding="utf-8")))
    missing = sorted(command_options["compat run"] - named)
    assert not missing, f"README.md's `nox -s compat` row lacks option(s) {', '.join(missing)}"


def test_the_option_reader_sees_a_wrong_option():
    text = "run `nox -s compat -- --vllm 0.16.0 --no-such-option` then `nox -s report -- --baseline x --vllm 1`"
    found = _named_after_commands(text, ["nox -s compat", "nox -s report"])
    assert found == [(1, "nox -s compat", "--vllm"), (1, "nox -s compat", "--no-such-option"),
                     (1, "nox -s report", "--baseline"), (1, "nox -s report", "--vllm")]


def test_the_slug_is_githubs():
    assert _slug("Bisect (`nox -s bisect`)") == "bisect-nox--s-bisect"
    assert _slug("Set up and run (a fresh Linux machine, no GPU needed)") == \
        "set-up-and-run-a-fresh-linux-machine-no-gpu-needed"
    assert _slug("Server-era cells (speculators ≥ 0.5)") == "server-era-cells-speculators--05"


def test_every_probe_has_its_row_in_the_probes_table():
    from compat.shared.probe_catalog import probes

    page = (ROOT / "docs" / "probes.md").read_text()
    rows = {m.group(1) for m in re.finditer(r"^\| `([\w\[\]-]+)`", page, re.M)}
    missing = sorted({p.id for p in probes()} - rows)
    assert not missing, f"docs/probes.md has no table row for probe(s) {missing}: add `| \\`id\\` | what is observed |`"
