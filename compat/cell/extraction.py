"""What speculators >= 0.5 asks of vLLM: the `vllm serve` configuration its launch script builds,
and its own data-generation client run against that server.

Launch: speculators' scripts/launch_vllm.py (repository only, 0.5.0-0.9.0) execs
`python -m vllm.entrypoints.cli.main serve MODEL --speculative_config J --kv_transfer_config J ...`
with the JSON below; 0.6.x/0.7.x also append --no-enable-chunked-prefill. Client: 0.8.0+ ships
the CLI `speculators prepare-data` + `generate-offline-data`; 0.5-0.7 only the module
speculators.data_generation.vllm_client (the repository's scripts wrap it).
Imports nothing from vLLM; the client parts import speculators only when run.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from packaging.version import Version

from compat.cell.server import failure_line

SERVE_FLAGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "256")
SHIM_MODULE = "compat.worker.cpu_connector_shim"
NO_CHUNKED_PREFILL = "--no-enable-chunked-prefill"
NO_PREFIX_CACHING = "--no-enable-prefix-caching"


def layer_ids(num_layers: int) -> list[int]:
    """Distinct ids that include num_layers (pre-norm): [1, 3, 5, 6] for 6 layers."""
    return sorted({1, num_layers // 2, num_layers - 1, num_layers})


def launch_flags_of(speculators: str) -> tuple[str, ...]:
    """Flags the release's launch_vllm.py appends itself."""
    v = Version(speculators)
    return (NO_CHUNKED_PREFILL,) if Version("0.6") <= v < Version("0.8") else ()


def serve_args(speculators: str, ids: Sequence[int], storage: Path, *, shim: bool = False,
               connector_module: str | None = None, extra_flags: Sequence[str] = (), dtype: str | None = None,
               gpu_memory_utilization: float | None = None, environment_args: Sequence[str] = ()) -> list[str]:
    """`vllm serve` arguments as the release's launch script builds them, plus `extra_flags`
    (chosen by the harness from what a run observed, or a variant's own), the cell's GPU memory
    fraction and `environment_args` (the cell spec's serve_args) where given, and our fixed
    dtype/length flags (`dtype`: the cell's or a variant's; float32 when None; a variant's --max-model-len wins).
    `connector_module`: the kv_connector_module_path that replaces the CPU shim's (the workload's observer, whose
    class is the shim's)."""
    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(ids)}}}
    transfer = dict(launch_transfer_config(speculators, storage)[0])
    if shim or connector_module:
        transfer["kv_connector_module_path"] = connector_module or SHIM_MODULE
    flags = list(launch_flags_of(speculators))
    flags += [flag for flag in extra_flags if flag not in flags]
    if gpu_memory_utilization is not None:  # the runner's --gpu-memory-utilization
        flags += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    # the environment's own needs, e.g. --attention-backend TRITON_ATTN for a build without FlashAttention
    flags += list(environment_args)
    fixed = list(SERVE_FLAGS)
    if dtype:
        fixed[fixed.index("--dtype") + 1] = dtype
    if "--max-model-len" in flags:  # a variant's own context replaces ours (argparse keeps the last one given)
        at = fixed.index("--max-model-len")
        del fixed[at:at + 2]
    return ["--speculative_config", json.dumps(speculative), "--kv_transfer_config", json.dumps(transfer),
            *flags, *fixed]


BUILT_IN_TRANSFER = ("speculators' launch_vllm.py inline: ExampleHiddenStatesConnector (releases before the backend "
                     "registry)")


def launch_transfer_config(speculators: str, storage: Path) -> tuple[dict, str]:
    """The kv_transfer_config the release's launch_vllm.py builds with its default backend, and
    where it came from. From 0.7 the launch asks a hidden-states backend registry (0.7: vendored
    speculators._vendor.hs_connectors; 0.8+: the hs-connectors package installed with it) for the
    `file` backend's config; before that, and where no registry imports, the inline config."""
    for module in ("hs_connectors", "speculators._vendor.hs_connectors"):
        if Version(speculators) < Version("0.7"):
            break
        try:
            registry = importlib.import_module(module).HiddenStatesBackend.registry
        except (ImportError, AttributeError):
            continue
        if "file" in registry:
            config = registry["file"].build_kv_transfer_config(argparse.Namespace(hidden_states_path=str(storage)))
            return config, f"{module}: HiddenStatesBackend.registry['file'] ({registry['file'].__qualname__})"
    return ({"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
             "kv_connector_extra_config": {"shared_storage_path": str(storage)}}, BUILT_IN_TRANSFER)


