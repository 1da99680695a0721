"""Every command's exit status, in one table (README, "Exit status"; tests/unit/test_cli.py holds a
test per row).

One code, USAGE (64, sysexits.h's EX_USAGE), means a bad command line or bad input for every command: an
unknown option, a value that is not a version, an unknown release, a file that cannot be read as the input
it was given as. It is none of any command's outcome codes, so a caller can always tell "I asked wrongly"
from "the answer is no" or "nobody knows yet".
"""

from __future__ import annotations

USAGE = 64

# run and report: the gate of compat.harness.verdict over their cells (the worst cell wins)
PASS, NEW, UNTESTED, UNREADABLE = 0, 1, 2, 3

# check: one pair from the published table
WORKS, BROKEN, CHECK_UNTESTED, ADAPTERS = 0, 1, 2, 3
CHECK = {"works": WORKS, "broken": BROKEN, "untested": CHECK_UNTESTED, "adapters": ADAPTERS}

# command -> code -> what it means (the README's table says the same, row by row)
TABLE: dict[str, dict[int, str]] = {
    "run": {PASS: "every deciding probe ran; every failure is a known breakage",
            NEW: "a NEW breakage or an adapter regression",
            UNTESTED: "something could not be tested (or no cell at all)",
            USAGE: "a bad command line or matrix, an unknown release"},
    "report": {PASS: "as run", NEW: "as run", UNTESTED: "as run",
               UNREADABLE: "a result file could not be read or fails the record schema, or none at all",
               USAGE: "a bad command line"},
    "check": {WORKS: "works as released", BROKEN: "broken (the line says what to install instead)",
              CHECK_UNTESTED: "untested, or not in the published table",
              ADAPTERS: "works only with the compat adapters (the line says how to apply them)",
              USAGE: "a bad command line, a value that is not a version, no vllm or speculators installed"},
    "explain": {0: "every exception is a known breakage", 1: "one is not known (or a compiled-code crash)",
                2: "no exception found", USAGE: "a bad command line or an unreadable file"},
    "bisect": {0: "the registry and the runtime agree with the flips", 1: "one disagrees",
               2: "a release's wheel could not be read", USAGE: "a bad command line, an unknown release or probe"},
    "kimi": {0: "passed, or skipped (a closed gate)", 1: "a check failed or the suite could not run",
             2: "the suite's environment or model could not be prepared (an install, a plan that does not fit)",
             USAGE: "a bad command line or model path"},
    "publish": {0: "the generated files written", 2: "a published or added record could not be read",
                USAGE: "a bad command line"},
    "refresh": {0: "the stale rows listed", USAGE: "a bad command line"},
}


def from_system_exit(exc: SystemExit) -> int:
    """The status a SystemExit carries (argparse's --help: 0; our parsers' errors: USAGE)."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else USAGE
