"""`nox -s kimi`: the gated Kimi-K2.5 extraction suite (tests/kimi) in one cell environment.

    python -m compat.kimi [--vllm V --speculators S] [--model PATH | env COMPAT_KIMI_MODEL]
                          [--tp N] [--scale-model] [--results DIR] [--reports DIR]

The gate: the suite runs only with a model path and at least --tp visible GPUs; otherwise it is
still collected, every test reports `skipped` with the reason, and the exit status is 0.
--scale-model runs it on the tiny DeepseekV3 fixture on CPU at TP=2 instead (no gate), with
VLLM_MLA_DISABLE=1 as the one difference from the GPU run, and compares with transformers.

Writes <results>/kimi.json (the "kimi" section) and re-renders <reports>/ from every result
file in <results>. kimi.json keys:
    status            ok | failed | skipped | error
    reason            why skipped / failed / error (None when ok)
    vllm, speculators, backend, cell, model, scale_model, tp, layers, num_hidden_layers,
    hidden_size, visible_gpus, gpu_count_source, env, seconds {install, suite},
    difference_from_gpu_run (scale model only),
    load_seconds, tokens_per_second, peak_gpu_memory_bytes {rank: bytes} or None,
    peak_gpu_memory_note, max_abs_error_vs_reference (scale model only),
    probes            one record per test, as in a cell (compat.pytest_plugin)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from compat.envs import REPO_ROOT

DEFAULT_VLLM = "0.16.0"  # the seeds' pair
DEFAULT_SPECULATORS = "0.3.0"
DEFAULT_TP = 8
SCALE_TP = 2
MODEL_VARIABLE = "COMPAT_KIMI_MODEL"
SUITE = "tests/kimi"
MLA_NOTE = ("VLLM_MLA_DISABLE=1: vLLM's CPU build has no MLA attention backend, so the scale model "
            "runs DeepSeek attention with the MLA weights expanded to plain multi-head attention; "
            "the GPU run uses MLA")
FIGURE_KEYS = ("load_seconds", "tokens_per_second", "tokens", "sequences", "peak_gpu_memory_bytes",
               "peak_gpu_memory_note", "max_abs_error_vs_reference", "adapters", "env_shims")


class KimiError(ValueError):
    """A bad option or model folder; the message names it and what was expected."""


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    num_hidden_layers: int
    hidden_size: int
    layers: tuple[int, ...]


def parse_options(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s kimi --", description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default=DEFAULT_VLLM, help=f"vLLM version (default {DEFAULT_VLLM})")
    parser.add_argument("--speculators", default=DEFAULT_SPECULATORS,
                        help=f"speculators version (default {DEFAULT_SPECULATORS})")
    parser.add_argument("--backend", choices=("cpu", "gpu"), default=None,
                        help="default: gpu when nvidia-smi lists GPUs, else cpu; cpu with --scale-model")
    parser.add_argument("--model", type=Path, default=None,
                        help=f"Kimi-K2.5 model folder (default: ${MODEL_VARIABLE})")
    parser.add_argument("--tp", type=int, default=None,
                        help=f"tensor-parallel size (default {DEFAULT_TP}; {SCALE_TP} with --scale-model)")
    parser.add_argument("--scale-model", action="store_true",
                        help="the tiny DeepseekV3 fixture on CPU at TP=2, compared with transformers")
    parser.add_argument("--results", type=Path, default=REPO_ROOT / "results",
                        help="folder for kimi.json and the suite's log (default: results/)")
    parser.add_argument("--reports", type=Path, default=REPO_ROOT / "reports",
                        help="folder for compat.json/html/md (default: reports/)")
    parser.add_argument("--reinstall", action="store_true", help="rebuild the cell venv")
    parser.add_argument("--timeout", type=int, default=5400,
                        help="seconds for the whole suite (default 5400: Kimi loads in ~20-23 min)")
    options = parser.parse_args(list(argv))
    if options.tp is not None and options.tp < 1:
        parser.error(f"--tp {options.tp}: expected a positive number of GPUs")
    if options.scale_model and options.model is not None:
        parser.error("--scale-model and --model are alternatives: the scale model is built by fixtures/")
    if options.tp is None:
        options.tp = SCALE_TP if options.scale_model else DEFAULT_TP
    if options.model is None and not options.scale_model and os.environ.get(MODEL_VARIABLE):
        options.model = Path(os.environ[MODEL_VARIABLE])
    return options


def default_layers(num_layers: int) -> tuple[int, ...]:
    """speculators' default: [2, n//2, n-3, n-1] (61 layers -> 2, 30, 58, 60)."""
    return (2, num_layers // 2, num_layers - 3, num_layers - 1)


def text_config(config: dict) -> dict:
    """Kimi-K2.5 is a vision-language wrapper; its DeepseekV3 settings sit in text_config."""
    return config if "num_hidden_layers" in config else config.get("text_config") or {}


def check_model(path: Path) -> ModelInfo:
    """The model folder's layer count and hidden size, or a KimiError saying what is wrong."""
    expected = ("expected a Hugging Face model folder whose config.json gives num_hidden_layers and "
                "hidden_size (top level or text_config); the suite reads layers [2, n//2, n-3, n-1], "
                "for Kimi-K2.5's 61 layers 2, 30, 58, 60")
    config_file = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise KimiError(f"model path {path} is not a folder; {expected}")
    try:
        config = json.loads(config_file.read_text())
    except OSError:
        raise KimiError(f"model path {path} has no readable config.json; {expected}") from None
    except json.JSONDecodeError as exc:
        raise KimiError(f"{config_file} is not valid JSON ({exc.msg}, line {exc.lineno}); {expected}") from None
    text = text_config(config)
    layers, hidden = text.get("num_hidden_layers"), text.get("hidden_size")
    if not isinstance(layers, int) or not isinstance(hidden, int):
        raise KimiError(f"{config_file} gives num_hidden_layers={layers!r}, hidden_size={hidden!r}; {expected}")
    wanted = default_layers(layers)
    if len(set(wanted)) < len(wanted) or min(wanted) < 0:
        raise KimiError(f"{config_file}: {layers} layers give layers {list(wanted)}, not four distinct "
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


def host_gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without nvidia-smi); CUDA_VISIBLE_DEVICES narrows them."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    listed = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return min(listed, len([d for d in visible.split(",") if d.strip()]))
    return listed


def cell_gpu_count(python: Path) -> int:
    """torch.cuda.device_count() inside the cell venv: what vLLM will see."""
    out = subprocess.run([str(python), "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def peak_gpu_memory(worker=None) -> int | None:
    """Run in each vLLM worker through collective_rpc: this rank's peak allocated bytes."""
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


def suite_environment(info: ModelInfo | None, tp: int, scale: bool, skip: str | None) -> dict[str, str]:
    """What tests/kimi/conftest.py reads."""
    env = {"COMPAT_KIMI_TP": str(tp), "COMPAT_KIMI_SCALE": "1" if scale else ""}
    if skip:
        env["COMPAT_KIMI_SKIP"] = skip
    if info is not None:
        env.update({MODEL_VARIABLE: str(info.path), "COMPAT_KIMI_LAYERS": ",".join(map(str, info.layers)),
                    "COMPAT_KIMI_HIDDEN": str(info.hidden_size)})
    return env


def suite_status(probes: list[dict[str, Any]], error: str | None) -> tuple[str, str | None]:
    """ok when every test passed; skipped when all skipped (with their reason); else failed."""
    statuses = {p["status"] for p in probes}
    if error or not probes:
        return "error", error or "the suite reported no tests"
    if statuses <= {"skipped", "n/a"}:
        return "skipped", probes[0].get("reason")
    bad = [p for p in probes if p["status"] not in ("ok", "n/a")]
    if bad:
        return "failed", "; ".join(f"{p['id']}: {p['status']}" for p in bad)
    return "ok", None


def figures(probes: list[dict[str, Any]]) -> dict[str, Any]:
    """The numbers the tests put in their detail, lifted to the section's top level."""
    found: dict[str, Any] = {}
    for probe in probes:
        for key, value in (probe.get("detail") or {}).items():
            if key in FIGURE_KEYS and key not in found:
                found[key] = value
    return found


def main(argv: Sequence[str]) -> int:
    try:
        options = parse_options(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    record: dict[str, Any] = {"status": "error", "reason": None, "vllm": options.vllm,
                              "speculators": options.speculators, "scale_model": options.scale_model,
                              "tp": options.tp, "model": None}
    try:
        code = run(options, record)
    except KimiError as exc:
        record.update(status="error", reason=str(exc))
        print(f"kimi: {exc}", file=sys.stderr)
        code = 2
    finish(record, options)
    return code


def run(options: argparse.Namespace, record: dict[str, Any]) -> int:
    from compat.cell_run import run_probes
    from compat.envs import CellEnv, InstallError, ensure_env
    from compat.matrix import Cell, MatrixError, check_released
    from compat.pypi import PackageIndex, PackageIndexError
    from compat.recipe import RecipeError, derive_recipe

    info = None
    if options.scale_model:
        from fixtures import tiny_deepseek

        info = check_model(tiny_deepseek.ensure())
        record["difference_from_gpu_run"] = MLA_NOTE
    elif options.model is not None:
        info = check_model(options.model)
    host_gpus = host_gpu_count()
    backend = options.backend or ("cpu" if options.scale_model or not host_gpus else "gpu")
    cell = Cell(options.vllm, options.speculators, backend)
    record.update(backend=backend, cell=cell.id, visible_gpus=host_gpus, gpu_count_source="nvidia-smi -L")
    if info is not None:
        record.update(model=str(info.path), layers=list(info.layers),
                      num_hidden_layers=info.num_hidden_layers, hidden_size=info.hidden_size)
    skip = None if options.scale_model else gate_reason(info and info.path, options.tp, host_gpus,
                                                        "nvidia-smi -L")
    work_dir = options.results / "kimi"
    work_dir.mkdir(parents=True, exist_ok=True)
    env = None
    if skip is None or not _has_pytest():
        try:
            index = PackageIndex()
            check_released([cell], index)
            recipe = derive_recipe(cell, index)
            print(f"[kimi] {cell.id}: preparing the cell environment", flush=True)
            env = ensure_env(cell, recipe, work_dir / "install.log", reinstall=options.reinstall)
        except (MatrixError, PackageIndexError, RecipeError) as exc:
            raise KimiError(f"cell {cell.id}: {exc}") from None
        except InstallError as exc:
            raise KimiError(f"cell {cell.id}: install failed: {exc}\n{exc.log_tail}") from None
        record["env"] = {k: env.info.get(k) for k in ("python", "torch", "transformers", "vllm_dist", "speculators")}
        record["seconds"] = {"install": env.seconds}
        if skip is None and not options.scale_model:
            gpus = cell_gpu_count(env.python)
            record.update(visible_gpus=gpus, gpu_count_source="torch.cuda.device_count() in the cell venv")
            skip = gate_reason(info.path, options.tp, gpus, "torch.cuda.device_count() in the cell venv")
    if skip is not None and _has_pytest():
        env = CellEnv(path=Path(sys.prefix), python=Path(sys.executable), seconds=0.0, reused=True)
    print(f"[kimi] {'skipping every test: ' + skip if skip else 'running ' + SUITE} "
          f"({cell.id}, TP={options.tp})", flush=True)
    os.environ.update(suite_environment(info, options.tp, options.scale_model, skip))
    started = time.monotonic()
    outcome = run_probes(cell, env, work_dir, model_dir=info.path if info else Path(os.devnull),
                         probe_timeout=options.timeout, cell_timeout=options.timeout + 120,
                         suites=(SUITE,), echo=lambda line: print(line, flush=True))
    record.setdefault("seconds", {})["suite"] = round(time.monotonic() - started, 2)
    record["probes"] = outcome["probes"]
    record.update(figures(outcome["probes"]))
    record["status"], record["reason"] = suite_status(outcome["probes"], outcome["error"])
    return 0 if record["status"] in ("ok", "skipped") else 1


def _has_pytest() -> bool:
    return all(importlib.util.find_spec(name) for name in ("pytest", "pytest_timeout"))


def finish(record: dict[str, Any], options: argparse.Namespace) -> None:
    """kimi.json, then the reports from every result file in the results folder."""
    from compat.report import build_report, write_reports
    from compat.results import ResultFileError, load_cell, write_json_atomic

    write_json_atomic(options.results / "kimi.json", record)
    cells = []
    for path in sorted(options.results.glob("*.json")):
        if not path.name.startswith("kimi"):
            try:
                cells.append(load_cell(path))
            except ResultFileError as exc:
                print(f"kimi: skipping {exc}", file=sys.stderr)
    write_reports(build_report(cells, kimi=record), options.reports)
    print(f"[kimi] {record['status']}{': ' + record['reason'] if record.get('reason') else ''}", flush=True)
    print(f"[kimi] wrote {options.results / 'kimi.json'} and {options.reports}/compat.json, compat.html, "
          f"compat.md", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
