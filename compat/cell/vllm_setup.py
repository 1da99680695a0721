"""The harness's own, version-proof way to build vLLM's internals, by feature detection.

Probes use these to set the stage (engine, KV cache, scheduler, requests) so that each probe's
one speculators-shaped call is the only thing under test; adapters reuse them as fixes.
Imported only inside a cell environment: vLLM is imported lazily.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any

PROBE_WORKER_EXTENSION = "compat.worker.probe_worker.ProbeWorkerExtension"
MAX_MODEL_LEN = 256
BLOCK_SIZE = 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.8  # vLLM's CacheConfig default, kept where nothing is asked


def visible_gpu_count() -> int:
    """GPUs this process may use, without initialising CUDA (vLLM forks or spawns its workers
    later; a CUDA context made here breaks forked workers)."""
    import torch

    if not torch.cuda.is_available():  # is_available does not create a CUDA context
        return 0
    from compat.shared.gpus import host_gpu_count  # nvidia-smi -L, narrowed by CUDA_VISIBLE_DEVICES

    return host_gpu_count()


def accepts(func: Any, name: str) -> bool:
    """Does this callable (or class constructor) take a parameter called `name`?"""
    target = func.__init__ if inspect.isclass(func) else func
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    if name in params:
        return True
    fields = getattr(func, "__dataclass_fields__", None) or getattr(func, "__pydantic_fields__", None)
    return bool(fields) and name in fields


def scheduler_config(max_model_len: int = MAX_MODEL_LEN, **overrides: Any):
    from vllm.config import SchedulerConfig

    kwargs: dict[str, Any] = {
        "max_num_seqs": 32,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max(8192, max_model_len),
    }
    if accepts(SchedulerConfig, "is_encoder_decoder"):
        kwargs["is_encoder_decoder"] = False
    kwargs.update(overrides)
    return SchedulerConfig(**kwargs)


def vllm_config(model_dir: str, tp: int = 1, *, worker_extension_cls: str = PROBE_WORKER_EXTENSION,
                max_model_len: int = MAX_MODEL_LEN, dtype: str = "float32",
                memory_fraction: float | None = None, enable_prefix_caching: bool | None = False,
                scheduler_overrides: dict[str, Any] | None = None):
    """A VllmConfig for the tiny model, shaped like the one speculators' generator builds."""
    from vllm.config import CacheConfig, DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig

    cache_kwargs: dict[str, Any] = {"block_size": BLOCK_SIZE,
                                    "gpu_memory_utilization": memory_fraction or DEFAULT_GPU_MEMORY_UTILIZATION}
    if enable_prefix_caching is not None:
        cache_kwargs["enable_prefix_caching"] = enable_prefix_caching
    return VllmConfig(
        model_config=ModelConfig(model=model_dir, tokenizer=model_dir, trust_remote_code=True,
                                 dtype=dtype, max_model_len=max_model_len, enforce_eager=True),
        cache_config=CacheConfig(**cache_kwargs),
        parallel_config=ParallelConfig(tensor_parallel_size=tp,
                                       worker_extension_cls=worker_extension_cls),
        scheduler_config=scheduler_config(max_model_len, **(scheduler_overrides or {})),
        device_config=DeviceConfig(),
        load_config=LoadConfig(),
    )