def has_cli(speculators: str) -> bool:
    return Version(speculators) >= Version("0.8")


class ClientFailed(RuntimeError):
    """The speculators client exited non-zero or raised; message = its last words."""


def write_rows(path: Path, prompts: Sequence[Sequence[int]]) -> None:
    """Speculator-format rows: prepare-data passes input_ids + loss_mask through untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"input_ids": list(p), "loss_mask": [1] * len(p)}) + "\n"
                            for p in prompts))


class ResidentCli:
    """speculators' CLI in one process for the cell (compat.cell.speculators_cli): torch and speculators
    imported once, not once a command. Commands run in the order submitted; `wait` for each. A command that
    kills the process or hangs fails alone: the process is started again with the commands after it.
    Its own log (`log`) keeps what the process says outside a command (an import that fails)."""

    def __init__(self, log: Path, command: Sequence[str] = (sys.executable, "-m", "compat.cell.speculators_cli")):
        self.log, self.command = log, list(command)
        self.process: subprocess.Popen | None = None
        self.commands: list[bytes] = []
        self.codes: list[int] = []  # the answers, in order; 124: timed out, negative: killed by a signal
        self.pending = b""
        atexit.register(self.close)

    def submit(self, argv: Sequence[str], log: Path) -> int:
        self.commands.append((json.dumps({"argv": list(argv), "log": str(log)}) + "\n").encode())
        if self.process is None or self.process.poll() is not None:
            self._start()
        else:
            self._send(self.commands[-1:])
        return len(self.commands) - 1

    def wait(self, ticket: int, timeout: float, what: str, log: Path) -> None:
        """Until the command `ticket` has run; ClientFailed (its log's last words) where it did not exit 0,
        did not finish in `timeout` seconds after it began, or killed the process."""
        deadline, running = time.monotonic() + timeout, len(self.codes)
        while len(self.codes) <= ticket:
            if len(self.codes) != running:  # the command before it finished: its own time begins
                deadline, running = time.monotonic() + timeout, len(self.codes)
            assert self.process is not None and self.process.stdout is not None
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self._restart_after(124)
                continue
            chunk = os.read(self.process.stdout.fileno(), 4096)  # unbuffered: select sees what is left
            if not chunk:
                self._restart_after(self.process.wait() or 1)
                continue
            *lines, self.pending = (self.pending + chunk).split(b"\n")
            self.codes += [int(json.loads(line)["code"]) for line in lines if line.strip()]
        code = self.codes[ticket]
        if code == 124:
            raise ClientFailed(f"{what} did not finish within {timeout:.0f}s: {last_words(log)}")
        if code != 0:
            words = last_words(log) if log.exists() else last_words(self.log)
            raise ClientFailed(f"{what} exited {code}: {words}")

    def _restart_after(self, code: int) -> None:
        """The running command failed with `code` and took the process with it: the rest go to a new one."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.codes.append(code)
        self._start()

    def _start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as handle:
            # rich wraps tracebacks at the terminal width (80 without a tty); keep lines whole
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=handle,
                                            env={**os.environ, "COLUMNS": "400"})
        self.pending = b""
        self._send(self.commands[len(self.codes):])

    def _send(self, commands: list[bytes]) -> None:
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(b"".join(commands))
            self.process.stdin.flush()
        except BrokenPipeError:  # it died: the next wait reads its end and starts it again
            pass

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.stdin:
                process.stdin.close()
            process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()


