"""A real `vllm serve` on 127.0.0.1: start on a free port, wait for /health, always stop.

The server runs in its own process group (API server, engine core and workers), so stopping it
kills the whole group. Its log is kept where the caller says (the cell's work dir).
Imports nothing from vLLM: the server is a subprocess of the cell's Python.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from compat.shared.tracebacks import headline, root_cause, silent_death

LOG_TAIL_LINES = 30
SAVE_SECONDS = 4.0  # after SIGUSR1, for every process of a recording server to write its coverage data


class ServerFailed(RuntimeError):
    """The server exited or never became ready; carries what its log says."""

    def __init__(self, message: str, log_tail: str, where: str | None = None):
        super().__init__(message)
        self.log_tail = log_tail
        self.where = where


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def failure_line(log_text: str, vllm_log: bool = True) -> str | None:
    """The most telling error line of a server log: the last stated error that is not a
    wrapper (EngineDeadError and friends), else a process's silent death, else the last stated
    error. `vllm_log=False` for another program's log (the speculators client's)."""
    return failure_site(log_text, vllm_log)[0]


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
CONTRACT_PACKAGES = ("vllm", "speculators", "hs_connectors")  # a name missing from these is a contract change
_INSPECTION_FAILED = re.compile(r"Model architectures \[[^\]]*\] failed to be inspected")
_INSPECTION_TRACE = "Error in inspecting model architecture"  # vLLM logs the subprocess's traceback after it
_MISSING_KERNEL = re.compile(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'")  # torch.ops.<lib>.<op>
_FRAME_FILE = re.compile(r'File "([^"]+)"')


def _inspection_missing_module(log_text: str) -> re.Match | None:
    """The last missing module in the traceback of vLLM's last failed model inspection."""
    start = log_text.rfind(_INSPECTION_TRACE)
    found = list(_MISSING_MODULE.finditer(log_text[start:])) if start >= 0 else []
    return found[-1] if found else None


def _called_from_vllm(log_text: str) -> bool:
    """Whether the frame that called into torch's op lookup, before the last missing-kernel error,
    is vLLM's own code (not speculators' or hs-connectors')."""
    end = log_text.rfind("'_OpNamespace'")
    files = [f for f in _FRAME_FILE.findall(log_text[:end]) if not f.endswith("torch/_ops.py")]
    return bool(files) and "/vllm/" in files[-1]


def environment_fault(cause: str | None, alive: bool, exc: Exception, log_text: str = "") -> str | None:
    """Why a server that did not serve says nothing about the contract, or None where it does;
    `cause` is its log's failure_line. A module the environment lacks outside vLLM, speculators
    and hs-connectors (an install fault, e.g. a dependency the CPU build's metadata omits), also
    where vLLM's model-inspection subprocess hit it and the server reports only the failed
    inspection; a server still alive that logged no error yet was not ready in time (a slow or
    overloaded machine); or a compiled kernel vLLM's own code calls and the build lacks (its
    extension library absent)."""
    missing = _MISSING_MODULE.search(cause or "")
    if not missing and _INSPECTION_FAILED.search(cause or ""):
        missing = _inspection_missing_module(log_text)
    if missing and missing.group(1).split(".")[0] not in CONTRACT_PACKAGES:
        return (f"the environment lacks the module {missing.group(1)!r} (not part of vLLM, speculators or "
                f"hs-connectors: an install fault, not the contract): {cause}")
    kernel = _MISSING_KERNEL.search(cause or "")
    if kernel and _called_from_vllm(log_text):
        return (f"this vLLM build lacks the compiled kernel torch.ops.{kernel.group(1)}.{kernel.group(2)} (its "
                f"extension library is missing or was built without it: an install fault, not the contract): {cause}")
    if alive and cause is None and "not ready within" in str(exc):
        return f"{exc}, still running and with no error in its log: too slow here, not a contract failure"
    return None


def vllm_frame(log_text: str) -> str | None:
    """vllm/...:line of the innermost vLLM frame of the traceback that ends in failure_line."""
    return failure_site(log_text)[1]


