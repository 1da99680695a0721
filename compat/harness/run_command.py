"""`vllm-spec-compat run ...` (also `python -m compat run`, what `nox -s compat` calls): its command line
read once (compat.harness.settings), then a row or a column of the support table (`--all-vllm` /
`--all-speculators`, compat.harness.support_run), the cells of existing environments (`--python`) or the
matrix (compat.harness.runner), each handed the same settings. `command` is the old entry of
`python -m compat`: it forwards to compat.harness.cli, the one root parser of every command."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from compat.harness import exit_codes, runner, settings
from compat.harness.matrix import MatrixError
from compat.harness.settings import add_arguments
from compat.harness.support_run import run_support

__all__ = ["add_arguments", "command", "main", "run_args"]


def command(argv: Sequence[str]) -> int:
    """`python -m compat COMMAND ...`: compat.harness.cli.main (kept for callers of this name)."""
    from compat.harness.cli import main as cli_main

    return cli_main(argv)


def main(argv: Sequence[str]) -> int:
    """`python -m compat run ARGS`: 0 pass, 1 a NEW breakage, 2 untested, 64 a bad command line or matrix."""
    try:
        given = settings.parse(argv)
    except SystemExit as exc:  # --help (0)
        return exit_codes.from_system_exit(exc)
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    return _run(given)


def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`vllm-spec-compat run`, from its parsed command line."""
    try:
        given = settings.from_args(args)
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    return _run(given)


def _run(given: settings.Settings) -> int:
    runner.stop_on_sigterm()
    if given.run.pythons:
        return runner.run_existing(given)
    if given.support is not None:
        return run_support(given)
    return runner.run(given)
