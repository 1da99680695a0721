"""How each speculators release drives vLLM: the call shapes the probes reproduce.

Read from the released wheels (speculators/data_generation/vllm_hidden_states_generator.py and
speculators/data_generation/custom_worker.py). Releases that make the same calls share a profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class Profile:
    name: str
    speculators: str  # the releases it covers, as a specifier set
    in_process: bool  # drives Scheduler/Executor/worker extension itself
    scheduler_config_extra: tuple[tuple[str, object], ...] = ()
    kv_config_passes_specs: bool = False
    scheduler_passes_block_size: bool = False
    request_passes_block_hasher: bool = False
    cache_config_prefix_caching: bool | None = None  # what it passes to CacheConfig, None = unset
    embedding_lookup: str = "model"  # "model": model.model; "language_model": VL models first
    embedding_method: str = "get_input_embeddings"
    samples_after_execute: bool = False  # calls executor.sample_tokens(model_output)
    rpc_reply_subscript: bool = True  # takes [0] of collective_rpc(unique_reply_rank=0)
    captured_shape: str = "list"  # what its _get_captured_states returns: list or dict
    worker_logger: str = "speculators.data_generation.custom_worker"
    note: str = ""


PROFILES = (
    Profile(
        name="no-vllm",
        speculators="<0.3",
        in_process=False,
        note="speculators before 0.3 generates no hidden states with vLLM",
    ),
    Profile(
        name="generator-0.3",
        speculators=">=0.3,<0.4",
        in_process=True,
        kv_config_passes_specs=True,
        note="VllmHiddenStatesGenerator, written for vLLM 0.11.0",
    ),
    Profile(
        name="generator-0.4",
        speculators=">=0.4,<0.5",
        in_process=True,
        scheduler_config_extra=(("is_encoder_decoder", False),),
        scheduler_passes_block_size=True,
        request_passes_block_hasher=True,
        cache_config_prefix_caching=False,
        embedding_lookup="language_model",
        embedding_method="embed_input_ids",
        samples_after_execute=True,
        rpc_reply_subscript=False,
        captured_shape="dict",
        note="VllmHiddenStatesGenerator ported to vLLM 0.12-0.16 (issue #279 fixes)",
    ),
    Profile(
        name="server",
        speculators=">=0.5",
        in_process=False,
        note="speculators 0.5+ drives `vllm serve` with extract_hidden_states over HTTP",
    ),
)


def profile_for(speculators_version: str) -> Profile:
    version = Version(speculators_version)
    for profile in PROFILES:
        if SpecifierSet(profile.speculators).contains(version, prereleases=True):
            return profile
    raise ValueError(f"no call profile covers speculators {speculators_version}")