def failure_site(log_text: str, vllm_log: bool = True) -> tuple[str | None, str | None]:
    """The root cause's line and its innermost vLLM frame (compat.shared.tracebacks, the parser
    `nox -s explain` reads pastes with); in a vLLM log that holds only relays, the process that died
    without raising (`silent_death`: a SIGKILL, the out-of-memory killer's), where the log shows it."""
    cause = root_cause(log_text)
    if vllm_log and cause is not None and cause.wrapper:
        cause = silent_death(log_text) or cause
    return (headline(cause), cause.where) if cause else (None, None)


class VllmServer:
    """`python -m vllm.entrypoints.cli.main serve MODEL ARGS --host 127.0.0.1 --port P`."""

    def __init__(self, python: str, model: str, args: Sequence[str], log_path: Path,
                 env: dict[str, str] | None = None, ready_timeout: float = 420.0,
                 command: Sequence[str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.command = list(command) if command else [
            python, "-m", "vllm.entrypoints.cli.main", "serve", model, *args,
            "--host", "127.0.0.1", "--port", str(self.port)]
        self.env = env
        self.process: subprocess.Popen | None = None
        self.ready_seconds: float | None = None

    def __enter__(self) -> "VllmServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as log:
            log.write(f"$ {' '.join(self.command)}\n")
            log.flush()
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        started = time.monotonic()
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = round(time.monotonic() - started, 1)

    def _wait_ready(self, started: float) -> None:
        while True:
            if self.process.poll() is not None:
                raise self.failure(f"vllm serve exited {self.process.returncode} before it was ready")
            if self.healthy():
                return
            if time.monotonic() - started > self.ready_timeout:
                raise self.failure(f"vllm serve was not ready within {self.ready_timeout:.0f}s")
            time.sleep(1.0)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def failure(self, what: str) -> ServerFailed:
        text = self.log_text()
        cause = failure_line(text)
        return ServerFailed(f"{what}: {cause}" if cause else what, self.log_tail(), vllm_frame(text))

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace` seconds; waits for the leader. Where the cell records
        the code it executes (COVERAGE_PROCESS_START: compat.harness.executed), SIGUSR1 first: every process saves
        what it ran while it is alive (vLLM kills its engine core and workers without letting them exit)."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the group id is the leader's pid
        if (self.env or {}).get("COVERAGE_PROCESS_START") and self.process.poll() is None:
            try:
                os.killpg(pgid, signal.SIGUSR1)
                time.sleep(SAVE_SECONDS)
            except ProcessLookupError:
                pass
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            if _group_gone(pgid, self.process, wait):
                break
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _group_gone(pgid: int, leader: subprocess.Popen, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        leader.poll()  # reap the leader so it does not linger as a zombie of the group
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


# a model's load_weights that meets a checkpoint tensor it has no parameter for (official vLLM 0.24.0's Qwen3-Next
# loader on transformers 5's fused expert names): a warning, and the parameter keeps its uninitialised memory
_SKIPPED_WEIGHT = re.compile(r"Parameter (\S+) not found in params_dict, skip loading")


def skipped_weights(log_text: str) -> list[str]:
    """The checkpoint tensors vLLM said it skipped at load, each once, in order."""
    return list(dict.fromkeys(_SKIPPED_WEIGHT.findall(log_text)))


_V2_USED = re.compile(r"Using V2 Model Runner")
_V1_FALLBACK = re.compile(r"(Model Runner V2 [^;\n]*; using the V1 model runner instead\.?)")


def model_runner(log_text: str) -> dict[str, str]:
    """Which model runner served, as the server's log says: V2 when a worker logged "Using V2
    Model Runner"; V1 with vLLM's stated reason when it fell back ("Model Runner V2 requires
    Triton; using the V1 model runner instead."); else V1 (builds before V2 log nothing)."""
    if _V2_USED.search(log_text):
        return {"runner": "V2", "why": "the worker logged 'Using V2 Model Runner'"}
    fallback = _V1_FALLBACK.search(log_text)
    if fallback:
        return {"runner": "V1", "why": f"vLLM logged: {fallback.group(1)}"}
    return {"runner": "V1", "why": "no worker logged 'Using V2 Model Runner'"}
