"""The executor half of the adapters: speculators 0.3 drives MultiprocExecutor as in vLLM 0.11."""

from __future__ import annotations

from typing import Any

from compat.shared.states import rank_reply


def executor_class(base: type) -> type:
    """A subclass of vLLM's MultiprocExecutor (`base`) that keeps 0.3's single-phase loop and
    its `collective_rpc(..., unique_reply_rank=0)[0]` indexing working on vLLM >= 0.11.1."""

    class CompatMultiprocExecutor(base):  # type: ignore[misc, valid-type]
        def execute_model(self, scheduler_output, *args: Any, **kwargs: Any):
            output = super().execute_model(scheduler_output, *args, **kwargs)
            if output is None:
                output = self.sample_tokens(None)
            return output

        def collective_rpc(self, method, *args: Any, unique_reply_rank=None, **kwargs: Any):
            if unique_reply_rank is None or not _is_speculators_rpc(method):
                return super().collective_rpc(method, *args, unique_reply_rank=unique_reply_rank, **kwargs)
            replies = super().collective_rpc(method, *args, **kwargs)
            return [rank_reply(replies, unique_reply_rank, len(replies), single_result=False)]

    CompatMultiprocExecutor.__qualname__ = f"Compat{base.__qualname__}"
    return CompatMultiprocExecutor


def _is_speculators_rpc(method: Any) -> bool:
    """vLLM's own calls (execute_model, sample_tokens, ...) keep vLLM's reply shape."""
    if not isinstance(method, str):
        return False
    from speculators.data_generation.custom_worker import HiddenStatesWorkerExtension

    return hasattr(HiddenStatesWorkerExtension, method)
