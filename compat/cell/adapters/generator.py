"""compat adapters: feature-detected fixes that make an installed speculators release work on
the installed vLLM, applied at run time by rebinding names in speculators' generator module
(site-packages is never edited). Each adapter carries the registry id of the breakage it fixes.

Environment shims that exist only because the cell runs on CPU live apart, in compat.cell.cpu_shims.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from compat.cell.vllm_setup import accepts, scheduler_block_size
from compat.shared.profiles import Profile

GENERATOR_MODULE = "speculators.data_generation.vllm_hidden_states_generator"
WORKER_EXTENSION = "compat.worker.adapter_extension.CompatWorkerExtension"


EXCEPTION = "exception"  # fixes a call that raises: without it the release stops
DATA = "data"  # fixes wrong or missing data behind calls that succeed (a changed default, an order)
KINDS = (EXCEPTION, DATA)


@dataclass(frozen=True)
class Adapter:
    id: str  # the breakage registry id it fixes
    kind: str  # EXCEPTION or DATA: the api_only run applies only the exception-fixing ones
    needed: Callable[[ModuleType, Profile], bool]  # feature detection on the installed packages
    apply: Callable[[ModuleType], None]
    what: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"adapter {self.id}: kind {self.kind!r}, expected one of {', '.join(KINDS)}")


def _wrap(module: ModuleType, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(module, name)
    wrapped = make(original)
    wrapped.__compat_original__ = original
    setattr(module, name, wrapped)


def _keyword_filler(original: Any, fill: Callable[[dict], None]) -> Any:
    @functools.wraps(original)
    def call(*args, **kwargs):
        fill(kwargs)
        return original(*args, **kwargs)
    return call


# scheduler_config_fields: SchedulerConfig requires is_encoder_decoder (vLLM 0.12+).
def _needs_encoder_decoder(g: ModuleType, profile: Profile) -> bool:
    sig_default = _init_default(g.SchedulerConfig, "is_encoder_decoder")
    return accepts(g.SchedulerConfig, "is_encoder_decoder") and sig_default is inspect.Parameter.empty \
        and "is_encoder_decoder" not in dict(profile.scheduler_config_extra)


def _init_default(cls: Any, name: str) -> Any:
    try:
        param = inspect.signature(cls).parameters.get(name)
    except (TypeError, ValueError):
        return inspect.Parameter.empty
    return param.default if param is not None else inspect.Parameter.empty


def _fill_encoder_decoder(g: ModuleType) -> None:
    _wrap(g, "SchedulerConfig", lambda cls: _keyword_filler(
        cls, lambda kw: kw.setdefault("is_encoder_decoder", False)))


# chunked_prefill_default: 0.3 aborts every request after its first scheduled chunk and slices
# by offsets, so a chunked prompt loses rows silently. vLLM 0.12+ turns chunked prefill on.
def _needs_no_chunking(g: ModuleType, profile: Profile) -> bool:
    return profile.name == "generator-0.3" and accepts(g.SchedulerConfig, "enable_chunked_prefill")


# result_order: a speculators 0.4 defect, on any vLLM: generate() appends results in sorted
# request-id order ("req_0_10" before "req_0_2"), so from 11 prompts on they come back permuted.
def _needs_input_order(g: ModuleType, profile: Profile) -> bool:
    try:
        source = inspect.getsource(g.VllmHiddenStatesGenerator.generate)
    except (OSError, TypeError):
        return False
    return "sorted(request_id_to_idx" in source


def _restore_input_order(g: ModuleType) -> None:
    def make(cls):
        class InputOrderGenerator(cls):
            def generate(self, token_ids):
                results = super().generate(token_ids)
                return in_input_order(results, [list(ids) for ids in token_ids])
        InputOrderGenerator.__qualname__ = cls.__qualname__
        return InputOrderGenerator
    _wrap(g, "VllmHiddenStatesGenerator", make)


def in_input_order(results: list[dict], inputs: list[list[int]]) -> list[dict]:
    """Results matched back to the prompts by the input_ids each result carries."""
    remaining = list(results)
    ordered = []
    for ids in inputs:
        index = next(i for i, r in enumerate(remaining)
                     if r["input_ids"].tolist() == ids[:len(r["input_ids"])])
        ordered.append(remaining.pop(index))
    return ordered


def _no_chunking(g: ModuleType) -> None:
    _wrap(g, "SchedulerConfig", lambda cls: _keyword_filler(
        cls, lambda kw: kw.setdefault("enable_chunked_prefill", False)))


# block_hasher + prefix_caching_default: CacheConfig(enable_prefix_caching) defaults to True from
# vLLM 0.12; 0.3 passes no block hasher (assertion) and would skip cached prefixes (silent).
def _needs_no_prefix_caching(g: ModuleType, profile: Profile) -> bool:
    return profile.cache_config_prefix_caching is None and \
        bool(getattr(g.CacheConfig(block_size=16), "enable_prefix_caching", False))


def _no_prefix_caching(g: ModuleType) -> None:
    _wrap(g, "CacheConfig", lambda cls: _keyword_filler(
        cls, lambda kw: kw.setdefault("enable_prefix_caching", False)))


# block_hasher: with prefix caching on, every Request needs a block hasher (vLLM 0.12+); 0.3
# passes none. Fixing only this exposes the silent prefix-cache fault (prefix_caching_default).
def _needs_block_hasher(g: ModuleType, profile: Profile) -> bool:
    return not profile.request_passes_block_hasher and accepts(g.Request, "block_hasher") and \
        bool(getattr(g.CacheConfig(block_size=16), "enable_prefix_caching", False))


def _pass_block_hasher(g: ModuleType) -> None:
    from vllm.v1.core import kv_cache_utils as kvu

    from compat.cell.vllm_setup import hash_function

    hasher = getattr(g, "_compat_block_hasher", None)
    if hasher is None:  # once per process, as EngineCore does: init_none_hash reseeds every hash
        cache = g.CacheConfig(block_size=g.VLLM_BLOCK_SIZE)
        hash_fn = hash_function(cache.prefix_caching_hash_algo)
        kvu.init_none_hash(hash_fn)
        hasher = g._compat_block_hasher = kvu.get_request_block_hasher(g.VLLM_BLOCK_SIZE, hash_fn)
    _wrap(g, "Request", lambda cls: _keyword_filler(cls, lambda kw: kw.setdefault("block_hasher", hasher)))


# kv_cache_config_api: get_kv_cache_config_from_groups lost kv_cache_specs (vLLM 0.12).
def _needs_drop_kv_specs(g: ModuleType, profile: Profile) -> bool:
    return profile.kv_config_passes_specs and not accepts(g.get_kv_cache_config_from_groups, "kv_cache_specs")


def _drop_kv_specs(g: ModuleType) -> None:
    def make(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            kwargs.pop("kv_cache_specs", None)
            return fn(*args, **kwargs)
        return call
    _wrap(g, "get_kv_cache_config_from_groups", make)


# scheduler_signature: Scheduler requires block_size (vLLM 0.11.1+).
def _needs_block_size(g: ModuleType, profile: Profile) -> bool:
    return not profile.scheduler_passes_block_size and accepts(g.Scheduler, "block_size")


def _pass_block_size(g: ModuleType) -> None:
    _wrap(g, "Scheduler", lambda cls: _keyword_filler(
        cls, lambda kw: kw.setdefault("block_size", scheduler_block_size(kw["vllm_config"]))))


# request_signature: Request lost eos_token_id (vLLM 0.17); EOS moved into SamplingParams.
def _needs_drop_eos(g: ModuleType, profile: Profile) -> bool:
    return not accepts(g.Request, "eos_token_id")


def _drop_eos(g: ModuleType) -> None:
    _wrap(g, "Request", lambda cls: _keyword_filler(cls, lambda kw: kw.pop("eos_token_id", None)))


# embed_input_ids / worker_logging: fixed inside the workers by our extension subclass.
def _needs_worker_fixes(g: ModuleType, profile: Profile) -> bool:
    return profile.in_process


def _use_compat_worker(g: ModuleType) -> None:
    _wrap(g, "ParallelConfig", lambda cls: _keyword_filler(
        cls, lambda kw: kw.__setitem__("worker_extension_cls", WORKER_EXTENSION)))


# two_phase_execute and collective_rpc_unique_reply_rank (+ aux_hidden_states_truthiness):
# an executor subclass that samples after a None from execute_model, and hands speculators'
# own RPCs the one-element list it indexes with [0].
def _needs_executor_fixes(g: ModuleType, profile: Profile) -> bool:
    return profile.name == "generator-0.3" and hasattr(g.MultiprocExecutor, "sample_tokens")


def _compat_executor(g: ModuleType) -> None:
    from compat.cell.adapters.executor import executor_class

    _wrap(g, "MultiprocExecutor", executor_class)


ADAPTERS = (
    Adapter("scheduler_config_fields", EXCEPTION, _needs_encoder_decoder, _fill_encoder_decoder,
            "SchedulerConfig(..., is_encoder_decoder=False)"),
    Adapter("chunked_prefill_default", DATA, _needs_no_chunking, _no_chunking,
            "SchedulerConfig(..., enable_chunked_prefill=False)"),
    Adapter("result_order", DATA, _needs_input_order, _restore_input_order,
            "generate() results put back in prompt order (matched by their input_ids)"),
    Adapter("block_hasher", EXCEPTION, _needs_block_hasher, _pass_block_hasher,
            "Request(..., block_hasher=get_request_block_hasher(...)) after init_none_hash"),
    Adapter("prefix_caching_default", DATA, _needs_no_prefix_caching, _no_prefix_caching,
            "CacheConfig(..., enable_prefix_caching=False)"),
    Adapter("kv_cache_config_api", EXCEPTION, _needs_drop_kv_specs, _drop_kv_specs,
            "get_kv_cache_config_from_groups without kv_cache_specs"),
    Adapter("scheduler_signature", EXCEPTION, _needs_block_size, _pass_block_size,
            "Scheduler(..., block_size=cache block size x DCP x PCP)"),
    Adapter("request_signature", EXCEPTION, _needs_drop_eos, _drop_eos, "Request(...) without eos_token_id"),
    Adapter("embed_input_ids", EXCEPTION, _needs_worker_fixes, _use_compat_worker,
            "worker extension subclass: embedding-method alias, visible INFO logs"),
    Adapter("two_phase_execute", EXCEPTION, _needs_executor_fixes, _compat_executor,
            "executor subclass: sample_tokens after execute_model returns None; list reply for "
            "speculators' RPCs with unique_reply_rank"),
)


def plan(g: ModuleType, profile: Profile, kinds: tuple[str, ...] = KINDS) -> list[Adapter]:
    """The adapters of these kinds this (speculators, vLLM) pair needs, by feature detection."""
    return [a for a in ADAPTERS if a.kind in kinds and a.needed(g, profile)]


def apply(g: ModuleType, adapters: list[Adapter]) -> list[dict[str, str]]:
    for adapter in adapters:
        adapter.apply(g)
    return [{"id": a.id, "kind": a.kind, "what": a.what} for a in adapters]


def restore(g: ModuleType) -> None:
    """Undo every wrap (probes run raw and adapted in one process)."""
    for name, value in list(vars(g).items()):
        while hasattr(value, "__compat_original__"):
            value = value.__compat_original__
        setattr(g, name, value)
