"""The worker extension our probe engines load into every vLLM worker process.

Methods run inside the worker (via collective_rpc) to observe what speculators' own worker
extension relies on: the model object's methods, RPC reply shapes, logging. They return a
failure record rather than raising, so the parent learns the exception type and vLLM file:line.
Names start with `compat_` so vLLM's clash check never meets speculators' names.
"""

from __future__ import annotations

import logging
import os

from compat.shared.observe import definition_site, worker_failure

try:  # the cell's speculators release: probes then call its RPC names, as it does
    from speculators.data_generation.custom_worker import HiddenStatesWorkerExtension as _Base
    RELEASE_EXTENSION_ERROR: str | None = None
except Exception as exc:  # noqa: BLE001 - reported: the worker probes then say `error` with this
    _Base = object  # server-era releases ship no worker extension (their probes are n/a)
    RELEASE_EXTENSION_ERROR = f"{type(exc).__name__}: {exc}"


class ProbeWorkerExtension(_Base):  # type: ignore[misc, valid-type]
    def compat_release_extension(self):
        """Which class this extension is built on, and why not the release's when it is not."""
        return {"base": f"{_Base.__module__}.{_Base.__qualname__}", "import_error": RELEASE_EXTENSION_ERROR}

    def compat_prepare_captured(self, shape: str, num_layers: int, num_tokens: int):
        """What the next `_get_captured_states` returns: real tensors in the release's shape."""
        self._compat_captured = (shape, num_layers, num_tokens)

    def _get_captured_states(self):
        shape, num_layers, num_tokens = getattr(self, "_compat_captured", ("list", 3, 8))
        return self.compat_captured_states(shape, num_layers, num_tokens)

    def compat_identity(self):
        from vllm.distributed import get_tp_group

        return {"pid": os.getpid(), "tp_rank": get_tp_group().rank_in_group}

    def compat_base_model(self, lookup: str):
        """speculators 0.3 takes `model.model`; 0.4 prefers `model.get_language_model().model`."""
        model = self.model_runner.model
        if lookup == "language_model" and hasattr(model, "get_language_model"):
            return model.get_language_model().model
        return model.model

    def compat_call_embedding(self, lookup: str, method: str, token_ids: list[int], bridge: bool = False):
        """Call the embedding method speculators' patched forward calls, on the real model.

        With `bridge`, the compat adapter's name bridge is applied first and undone after.
        """
        import torch

        added: list[str] = []
        try:
            base = self.compat_base_model(lookup)
            if bridge:
                from compat.worker.adapter_extension import bridge_embedding_names

                added = bridge_embedding_names(base)
            # on the model's device: a CPU index into an embedding on cuda:0 fails in the harness
            device = next(base.parameters()).device
            ids = torch.tensor(token_ids, dtype=torch.long, device=device)
            try:
                embed = getattr(base, method)
            except AttributeError as exc:
                record = worker_failure(exc)
                record["where"] = definition_site(type(base))
                return record
            out = embed(ids)
            return {"shape": list(out.shape), "dtype": str(out.dtype), "class": type(base).__name__,
                    "bridged": added}
        except Exception as exc:  # noqa: BLE001 - reported to the parent as the observation
            return worker_failure(exc)
        finally:
            for name in added:
                delattr(base, name)

    def compat_captured_states(self, shape: str, num_layers: int, num_tokens: int):
        """Real tensors in the reply shape of speculators' `_get_captured_states`.

        0.3: a list with one [tokens, hidden] tensor per layer; 0.4: {request_id: that list}.
        Each value tells its rank and layer (rank * 100 + layer + 1), so the parent can tell
        which rank's reply it was handed.
        """
        import torch
        from vllm.distributed import get_tp_group

        hidden = self.model_runner.model_config.get_hidden_size()
        rank = get_tp_group().rank_in_group
        layers = [torch.full((num_tokens, hidden), float(rank * 100 + i + 1)) for i in range(num_layers)]
        return {"req_0": layers} if shape == "dict" else layers

    def compat_logging_reach(self, logger_name: str, level: int = logging.INFO, fix: bool = False):
        """Does `logging.getLogger(logger_name).log(level, ...)` in this worker reach the output?

        Emits a unique line while the worker's stdout and stderr file descriptors point at a
        temporary file, then looks for it there: what a user would (not) see in the worker log.
        """
        import sys
        import tempfile

        logger = logging.getLogger(logger_name)
        marker = f"compat-log-probe-{os.getpid()}-{id(self)}"
        if fix:
            from compat.worker.adapter_extension import make_worker_logs_visible

            make_worker_logs_visible()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        with tempfile.TemporaryFile(mode="w+b") as sink:
            try:
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                for fd in saved:
                    os.dup2(sink.fileno(), fd)
                logger.log(level, "%s", marker)
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                for handler in _handlers_on_path(logger):
                    handler.flush()
            finally:
                for fd, copy in saved.items():
                    os.dup2(copy, fd)
                    os.close(copy)
            sink.seek(0)
            shown = marker.encode() in sink.read()
        return {
            "pid": os.getpid(),
            "logger": logger_name,
            "effective_level": logging.getLevelName(logger.getEffectiveLevel()),
            "handlers": [f"{h.__class__.__name__}" for h in _handlers_on_path(logger)],
            "visible": shown,
        }


def _handlers_on_path(logger: logging.Logger) -> list[logging.Handler]:
    handlers = []
    node = logger
    while node is not None:
        handlers.extend(node.handlers)
        if not node.propagate:
            break
        node = node.parent
    return handlers
