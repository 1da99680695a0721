"""Sessions: `compat` runs the matrix (default), `tests` is what CI runs, `report` rebuilds reports,
`explain` matches a traceback against the registry, `kimi` the gated GPU suite, `bisect` the static
layer over every vLLM release for a speculators release."""

import re
import shutil
import sys

import nox
from nox.command import CommandFailed

nox.options.sessions = ["compat"]
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True

# The harness's own interpreter: 3.11 where it exists, else the first other supported one on PATH
# (a GPU image often has only its own 3.12); the cell venvs choose theirs from each recipe.
PYTHON = next((v for v in ("3.11", "3.12", "3.13", "3.10") if shutil.which(f"python{v}")), "3.11")


def install_harness(session, *extras):
    session.install("uv")
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def run_gated(session, *command):
    """`python -m compat SUBCOMMAND POSARGS` (the installed `vllm-spec-compat SUBCOMMAND`); nox exits with its
    status unchanged (README, "Exit status"), 64 (a bad command line) included.

    Left alone, nox turns any failing command into its own exit 1. A SystemExit raised in a
    session passes through nox's runner (it catches Exception), so nox stops there with the code;
    sessions named after this one on the same command line do not run.
    """
    try:
        session.run("python", "-m", *command, *session.posargs)
    except CommandFailed as failed:
        # recent nox (2026.8.10) sets CommandFailed.return_code; older (2025.11.12) only says "Returned code N"
        code = getattr(failed, "return_code", None)
        if code is None and (said := re.fullmatch(r"Returned code (-?\d+)", str(failed))):
            code = int(said[1])
        if code is None:  # not the command's status (e.g. an external program refused)
            raise
        code = code if code > 0 else 128 - code  # killed by signal N: the shell's 128+N
        session.log(f"nox exits {code}, the status of python -m {' '.join(command)}")
        sys.exit(code)


@nox.session(python=PYTHON)
def compat(session):
    """The (vLLM, speculators) matrix on this machine: `nox -s compat -- --vllm V --speculators S`."""
    install_harness(session)
    run_gated(session, "compat", "run")


@nox.session(python=PYTHON)
def report(session):
    """Rebuild reports/ from the results store (results/ imported first) without running anything:
    `-- --baseline OLD.json`, `-- --import DIR`, `-- --export DIR`, `-- --store PATH`."""
    install_harness(session)
    run_gated(session, "compat", "report")


@nox.session(python=PYTHON)
def explain(session):
    """Which known breakage is this? `nox -s explain -- FILE` (a traceback, a log, a result file) or stdin."""
    install_harness(session)
    run_gated(session, "compat", "explain")


@nox.session(python=PYTHON)
def bisect(session):
    """Each contract of a speculators release over every vLLM release (static layer), its flips and
    the support table: `nox -s bisect -- --speculators 0.3.0 [--probe request_signature] [--confirm]`."""
    install_harness(session)
    run_gated(session, "compat", "bisect")


@nox.session(python=PYTHON)
def kimi(session):
    """The gated Kimi-K2.5 suite: `nox -s kimi -- --model PATH --tp 8`; `-- --scale-model` on CPU."""
    install_harness(session, "test")
    run_gated(session, "compat", "kimi")


@nox.session(python=PYTHON)
def lint(session):
    """ruff over the repository and mypy (strict on compat/shared and compat/harness), pinned; CI runs it first."""
    install_harness(session)
    session.install("ruff==0.17.6", "mypy==2.4.1")
    session.run("ruff", "check", ".")
    session.run("mypy")


@nox.session(python=PYTHON)
def tests(session):
    """What CI runs: our unit tests, the default matrix for real, then checks of what it found
    and of the report it wrote (in a real browser when chromium is installed)."""
    install_harness(session, "test")
    session.run("pytest", "tests/unit")
    session.run("python", "-m", "compat", "run", success_codes=[0, 1, 2])
    session.run("python", "-m", "compat.kimi")  # no GPU here: every test skipped, with the reason
    session.run("python", "-m", "compat.kimi", "--scale-model")  # replaces that results/kimi.json
    # The Kimi-shaped builder's tests and the cell-side checks' need torch and transformers: in the cell interpreter
    # just used.
    cell_python = session.run("python", "-c", "from compat.harness.kimi import default_cell_python; "
                              "print(default_cell_python())", silent=True).strip().splitlines()[-1]
    session.run(cell_python, "-m", "pytest", "-p", "no:cacheprovider", "--strict-markers", "tests/builder",
                "tests/cell", external=True)
    session.run("pytest", "tests/integration", "tests/browser", env={"COMPAT_REPORT_RESULTS": "results"})
