"""Contracts that live in the workers: embedding method, execution phases, RPC replies, logs.

Each is observed on a real MultiprocExecutor whose workers load compat.probe_worker.
"""

import contextlib
import logging

import pytest

from compat import vllm_setup
from compat.observe import ContractViolation, raise_if_worker_failed, speculators_call


@contextlib.contextmanager
def executor_as_used(engine, adapted):
    """The shared executor, switched to the adapter's executor subclass when that adapter is on."""
    executor = engine.executor
    original_class = type(executor)
    if "two_phase_execute" in adapted:
        from compat.compat_executor import executor_class

        executor.__class__ = executor_class(original_class)
    try:
        yield executor
    finally:
        executor.__class__ = original_class


def shape_of(value) -> str:
    """A short type-and-shape description: list[3 × Tensor[8, 256]], dict[1], None."""
    if isinstance(value, list):
        inner = {shape_of(v) for v in value}
        return f"list[{len(value)} × {inner.pop()}]" if len(inner) == 1 else f"list[{len(value)}]"
    if isinstance(value, dict):
        return f"dict[{len(value)}]"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__}[{', '.join(str(d) for d in shape)}]"
    return type(value).__name__


@pytest.mark.probe("embed_input_ids")
def test_embed_input_ids(engine, in_process, compat_mode, adapted, probe_detail):
    reply = vllm_setup.rpc_from_rank(engine.executor, "compat_call_embedding",
                                     in_process.embedding_lookup, in_process.embedding_method, [5, 6, 7],
                                     "embed_input_ids" in adapted)
    probe_detail["call"] = f"base_model.{in_process.embedding_method}(input_ids)"
    with speculators_call():
        raise_if_worker_failed(reply)
    probe_detail["embedding"] = reply


@pytest.mark.probe("two_phase_execute")
def test_two_phase_execute(engine, in_process, compat_mode, adapted, request_id, prompt, probe_detail):
    """Two model steps in a row, driven as the release drives them.

    0.3 calls execute_model once per step and nothing else; 0.4 follows each execute_model with
    sample_tokens(model_output). From vLLM 0.12 execute_model returns None and the next call
    without sample_tokens raises the state error.
    """
    scheduler = vllm_setup.make_scheduler(engine.vllm_config, engine.kv_cache_config)
    with executor_as_used(engine, adapted) as executor:
        _two_steps(executor, in_process, scheduler, request_id, prompt, probe_detail)


def _two_steps(executor, in_process, scheduler, request_id, prompt, probe_detail):
    from vllm.v1.request import RequestStatus

    pending = False
    returns = []
    try:
        with speculators_call(type(executor).execute_model):
            for _ in range(2):
                request = vllm_setup.make_request(request_id(), prompt)
                scheduler.add_request(request)
                output = scheduler.schedule()
                model_output = executor.execute_model(output)
                pending = model_output is None
                returns.append(type(model_output).__name__)
                if in_process.samples_after_execute:
                    executor.sample_tokens(model_output)
                    pending = False
                scheduler.finish_requests([request.request_id], RequestStatus.FINISHED_ABORTED)
    finally:
        probe_detail["execute_model_returned"] = returns
        if pending and hasattr(executor, "sample_tokens"):
            executor.sample_tokens(None)


def _captured_states_reply(executor, profile, probe_detail):
    """`collective_rpc("_get_captured_states", unique_reply_rank=0)`, as the release calls it."""
    executor.collective_rpc("compat_prepare_captured", args=(profile.captured_shape, 3, 8))
    reply = executor.collective_rpc("_get_captured_states", unique_reply_rank=0)
    probe_detail["reply"] = shape_of(reply)
    return reply


def _check_reply_shape(engine, profile, adapted, probe_detail):
    with executor_as_used(engine, adapted) as executor, speculators_call(type(executor).collective_rpc):
        reply = _captured_states_reply(executor, profile, probe_detail)
        per_rank = shape_of(vllm_setup.rpc_from_rank(executor, "_get_captured_states"))
        if profile.rpc_reply_subscript:
            expected, ok = f"list[1 × {per_rank}]", isinstance(reply, list) and len(reply) == 1
        else:
            expected, ok = per_rank, shape_of(reply) == per_rank
        probe_detail["expected"] = expected
        if not ok:
            raise ContractViolation(
                f"MultiprocExecutor.collective_rpc(unique_reply_rank=0) at TP={engine.tp}: return changed: "
                f"speculators expects {expected}, got {shape_of(reply)}")


@pytest.mark.probe("collective_rpc_unique_reply_rank")
@pytest.mark.tp(1)
def test_collective_rpc_unique_reply_rank_tp1(engine, in_process, compat_mode, adapted, probe_detail):
    _check_reply_shape(engine, in_process, adapted, probe_detail)


@pytest.mark.probe("aux_hidden_states_truthiness")
def test_aux_hidden_states_truthiness(engine, in_process, compat_mode, adapted, probe_detail):
    """`if not aux_hidden_states:` on what the release takes from the RPC reply."""
    with executor_as_used(engine, adapted) as executor, speculators_call():
        reply = _captured_states_reply(executor, in_process, probe_detail)
        aux_hidden_states = reply[0] if in_process.rpc_reply_subscript else reply
        probe_detail["checked"] = shape_of(aux_hidden_states)
        if not aux_hidden_states:
            raise RuntimeError("Failed to capture hidden states from worker")


@pytest.mark.probe("worker_logging")
def test_worker_logging(engine, in_process, compat_mode, adapted, probe_detail):
    """INFO lines of the release's worker extension: do they show in a worker's output?"""
    reach = vllm_setup.rpc_from_rank(engine.executor, "compat_logging_reach", in_process.worker_logger,
                                     logging.INFO, "embed_input_ids" in adapted)
    probe_detail.update(reach)
    with speculators_call():
        if not reach["visible"]:
            raise ContractViolation(
                f"logging.getLogger({in_process.worker_logger!r}).info(...) in a worker process: the line "
                f"never shows in the worker's output (effective level {reach['effective_level']}, "
                f"handlers: {', '.join(reach['handlers']) or 'none'})")


@pytest.mark.probe("collective_rpc_unique_reply_rank")
@pytest.mark.tp(2)
def test_collective_rpc_unique_reply_rank_tp2(engines, in_process, compat_mode, adapted, probe_detail):
    _check_reply_shape(engines.get(2), in_process, adapted, probe_detail)
