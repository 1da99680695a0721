"""Scheduler-side contracts: Scheduler and Request constructors, block hashes under caching."""

import copy

import pytest

from compat.cell import vllm_setup
from compat.shared.observe import ContractViolation, speculators_call


def original(obj):
    """The vLLM object behind an adapter's wrapper (for `where` in a failure)."""
    return getattr(obj, "__compat_original__", obj)


@pytest.mark.probe("scheduler_signature", contract=("call", "vllm.v1.core.sched.scheduler.Scheduler"))
def test_scheduler_signature(engine, in_process, ns, compat_mode, probe_detail):
    config = engine.vllm_config
    kwargs = {"vllm_config": config, "kv_cache_config": engine.kv_cache_config,
              "structured_output_manager": ns.StructuredOutputManager(vllm_config=config)}
    if in_process.scheduler_passes_block_size:
        kwargs["block_size"] = vllm_setup.BLOCK_SIZE
    probe_detail["call"] = f"Scheduler({', '.join(kwargs)})"
    with speculators_call(original(ns.Scheduler)):
        ns.Scheduler(**kwargs)


def speculators_request_kwargs(ns, in_process, request_id, prompt, hasher):
    """Request(...)'s keywords exactly as the release passes them (0.4 adds its block hasher)."""
    kwargs = {"request_id": request_id, "prompt_token_ids": prompt,
              "sampling_params": ns.SamplingParams(max_tokens=1, temperature=0.0), "pooling_params": None,
              "eos_token_id": 2, "arrival_time": 0.0}
    if in_process.request_passes_block_hasher:
        kwargs["block_hasher"] = hasher
    return kwargs


def hasher_as_0_4_builds_it(ns, config):
    hash_fn = ns.get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    ns.init_none_hash(hash_fn)
    return ns.get_request_block_hasher(config.cache_config.block_size, hash_fn)


@pytest.mark.probe("request_signature", contract=("call", "vllm.v1.request.Request"))
def test_request_signature(engine, in_process, ns, compat_mode, request_id, prompt, probe_detail):
    """Request's keywords only: the block hasher 0.4 passes is built the version-proof way here
    (how the release builds it is the block_hasher probe's contract)."""
    hasher = vllm_setup.block_hasher(engine.vllm_config) if in_process.request_passes_block_hasher else None
    kwargs = speculators_request_kwargs(ns, in_process, request_id(), prompt, hasher)
    probe_detail["call"] = f"Request({', '.join(kwargs)})"
    with speculators_call(original(ns.Request)):
        ns.Request(**kwargs)


@pytest.mark.probe("block_hasher")
def test_block_hasher(engine, in_process, ns, compat_mode, request_id, prompt, probe_detail):
    """Schedule a request under the CacheConfig the release builds, with the block hasher it
    builds (0.3 passes none and leaves prefix caching at vLLM's default; 0.4 builds the hasher
    itself from vllm.utils.hashing, init_none_hash, get_request_block_hasher, and turns caching
    off). Request's other keywords are built the version-proof way: they are request_signature's.
    """
    cache_kwargs = {"block_size": vllm_setup.BLOCK_SIZE, "gpu_memory_utilization": 0.8}
    if in_process.cache_config_prefix_caching is not None:
        cache_kwargs["enable_prefix_caching"] = in_process.cache_config_prefix_caching
    config = copy.copy(engine.vllm_config)
    config.cache_config = ns.CacheConfig(**cache_kwargs)
    config.cache_config.num_gpu_blocks = engine.kv_cache_config.num_blocks
    probe_detail["enable_prefix_caching"] = config.cache_config.enable_prefix_caching
    probe_detail["block_hasher"] = "the release's own" if in_process.request_passes_block_hasher else "none passed"
    scheduler = vllm_setup.make_scheduler(config, engine.kv_cache_config)
    with speculators_call(scheduler.schedule):
        hasher = hasher_as_0_4_builds_it(ns, config) if in_process.request_passes_block_hasher else None
        request = vllm_setup.make_request(request_id(), prompt, hasher=hasher, request_cls=ns.Request)
        scheduler.add_request(request)
        output = scheduler.schedule()
        scheduled = output.num_scheduled_tokens.get(request.request_id, 0)
        probe_detail["scheduled_tokens"] = scheduled
        if scheduled != len(prompt):
            raise ContractViolation(f"Scheduler.schedule() scheduled {scheduled} of {len(prompt)} prompt tokens")
