"""Marking the contract under test inside a probe, so its failure reads as `broken`.

A probe sets the stage with harness code (a failure there is `error`: the probe could not run),
then makes the speculators-shaped call inside `speculators_call()`. An exception escaping that
block is tagged as the contract's failure; the pytest plugin reads the tag.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from typing import Any, Iterator

from compat.shared.tracebacks import vllm_relative

CONTRACT_TAG = "__compat_contract__"


class ContractViolation(AssertionError):
    """A call that did not raise but returned something the speculators release cannot use."""

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.where = where


class WorkerError(Exception):
    """An exception raised inside a vLLM worker process, carried back by our worker extension."""

    def __init__(self, type_name: str, message: str, where: str | None):
        super().__init__(message)
        self.type_name = type_name
        self.where = where


def where_in_vllm(exc: BaseException) -> str | None:
    """file:line of the innermost traceback frame that lies in the vllm package."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        rel = vllm_relative(frame.filename)
        if rel:
            found = f"{rel}:{frame.lineno}"
    return found


def definition_site(obj: Any) -> str | None:
    """file:line where a vLLM class or function is defined (for errors raised while binding)."""
    candidates = [obj]
    if inspect.isclass(obj) and "__init__" in vars(obj):
        candidates.insert(0, inspect.unwrap(obj.__init__))
    home = _source_file(obj)
    for target in candidates:
        filename = _source_file(target)
        if filename is None or (target is not obj and filename != home):
            continue
        try:
            _, line = inspect.getsourcelines(target)
        except (OSError, TypeError):
            continue
        rel = vllm_relative(filename)
        if rel:
            return f"{rel}:{line}"
    return None


def _source_file(obj: Any) -> str | None:
    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        return None


@contextlib.contextmanager
def speculators_call(target: Any = None) -> Iterator[None]:
    """The block holds the call exactly as the cell's speculators release makes it.

    `target` is the vLLM object called, used as `where` when the failure has no vLLM frame
    (a TypeError while binding arguments, a pydantic validation error).
    """
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, Exception):
            where = getattr(exc, "where", None) or where_in_vllm(exc)
            if where is None and target is not None:
                where = definition_site(target)
            setattr(exc, CONTRACT_TAG, {"where": where})
        raise


def describe(exc: BaseException) -> dict[str, Any]:
    """The `error` object of a probe result: exception type, message, vLLM file:line."""
    tag = getattr(exc, CONTRACT_TAG, None) or {}
    type_name = exc.type_name if isinstance(exc, WorkerError) else type(exc).__name__
    message = str(exc).strip()
    return {"type": type_name, "message": message[:2000], "where": tag.get("where") or where_in_vllm(exc)}


def worker_failure(exc: BaseException) -> dict[str, Any]:
    """What a worker-side RPC returns instead of raising, so the parent sees type and place."""
    return {"__worker_error__": True, "type": type(exc).__name__, "message": str(exc)[:2000],
            "where": where_in_vllm(exc)}


def raise_if_worker_failed(reply: Any) -> Any:
    if isinstance(reply, dict) and reply.get("__worker_error__"):
        raise WorkerError(reply["type"], reply["message"], reply["where"])
    return reply


class WrongHiddenStates(ContractViolation):
    """Extraction returned without an error, but the hidden states differ from the reference."""
