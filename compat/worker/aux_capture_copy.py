"""The repair for aux layer id 0 (the registry's aux_layer_id_zero): capture a copy of the embeddings.

vLLM's aux capture (`EagleModelMixin._maybe_add_hidden_state`, vllm/model_executor/models/interfaces.py,
0.23.0 - 0.26.0) appends `hidden_states` itself while there is no residual yet (id 0: the embeddings). The
first decoder layer takes that same tensor as its residual (`residual = hidden_states`,
vllm/model_executor/models/llama.py) and the
fused add-RMSNorm updates it in place on CUDA through every layer, so id 0's slot ends as the last layer's
output before the final norm. Appending a copy where there is no residual leaves every other id as vLLM
captures it. Applied in the process that runs the model (the engine's worker).
"""

from __future__ import annotations

ADAPTER = {"id": "aux_capture_copy",
           "why": "extract_hidden_states' aux capture appends the embeddings tensor itself for id 0, which the first "
                  "layer's fused add-RMSNorm then updates in place on CUDA: the slot is captured as a copy"}


def apply() -> bool:
    """Patch the installed vLLM's aux capture; False where it has none to patch (the capture is inline)."""
    try:
        from vllm.model_executor.models.interfaces import EagleModelMixin
    except ImportError:
        return False
    original = getattr(EagleModelMixin, "_maybe_add_hidden_state", None)
    if original is None:
        return False
    if getattr(original, "_compat_copy", False):
        return True

    def _maybe_add_hidden_state(self, aux_hidden_states, layer_idx, hidden_states, residual):
        if residual is None and layer_idx in self.aux_hidden_state_layers:
            aux_hidden_states.append(hidden_states.clone())
            return aux_hidden_states
        return original(self, aux_hidden_states, layer_idx, hidden_states, residual)

    _maybe_add_hidden_state._compat_copy = True  # type: ignore[attr-defined]
    EagleModelMixin._maybe_add_hidden_state = _maybe_add_hidden_state
    return True
