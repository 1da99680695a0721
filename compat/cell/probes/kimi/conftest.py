"""The Kimi suite's shared run: one generator, built once, through the matrix's extraction path
(compat.cell.datagen with adapters); the tests only check what it returned.

Settings come from compat.harness.kimi in the cell spec (`cell_spec.kimi`). With its `skip` set (the gate
is closed) every test is skipped with that reason before anything is imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import random
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from compat.shared.cell_spec import CellSpec, CellSpecError, KimiSuiteSpec

LENGTHS = (512, 257, 100, 33)  # the seeds' 512-token rows, plus uneven ones for the batch


@dataclass(frozen=True)
class Settings:
    model: str
    tp: int
    layers: list[int]
    hidden_size: int
    scale: bool
    # Compared with transformers (compat.harness sets it: the scale model, a small Kimi-shaped one)
    # and, where not, why (kimi_matches_reference is then n/a with it).
    reference: bool = False
    no_reference: str = "the transformers reference runs on the scale model only (--scale-model)"

    # compat.harness.kimi picks it: the tiny fixture runs float32 where the attention backend takes
    # it (else bfloat16); Kimi's INT4 kernels need 16-bit ("auto").
    dtype: str = "auto"


@dataclass
class Extraction:
    settings: Settings
    sequences: list[list[int]]
    failure: BaseException | None = None
    batch: list = field(default_factory=list)
    repeat: list = field(default_factory=list)
    singles: list = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def require(self) -> None:
        """Re-raise the extraction's failure inside the calling test (read as `broken`)."""
        if self.failure is not None:
            raise self.failure


@pytest.fixture(scope="session")
def kimi_spec(cell_spec: CellSpec) -> KimiSuiteSpec:
    if cell_spec.kimi is None:
        raise CellSpecError(f"the cell spec of {cell_spec.cell_id} has no `kimi` section: the Kimi suite runs "
                            "through `python -m compat.kimi`, which writes it")
    return cell_spec.kimi


@pytest.fixture(scope="session", autouse=True)
def kimi_gate(kimi_spec: KimiSuiteSpec):
    if kimi_spec.skip:
        pytest.skip(kimi_spec.skip)


@pytest.fixture(scope="session")
def settings(kimi_gate, kimi_spec: KimiSuiteSpec) -> Settings:
    return Settings(model=kimi_spec.model, tp=kimi_spec.tp, layers=list(kimi_spec.layers),
                    hidden_size=kimi_spec.hidden_size, scale=kimi_spec.scale, reference=kimi_spec.with_reference,
                    dtype=kimi_spec.run_dtype, **({"no_reference": kimi_spec.no_reference}
                                                  if kimi_spec.no_reference else {}))


def sequences(vocab_size: int) -> list[list[int]]:
    rng = random.Random(20260221)
    return [[rng.randrange(4, vocab_size) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="session")
def extraction(settings: Settings):
    from compat.shared.profiles import profile_for

    version = importlib.metadata.version("speculators")
    profile = profile_for(version)
    if not profile.in_process:
        if importlib.util.find_spec("compat.cell.server") is None:
            pytest.skip(f"speculators {version} uses the server path ({profile.note}); compat/cell/server.py, "
                        "which drives it, is not in this checkout yet")
        pytest.skip(f"speculators {version} uses the server path; compat/cell/probes/kimi does not drive "
                    "compat.cell.server yet")
    run = Extraction(settings, sequences(_vocab_size(settings.model)))
    generator = _extract(run, profile)
    yield run
    if generator is not None:
        generator.shutdown()


def _vocab_size(model: str) -> int:
    import json
    from pathlib import Path

    from compat.shared.kimi_config import text_config

    return min(int(text_config(json.loads((Path(model) / "config.json").read_text()))["vocab_size"]), 100_000)


def _extract(run: Extraction, profile):
    """Build the generator, time the batch call, then the repeat and the single calls."""
    from compat.cell import datagen, kimi_suite

    settings = run.settings
    started = time.monotonic()
    fixes: list[dict] = []
    with kimi_suite.tokenizer_trusting_remote_code(datagen.generator_module(), fixes):
        generator = datagen.build(profile, settings.model, mode="with_compat", layer_ids=settings.layers,
                                  tp=settings.tp, dtype=settings.dtype, max_model_len=max(LENGTHS) + 16)
    run.figures["load_seconds"] = round(time.monotonic() - started, 2)
    run.figures["suite_fixes"] = fixes
    try:
        run.figures["use_mla"] = bool(generator.instance.vllm_config.model_config.use_mla)
        run.figures["attention_impls"] = generator.instance.executor.collective_rpc(kimi_suite.attention_impls)[0]
        run.figures["adapters"] = [a["id"] for a in generator.adapters] + _worker_adapters(generator)
        run.figures["env_shims"] = [s["id"] for s in generator.env_shims] + _worker_shims()
        started = time.monotonic()
        run.batch = generator.generate(run.sequences)
        seconds = time.monotonic() - started
        tokens = sum(map(len, run.sequences))
        run.figures.update(tokens=tokens, sequences=len(run.sequences),
                           tokens_per_second=round(tokens / seconds, 1))
        run.repeat = generator.generate(run.sequences)
        run.singles = [generator.generate([s])[0] for s in run.sequences]
        peaks = generator.instance.executor.collective_rpc(kimi_suite.peak_gpu_memory)
        if all(p is None for p in peaks):
            run.figures["peak_gpu_memory_bytes"] = None
            run.figures["peak_gpu_memory_note"] = f"no GPU: CPU run, {len(peaks)} rank(s) answered None"
        else:
            run.figures["peak_gpu_memory_bytes"] = {f"rank {r}": p for r, p in enumerate(peaks)}
            run.figures["peak_gpu_memory_note"] = "torch.cuda.max_memory_allocated() per rank"
    except Exception as exc:  # noqa: BLE001 - the tests report it
        run.failure = exc
    return generator


def _worker_adapters(generator) -> list[str]:
    """eagle3_support_check runs inside the workers; say here whether this pair needed it."""
    from speculators.data_generation import custom_worker

    if not hasattr(custom_worker, "supports_eagle3"):
        return []
    from vllm.model_executor.models import deepseek_v2

    bases = {cls.__name__ for cls in deepseek_v2.DeepseekV2ForCausalLM.__mro__}
    return [] if "SupportsEagle3" in bases else ["eagle3_support_check"]


def _worker_shims() -> list[str]:
    """cpu_native_rotary runs inside the workers (compat.worker.adapter_extension), on CPU only."""
    import torch

    return [] if torch.cuda.is_available() else ["cpu_native_rotary"]
