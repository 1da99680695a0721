"""Scheduler-side contracts: Scheduler and Request constructors, block hashes under caching."""

import copy

import pytest

from compat import vllm_setup
from compat.observe import ContractViolation, speculators_call


def original(obj):
    """The vLLM object behind an adapter's wrapper (for `where` in a failure)."""
    return getattr(obj, "__compat_original__", obj)


@pytest.mark.probe("scheduler_signature")
def test_scheduler_signature(engine, in_process, ns, compat_mode, probe_detail):
    config = engine.vllm_config
    kwargs = {"vllm_config": config, "kv_cache_config": engine.kv_cache_config,
              "structured_output_manager": ns.StructuredOutputManager(vllm_config=config)}
    if in_process.scheduler_passes_block_size:
        kwargs["block_size"] = vllm_setup.BLOCK_SIZE
    probe_detail["call"] = f"Scheduler({', '.join(kwargs)})"
    with speculators_call(original(ns.Scheduler)):
        ns.Scheduler(**kwargs)


def speculators_request(ns, in_process, request_id, prompt, config):
    """Request(...) exactly as the release builds it (0.4 builds its own block hasher)."""
    kwargs = {"request_id": request_id, "prompt_token_ids": prompt,
              "sampling_params": ns.SamplingParams(max_tokens=1, temperature=0.0), "pooling_params": None,
              "eos_token_id": 2, "arrival_time": 0.0}
    if in_process.request_passes_block_hasher:
        kwargs["block_hasher"] = hasher_as_0_4_builds_it(ns, config)
    return ns.Request(**kwargs), kwargs


def hasher_as_0_4_builds_it(ns, config):
    hash_fn = ns.get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    ns.init_none_hash(hash_fn)
    return ns.get_request_block_hasher(config.cache_config.block_size, hash_fn)


@pytest.mark.probe("request_signature")
def test_request_signature(engine, in_process, ns, compat_mode, request_id, prompt, probe_detail):
    with speculators_call(original(ns.Request)):
        _, kwargs = speculators_request(ns, in_process, request_id(), prompt, engine.vllm_config)
    probe_detail["call"] = f"Request({', '.join(kwargs)})"


@pytest.mark.probe("block_hasher")
def test_block_hasher(engine, in_process, ns, compat_mode, request_id, prompt, probe_detail):
    """Schedule a request the way the release builds it, under the CacheConfig it builds.

    0.3 passes no block_hasher and leaves prefix caching at vLLM's default; 0.4 builds the hasher
    itself (vllm.utils.hashing, init_none_hash, get_request_block_hasher) and turns caching off.
    """
    cache_kwargs = {"block_size": vllm_setup.BLOCK_SIZE, "gpu_memory_utilization": 0.8}
    if in_process.cache_config_prefix_caching is not None:
        cache_kwargs["enable_prefix_caching"] = in_process.cache_config_prefix_caching
    config = copy.copy(engine.vllm_config)
    config.cache_config = ns.CacheConfig(**cache_kwargs)
    config.cache_config.num_gpu_blocks = engine.kv_cache_config.num_blocks
    probe_detail["enable_prefix_caching"] = config.cache_config.enable_prefix_caching
    scheduler = vllm_setup.make_scheduler(config, engine.kv_cache_config)
    with speculators_call(scheduler.schedule):
        request, _ = speculators_request(ns, in_process, request_id(), prompt, config)
        scheduler.add_request(request)
        output = scheduler.schedule()
        scheduled = output.num_scheduled_tokens.get(request.request_id, 0)
        probe_detail["scheduled_tokens"] = scheduled
        if scheduled != len(prompt):
            raise ContractViolation(f"Scheduler.schedule() scheduled {scheduled} of {len(prompt)} prompt tokens")
