"""The worker half of the adapters, loaded into vLLM workers as the worker extension class.

It subclasses the installed speculators release's own extension, so its capture code runs
unchanged; only what moved in vLLM is bridged, when the installed vLLM lacks it.
"""

from __future__ import annotations

import logging
import sys

from speculators.data_generation import custom_worker


class CompatWorkerExtension(custom_worker.HiddenStatesWorkerExtension):
    def _setup_hidden_states_capture(self, layer_ids):
        model = self.model_runner.model
        base = model.get_language_model().model if hasattr(model, "get_language_model") else model.model
        bridge_embedding_names(base)
        make_worker_logs_visible()
        eagle3_support_check(model)
        cpu_native_rotary(model)
        return super()._setup_hidden_states_capture(layer_ids)


def bridge_embedding_names(base_model) -> list[str]:
    """embed_input_ids (vLLM >= 0.11.1) and get_input_embeddings (0.11.0): give the model both."""
    added = []
    for wanted, existing in (("get_input_embeddings", "embed_input_ids"),
                             ("embed_input_ids", "get_input_embeddings")):
        if not hasattr(base_model, wanted) and hasattr(base_model, existing):
            setattr(base_model, wanted, getattr(base_model, existing))
            added.append(wanted)
    return added


def make_worker_logs_visible() -> None:
    """Spawned workers leave the root logger unconfigured, so speculators' INFO lines vanish."""
    logger = logging.getLogger("speculators")
    if not any(h for node in (logger, logging.getLogger()) for h in node.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


# eagle3_support_check: speculators 0.3 refuses any model that is not SupportsEagle3, and vLLM
# marks DeepseekV2ForCausalLM (DeepseekV3, Kimi-K2.x) so only from 0.18.1. Its patched forward
# needs only model.model's layers/norm and calls layer(positions=, hidden_states=, residual=),
# which DeepseekV2DecoderLayer accepts (llama_4_scaling defaults to None); so the check is
# relaxed for that family alone, and only when the config asks for no llama_4_scaling.
# Kimi-K2.5 wraps the DeepseekV3 model (KimiK25ForConditionalGeneration.language_model);
# speculators 0.3 reads model.model, so the wrapper gets that name pointing at the text model.
def eagle3_support_check(model) -> bool:
    """Let a DeepSeek-family model through speculators 0.3's check; True when it was needed."""
    check = getattr(custom_worker, "supports_eagle3", None)
    language_model = model.get_language_model() if hasattr(model, "get_language_model") else model
    if check is None or check(model) or not is_deepseek_family(language_model):
        return False
    if getattr(getattr(language_model, "config", None), "llama_4_scaling", None) is not None:
        return False  # the patched forward would drop the scaling: keep the refusal

    def supports_eagle3_or_deepseek(candidate) -> bool:
        return candidate is model or check(candidate)

    supports_eagle3_or_deepseek.__compat_original__ = check
    custom_worker.supports_eagle3 = supports_eagle3_or_deepseek
    if language_model is not model and not hasattr(model, "model"):
        object.__setattr__(model, "model", language_model.model)  # a plain alias, not a submodule
    return True


def is_deepseek_family(model) -> bool:
    return any(cls.__name__ == "DeepseekV2ForCausalLM" for cls in type(model).__mro__)


# cpu_native_rotary (an environment shim: CPU only). With vLLM's CPU rotary kernel, DeepSeek
# attention (VLLM_MLA_DISABLE=1, vLLM 0.16.0) gets every position after the first wrong
# (max error ~2-4 vs transformers); with forward_native it matches to 5e-6. Measured; the likely
# cause is that the kernel rotates q_pe, a strided slice of q, in place as if contiguous.
def cpu_native_rotary(model) -> int:
    """On CPU, route DeepSeek-family rotary embeddings to forward_native; returns how many."""
    import torch

    language_model = model.get_language_model() if hasattr(model, "get_language_model") else model
    if torch.cuda.is_available() or not is_deepseek_family(language_model):
        return 0
    changed = 0
    for module in language_model.modules():
        if hasattr(module, "forward_native") and hasattr(module, "_forward_method") \
                and "Rotary" in type(module).__name__:
            module._forward_method = module.forward_native
            changed += 1
    return changed
