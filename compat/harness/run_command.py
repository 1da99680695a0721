"""`python -m compat run ...` (what `nox -s compat` calls): its command line read once
(compat.harness.settings), then a row or a column of the support table (`--all-vllm` /
`--all-speculators`, compat.harness.support_run), the cells of existing environments (`--python`)
or the matrix (compat.harness.runner), each handed the same settings; and `command`, which
`python -m compat` calls with the subcommand (run, check, publish, refresh). The choice is made here
so neither module imports the other back."""

from __future__ import annotations

import sys
from typing import Sequence

from compat.harness import runner, settings
from compat.harness.matrix import MatrixError
from compat.harness.support_run import run_support
from compat.shared.neutral import neutral_terminal

USAGE = ("usage: python -m compat run [--vllm V ... --speculators S ...] [--list-cells] [--reinstall]\n"
         "       python -m compat check --speculators S --vllm V [--backend cpu|gpu] [--json]\n"
         "       python -m compat publish [--add RESULTS_DIR ...]\n"
         "       python -m compat refresh [--json]")


@neutral_terminal()  # what it prints from a log or a record: compat.shared.neutral
def command(argv: Sequence[str]) -> int:
    """`python -m compat COMMAND ...`: run (the matrix or a support row), check (one pair from the
    published table), publish (the published table's generated files), refresh (what it lacks)."""
    name, rest = (argv[0], list(argv[1:])) if argv else ("", [])
    if name == "run":
        return main(rest)
    if name == "check":
        from compat.harness.published import check_main

        return check_main(rest)
    if name == "publish":
        from compat.harness.published import main as publish_main

        return publish_main(rest)
    if name == "refresh":
        from compat.harness.refresh import main as refresh_main

        return refresh_main(rest)
    print(USAGE, file=sys.stderr)
    return 2


def main(argv: Sequence[str]) -> int:
    """`python -m compat run ARGS`: 0 pass, 1 a NEW breakage, 2 untested or a bad command line."""
    try:
        given = settings.parse(argv)
    except SystemExit as exc:  # --help (0)
        return 2 if exc.code else 0
    except MatrixError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    runner.stop_on_sigterm()
    if given.run.pythons:
        return runner.run_existing(given)
    if given.support is not None:
        return run_support(given)
    return runner.run(given)
