"""Fixtures of the in-process probes of one cell: shared engines, adapters in force (the profile and
the tiny model are compat/cell/probes/conftest.py's, shared with compat/cell/probes/server).

Engines are expensive (15-60 s each on 2 cores), so one TP=1 and one TP=2 engine serve all
probes of a cell. Every probe builds its own scheduler and requests, and leaves the engine as
it found it, so probes stay independent.
"""

from __future__ import annotations

import itertools
import os

import pytest

from compat.shared.cell_spec import CellSpec
from compat.shared.profiles import Profile

_request_ids = itertools.count()


@pytest.fixture(scope="session")
def in_process(profile: Profile, speculators_version: str) -> Profile:
    """The profile, for probes of contracts only the in-process generator uses."""
    if not profile.in_process:
        pytest.skip(f"n/a: speculators {speculators_version} does not use this contract ({profile.note})")
    return profile


class _Engines:
    def __init__(self, model_dir: str, spec: CellSpec):
        self.model_dir, self.spec = model_dir, spec
        self.running: dict[int, object] = {}
        self.failed: dict[int, BaseException] = {}

    def get(self, tp: int):
        from compat.cell import vllm_setup

        skip_without_gpus(tp)
        if tp in self.failed:
            raise RuntimeError(f"the TP={tp} engine failed to start earlier") from self.failed[tp]
        if tp not in self.running:
            try:
                self.running[tp] = vllm_setup.start_engine(self.model_dir, tp, omp_bind_tp1=self.spec.omp_bind_tp1,
                                                           **engine_memory(self.spec))
            except BaseException as exc:
                self.failed[tp] = exc
                raise
        return self.running[tp]

    def shutdown(self) -> None:
        for engine in self.running.values():
            try:
                engine.shutdown()
            except Exception:  # noqa: BLE001 - the orchestrator kills leftovers anyway
                pass


def skip_without_gpus(tp: int) -> None:
    """On a CUDA host, a TP=N case needs N visible GPUs: else `skipped` with why (never ok).
    On CPU, vLLM runs TP ranks as processes: nothing to skip."""
    from compat.cell import vllm_setup

    found = vllm_setup.visible_gpu_count()
    if found and tp > found:
        pytest.skip(f"needs {tp} GPUs for TP={tp}; this host shows {found} (CUDA_VISIBLE_DEVICES / nvidia-smi -L)")


@pytest.fixture
def require_gpus():
    """skip_without_gpus for tests that start their own TP=N engines (the reference probe's tp2)."""
    return skip_without_gpus


def engine_memory(spec: CellSpec) -> dict:
    """On CUDA the TP=1 and TP=2 probe engines live at once and share GPU 0: each gets half the
    cell's fraction (the TP=2 engine failed to start while the TP=1 engine held 0.8)."""
    from compat.cell import vllm_setup

    if not vllm_setup.visible_gpu_count():
        return {}
    return {"memory_fraction": spec.memory_fraction(vllm_setup.DEFAULT_GPU_MEMORY_UTILIZATION) / 2}


@pytest.fixture(scope="session")
def engines(model_dir: str, cell_spec: CellSpec):
    pool = _Engines(model_dir, cell_spec)
    yield pool
    pool.shutdown()


@pytest.fixture
def engine(engines, in_process):
    return engines.get(1)


@pytest.fixture
def request_id():
    """Fresh request ids: probes share workers, whose caches are keyed by request id."""
    return lambda: f"compat-{os.getpid()}-{next(_request_ids)}"


@pytest.fixture
def prompt() -> list[int]:
    """40 tokens: more than two full 16-token KV blocks, so block hashing matters."""
    return [5 + (i * 7) % 500 for i in range(40)]


def pytest_collection_modifyitems(items):
    """The release's own generator runs go last (hidden_states_match_reference, block_multiple_lengths): their
    `datagen_session` shuts the probes' shared engines down first."""
    items.sort(key=lambda item: "datagen_session" in getattr(item, "fixturenames", ()))


def pytest_generate_tests(metafunc):
    """Probes that take `compat_mode` run twice: as the release is, then with compat adapters."""
    if "compat_mode" in metafunc.fixturenames:
        metafunc.parametrize("compat_mode", ["raw", "with_compat"], ids=["raw", "with_compat"])


@pytest.fixture
def adapter_plan(in_process, compat_mode):
    """The adapters in force for this run of the probe (none when raw)."""
    from compat.cell import datagen
    from compat.cell.adapters import generator as adapters

    g = datagen.generator_module()
    adapters.restore(g)
    return adapters.plan(g, in_process) if compat_mode == "with_compat" else []


@pytest.fixture
def ns(adapter_plan):
    """speculators' generator module, whose names the probes call as the release calls them;
    with compat, the adapters have rebound those names. Restored after the probe."""
    from compat.cell import datagen
    from compat.cell.adapters import generator as adapters

    g = datagen.generator_module()
    adapters.apply(g, adapter_plan)
    yield g
    adapters.restore(g)


@pytest.fixture
def adapted(adapter_plan):
    """Ids of the adapters in force, to switch the worker- and executor-side fixes on."""
    return {a.id for a in adapter_plan}
