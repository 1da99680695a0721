"""Config-level contracts: SchedulerConfig fields and the KV-cache config helper."""

import pytest

from compat.cell.vllm_setup import MAX_MODEL_LEN
from compat.shared.observe import ContractViolation, speculators_call


@pytest.mark.probe("scheduler_config_fields", contract=("call", "vllm.config.SchedulerConfig"))
def test_scheduler_config_fields(in_process, ns, compat_mode, probe_detail):
    kwargs = dict(max_num_seqs=32, max_model_len=MAX_MODEL_LEN,
                  max_num_batched_tokens=max(8192, MAX_MODEL_LEN), **dict(in_process.scheduler_config_extra))
    probe_detail["call"] = f"SchedulerConfig({', '.join(sorted(kwargs))})"
    with speculators_call(getattr(ns.SchedulerConfig, "__compat_original__", ns.SchedulerConfig)):
        config = ns.SchedulerConfig(**kwargs)
    probe_detail["enable_chunked_prefill"] = getattr(config, "enable_chunked_prefill", None)


@pytest.mark.probe("kv_cache_config_api",
                   contract=("call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"))
def test_kv_cache_config_api(engine, in_process, ns, compat_mode, probe_detail):
    spec = dict(engine.worker_kv_spec)
    kwargs = {"vllm_config": engine.vllm_config, "available_memory": engine.available_memory}
    if in_process.kv_config_passes_specs:
        kwargs["kv_cache_specs"] = spec
    probe_detail["call"] = f"get_kv_cache_config_from_groups({', '.join(['kv_cache_groups', *sorted(kwargs)])})"
    target = getattr(ns.get_kv_cache_config_from_groups, "__compat_original__", ns.get_kv_cache_config_from_groups)
    with speculators_call(target):
        ns.unify_hybrid_kv_cache_specs(spec)
        groups = ns._get_kv_cache_groups_uniform_spec(spec)
        config = ns.get_kv_cache_config_from_groups(kv_cache_groups=groups, **kwargs)
        probe_detail["num_blocks"] = config.num_blocks
        if config.num_blocks <= 0:
            raise ContractViolation(f"get_kv_cache_config_from_groups returned {config.num_blocks} blocks "
                                    f"for {engine.available_memory} bytes")
