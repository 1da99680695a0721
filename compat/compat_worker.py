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