def prepare_data(cli: ResidentCli, model: str, rows: Path, output: Path, log: Path, extra: Sequence[str] = ()) -> int:
    """Submitted, not waited for: it needs no server, so it runs while the server boots."""
    return cli.submit(["prepare-data", "--model", model, "--data", str(rows), "--output", str(output),
                       "--seq-length", "256", "--overwrite", *extra], log)


def generate_offline_data(cli: ResidentCli, model: str, endpoint: str, prepared: Path, output: Path, log: Path,
                          concurrency: int, timeout: float = 240.0) -> float:
    started = time.monotonic()
    ticket = cli.submit(["generate-offline-data", "--model", model, "--endpoint", endpoint,
                         "--preprocessed-data", str(prepared), "--output", str(output),
                         "--concurrency", str(concurrency), "--validate-outputs", "--fail-on-error"], log)
    cli.wait(ticket, timeout, "speculators generate-offline-data", log)
    return round(time.monotonic() - started, 1)


def last_words(log: Path, lines: int = 2) -> str:
    """The error the client states, else its last lines."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    stated = failure_line(text, vllm_log=False)
    if stated:
        return stated[:500]
    return " | ".join(line.strip()[:300] for line in text.splitlines() if line.strip())[-600:]


def read_prepared(prepared: Path) -> list[list[int]]:
    """input_ids of the prepared dataset, in its row order (prepare-data shuffles)."""
    from datasets import load_from_disk

    return [list(map(int, row)) for row in load_from_disk(str(prepared))["input_ids"]]


def module_client(speculators: str, model: str, endpoint: str, prompts: Sequence[Sequence[int]],
                  output: Path, messages: Sequence[list[dict]] | None = None, deadline: float | None = None) -> None:
    """0.5-0.7: speculators.data_generation.vllm_client, as the release's offline script uses it:
    one completion per prompt, wait for the .lock (0.6+), move the file to hs_<i>.safetensors. With
    `messages` (one conversation per prompt, where the client takes them: chat_client_missing), each
    prompt goes through Chat Completions instead, and the client checks vLLM's rendering against its ids.
    `deadline`: one attempt per prompt of at most that many seconds, where the client takes the options."""
    import inspect

    import openai
    from speculators.data_generation import vllm_client

    client = openai.Client(base_url=endpoint, api_key="EMPTY")
    takes_item = Version(speculators) >= Version("0.6")
    generate = vllm_client.generate_hidden_states
    options: dict[str, float] = {}
    if deadline is not None:
        outer = inspect.signature(generate).parameters
        inner = inspect.signature(getattr(generate, "__wrapped__", generate)).parameters
        options.update({"max_retries": 0} if "max_retries" in outer else {})
        options.update({"timeout": deadline} if "timeout" in inner or "timeout" in outer else {})
    output.mkdir(parents=True, exist_ok=True)
    for i, ids in enumerate(prompts):
        item = {"input_ids": list(ids), **({"messages": messages[i]} if messages else {})}
        reply = generate(client, model, item if takes_item else list(ids), **options)
        path = reply[0] if isinstance(reply, tuple) else reply
        if hasattr(vllm_client, "wait_for_lock") and Path(path + ".lock").exists():
            vllm_client.wait_for_lock(path + ".lock")
        shutil.move(path, output / f"hs_{i}.safetensors")


def client_refusals() -> tuple[type[BaseException], ...]:
    """What the release's client raises when vLLM's reply is wrong or the request fails: its
    InvalidResponseError, openai's API errors, a timeout. Anything else is our side."""
    import openai
    from speculators.data_generation import vllm_client

    own = getattr(vllm_client, "InvalidResponseError", None)
    return (openai.APIError, TimeoutError, *([own] if isinstance(own, type) else []))


def chat_client_missing(speculators: str) -> str | None:
    """Why this speculators release's client cannot send a conversation (an image), or None where it can
    (its ClientItem has `messages`: the Chat Completions path)."""
    from speculators.data_generation import vllm_client

    item = getattr(vllm_client, "ClientItem", None)
    if item is None or "messages" not in getattr(item, "__annotations__", {}):
        return (f"speculators {speculators}'s client sends token ids only (no ClientItem.messages): it has no way "
                "to send an image")
    return None