def omp_binding(tp: int, tp1: str = "auto") -> str:
    """vLLM's CPU worker binds one OpenMP core list per rank; on 2 cores TP=2 needs one each.
    `tp1`: the binding for one rank (the cell spec's omp_bind_tp1)."""
    cores = os.cpu_count() or 1
    if tp == 1:
        return tp1
    per_rank = max(1, cores // tp)
    return "|".join(
        ",".join(str(c) for c in range(r * per_rank, (r + 1) * per_rank)) if per_rank > 1 else str(r % cores)
        for r in range(tp)
    )


@dataclass
class Engine:
    """A running MultiprocExecutor with its KV cache initialised the way EngineCore does it."""

    executor: Any
    vllm_config: Any
    tp: int
    kv_cache_config: Any = None
    worker_kv_spec: dict = field(default_factory=dict)
    available_memory: int = 0

    def shutdown(self) -> None:
        self.executor.shutdown()


def start_engine(model_dir: str, tp: int = 1, *, omp_bind_tp1: str = "auto", **config_kwargs: Any) -> Engine:
    """A probe engine. On CUDA, with a TP=1 and a TP=2 engine alive at once, the caller keeps
    each one's memory fraction at most half the GPU (conftest's engine pool)."""
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = omp_binding(tp, omp_bind_tp1)
    config = vllm_config(model_dir, tp, **config_kwargs)
    executor = MultiprocExecutor(vllm_config=config)
    engine = Engine(executor=executor, vllm_config=config, tp=tp)
    try:
        init_kv_cache(engine)
    except BaseException:
        executor.shutdown()
        raise
    return engine


def init_kv_cache(engine: Engine) -> None:
    from vllm.v1.core import kv_cache_utils as kvu

    executor, config = engine.executor, engine.vllm_config
    specs = executor.collective_rpc("get_kv_cache_spec")
    engine.worker_kv_spec = dict(specs[0])
    available = executor.determine_available_memory()
    engine.available_memory = int(min(available))
    resolve_layout = _optional_attr("vllm.v1.attention.backends.utils", "resolve_kv_cache_layout")
    if resolve_layout is not None and getattr(config.cache_config, "kv_cache_layout", "x") is None:
        layout = resolve_layout(config, executor.get_supported_kv_cache_layouts(), specs)
        executor.set_kv_cache_layout(layout.name)
    configs = kvu.get_kv_cache_configs(config, specs, available)
    engine.kv_cache_config = kvu.generate_scheduler_kv_cache_config(configs)
    config.cache_config.num_gpu_blocks = engine.kv_cache_config.num_blocks
    executor.initialize_from_config(configs)
    if _warm_up_is_separate(executor):
        executor.compile_or_warm_up_model()


def _warm_up_is_separate(executor: Any) -> bool:
    """From vLLM 0.28 initialize_from_config no longer warms up; EngineCore calls it apart."""
    if not hasattr(executor, "compile_or_warm_up_model"):
        return False
    try:
        source = inspect.getsource(type(executor).initialize_from_config)
    except (OSError, TypeError):
        return False
    return "compile_or_warm_up_model" not in source


def _optional_attr(module: str, name: str) -> Any:
    import importlib

    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def scheduler_block_size(config: Any) -> int:
    parallel = config.parallel_config
    return (config.cache_config.block_size
            * getattr(parallel, "decode_context_parallel_size", 1)
            * getattr(parallel, "prefill_context_parallel_size", 1))


def make_scheduler(config: Any, kv_cache_config: Any):
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    kwargs: dict[str, Any] = {
        "vllm_config": config,
        "kv_cache_config": kv_cache_config,
        "structured_output_manager": StructuredOutputManager(vllm_config=config),
    }
    if accepts(Scheduler, "block_size"):
        kwargs["block_size"] = scheduler_block_size(config)
    return Scheduler(**kwargs)


def hash_function(algo: str):
    """get_hash_fn_by_name moved from vllm.utils to vllm.utils.hashing in 0.11.1."""
    get_hash_fn_by_name = (_optional_attr("vllm.utils.hashing", "get_hash_fn_by_name")
                           or _optional_attr("vllm.utils", "get_hash_fn_by_name"))
    return get_hash_fn_by_name(algo)


def block_hasher(config: Any):
    """The request block hasher EngineCore builds when prefix caching is on."""
    from vllm.v1.core import kv_cache_utils as kvu

    hash_fn = hash_function(config.cache_config.prefix_caching_hash_algo)
    kvu.init_none_hash(hash_fn)
    return kvu.get_request_block_hasher(scheduler_block_size(config), hash_fn)


def request_kwargs(request_cls: Any, request_id: str, token_ids: list[int], *, eos_token_id: int = 2,
                   hasher: Any = None) -> dict[str, Any]:
    """Keywords every release of `request_cls` (vLLM's Request) accepts, for this prompt."""
    from vllm.sampling_params import SamplingParams

    kwargs: dict[str, Any] = {
        "request_id": request_id,
        "prompt_token_ids": list(token_ids),
        "sampling_params": SamplingParams(max_tokens=1, temperature=0.0),
        "pooling_params": None,
        "arrival_time": 0.0,
    }
    if accepts(request_cls, "eos_token_id"):
        kwargs["eos_token_id"] = eos_token_id
    if hasher is not None:
        kwargs["block_hasher"] = hasher
    return kwargs


def make_request(request_id: str, token_ids: list[int], *, eos_token_id: int = 2,
                 hasher: Any = None, request_cls: Any = None):
    """A Request built the version-proof way. `request_cls` may be a name a compat adapter has
    wrapped (its keywords are then judged on the vLLM class behind the wrapper)."""
    from vllm.v1.request import Request

    request_cls = request_cls or Request
    vllm_class = request_cls
    while hasattr(vllm_class, "__compat_original__"):
        vllm_class = vllm_class.__compat_original__
    return request_cls(**request_kwargs(vllm_class, request_id, token_ids, eos_token_id=eos_token_id,
                                        hasher=hasher))


def rpc_from_rank(executor: Any, method: str, *args: Any, rank: int = 0) -> Any:
    """One rank's reply. Without unique_reply_rank, collective_rpc returns a list in every release."""
    from compat.shared.states import rank_reply

    replies = executor.collective_rpc(method, args=args)
    return rank_reply(replies, rank, len(replies), single_result=False)
