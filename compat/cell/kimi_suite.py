"""What the Kimi suite (compat/cell/probes/kimi) runs inside the cell: the tokenizer fix for Kimi's custom-code
tokenizer, and the functions it sends to vLLM's workers through collective_rpc. The orchestration
(gate, install, kimi.json) is compat.harness.kimi."""

from __future__ import annotations

TOKENIZER_FIX = {
    "id": "tokenizer_trust_remote_code",
    "why": "speculators 0.3.0 and 0.4.0.1 load the tokenizer with AutoTokenizer.from_pretrained(model_path) "
           "(vllm_hidden_states_generator.py:84 and :90), without trust_remote_code; Kimi-K2.5's tokenizer is "
           "custom code (tokenization_kimi.py behind an auto_map), which transformers then refuses to load. The "
           "suite passes trust_remote_code=True, as the generator already does for AutoConfig and vLLM's "
           "ModelConfig. A fix for Kimi's model files, not for a vLLM breakage: kept out of "
           "compat.cell.adapters.generator."}


def tokenizer_trusting_remote_code(module, applied: list):
    """While the generator is built: its AutoTokenizer.from_pretrained gets trust_remote_code=True
    where the release did not pass it (TOKENIZER_FIX, appended to `applied` when it acted)."""
    from contextlib import contextmanager

    @contextmanager
    def trusting():
        original = module.AutoTokenizer

        class AutoTokenizer:
            @staticmethod
            def from_pretrained(*args, **kwargs):
                if "trust_remote_code" not in kwargs:
                    kwargs["trust_remote_code"] = True
                    if TOKENIZER_FIX not in applied:
                        applied.append(TOKENIZER_FIX)
                return original.from_pretrained(*args, **kwargs)

        module.AutoTokenizer = AutoTokenizer
        try:
            yield
        finally:
            module.AutoTokenizer = original

    return trusting()


def attention_impls(worker=None) -> list[str]:
    """Run in each vLLM worker through collective_rpc: the attention implementations its model uses."""
    try:
        model = worker.model_runner.model
        return sorted({type(m.impl).__name__ for m in model.modules() if hasattr(m, "impl")})
    except Exception as exc:  # noqa: BLE001 - a figure, not a check
        return [f"unknown ({type(exc).__name__}: {exc})"]


def peak_gpu_memory(worker=None) -> int | None:
    """Run in each vLLM worker through collective_rpc: this rank's peak allocated bytes."""
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None
