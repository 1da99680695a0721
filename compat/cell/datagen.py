"""Running the cell's own speculators data generator (the in-process VllmHiddenStatesGenerator
of speculators 0.3.x/0.4.x) as a user would, with or without compat adapters.

Modes:
- "raw": the release as installed (plus CPU environment shims and a pinned dtype);
- "api_only": only the adapters for breakages that raise (kind "exception"), none of the
  data-fixing ones, which shows the silent wrong-data faults behind the exceptions;
- "with_compat": every adapter the pair needs.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from compat.cell import cpu_shims as env_shims
from compat.cell.adapters import generator as adapters
from compat.cell.process_shims import zmq_linger_zero
from compat.cell.steps import timed
from compat.cell.vllm_setup import omp_binding
from compat.shared.observe import speculators_call
from compat.shared.profiles import Profile
from compat.shared.records import StepKind

# the generator hard-codes dtype="auto", which is bfloat16 on CPU: the probes pin it (the cell's dtype)
DEFAULT_DTYPE = "float32"


def generator_module():
    return importlib.import_module(adapters.GENERATOR_MODULE)


def _pin_dtype(g, dtype: str) -> None:
    adapters._wrap(g, "ModelConfig", lambda cls: adapters._keyword_filler(
        cls, lambda kw: kw.__setitem__("dtype", dtype)))


@dataclass
class Generator:
    """A constructed generator (or the exception its construction raised) and what was applied."""

    mode: str
    tp: int
    dtype: str = DEFAULT_DTYPE
    instance: Any = None
    failure: BaseException | None = None
    module: Any = None
    planned: list = field(default_factory=list)
    env_shims: list = field(default_factory=list)
    adapters: list = field(default_factory=list)

    def bind(self) -> None:
        """Rebind the generator module's names for this mode. The generator looks them up at
        call time, so this runs before every use: generators of several modes may coexist."""
        adapters.restore(self.module)
        self.env_shims = env_shims.apply_cpu_shims(self.module) + zmq_linger_zero()
        _pin_dtype(self.module, self.dtype)
        self.adapters = adapters.apply(self.module, self.planned)

    @property
    def live(self) -> bool:
        return getattr(self.instance, "executor", None) is not None

    def generate(self, sequences: Sequence[Sequence[int]]) -> list[list[Any]]:
        """Hidden states per sequence, per requested layer. What the release raises (its
        construction, its generate(), the results it hands back) is tagged as its failure;
        our binding of names is not."""
        self.bind()
        with speculators_call():
            if self.failure is not None:
                raise self.failure
            with timed(StepKind.CLIENT, f"{self.mode} tp{self.tp}: generate {len(sequences)} sequence(s)"):
                results = self.instance.generate([list(s) for s in sequences])
            return [list(r["hidden_states"]) for r in results]

    def shutdown(self) -> None:
        executor = getattr(self.instance, "executor", None)
        if executor is not None:
            with timed(StepKind.TEARDOWN, f"{self.mode} tp{self.tp}"):
                executor.shutdown()
            self.instance.executor = None  # its __del__ would shut down again


MODE_KINDS = {"raw": (), "api_only": (adapters.EXCEPTION,), "with_compat": adapters.KINDS}


def adapters_for(mode: str, g, profile: Profile) -> list:
    if mode not in MODE_KINDS:
        raise ValueError(f"datagen mode {mode!r}: expected one of {', '.join(MODE_KINDS)}")
    return adapters.plan(g, profile, kinds=MODE_KINDS[mode]) if MODE_KINDS[mode] else []


def memory_kwargs(g, gpu_memory_utilization: float | None) -> dict:
    """The cell's GPU memory fraction, where one was asked for (the release's default is 0.8).
    A TP=1 and a TP=2 generator live at once on GPU 0: each takes half."""
    from compat.cell.vllm_setup import accepts

    if gpu_memory_utilization is None or not accepts(g.VllmHiddenStatesGenerator, "gpu_memory_utilization"):
        return {}
    return {"gpu_memory_utilization": gpu_memory_utilization / 2}


def build(profile: Profile, model_dir: str, *, mode: str, layer_ids: list[int], tp: int = 1,
          max_model_len: int = 512, dtype: str = DEFAULT_DTYPE, gpu_memory_utilization: float | None = None,
          omp_bind_tp1: str = "auto") -> Generator:
    """Construct the release's generator in `mode` (the construction's exception is kept), in the
    cell's `dtype`, with the cell's GPU memory fraction where one was asked for."""
    g = generator_module()
    adapters.restore(g)
    planned = adapters_for(mode, g, profile)
    generator = Generator(mode=mode, tp=tp, dtype=dtype, module=g, planned=planned)
    generator.bind()
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = omp_binding(tp, omp_bind_tp1)
    try:
        with timed(StepKind.ENGINE_START, f"{mode} tp{tp}"):
            generator.instance = g.VllmHiddenStatesGenerator(
                model_path=model_dir, layer_ids=layer_ids, max_model_len=max_model_len,
                tensor_parallel_size=tp, **memory_kwargs(g, gpu_memory_utilization))
    except Exception as exc:  # noqa: BLE001 - the construction's failure is the observation
        generator.failure = exc
    return generator
