"""`python -m compat run ...` (what `nox -s compat` calls): a row or a column of the support table
(`--all-vllm` / `--all-speculators`, compat.harness.support_run) or the matrix (compat.harness.runner),
both over the runner's options. The choice is made here so neither module imports the other back."""

from __future__ import annotations

from typing import Sequence

from compat.harness import runner
from compat.harness.support_run import run_support


def main(argv: Sequence[str]) -> int:
    try:
        options, rest = runner.runner_options(argv)
    except SystemExit as exc:  # argparse already printed which option was bad
        return 2 if exc.code else 0
    if (options.all_vllm or options.all_speculators) and not options.python:
        runner.stop_on_sigterm()
        return run_support(options, rest)
    return runner.run(options, rest)
