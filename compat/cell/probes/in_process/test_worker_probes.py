"""Contracts that live in the workers: embedding method, execution phases, RPC replies, logs.

Each is observed on a real MultiprocExecutor whose workers load compat.worker.probe_worker.
"""

import contextlib
import logging

import pytest

from compat.cell import vllm_setup
from compat.shared.observe import ContractViolation, raise_if_worker_failed, speculators_call


def require_release_extension(engine):
    """The probe workers are built on the release's worker extension, whose RPC names the probes
    call. When it failed to import in the worker, nothing here observes the release: `error`."""
    if not hasattr(engine, "release_extension"):
        engine.release_extension = vllm_setup.rpc_from_rank(engine.executor, "compat_release_extension")
    failure = engine.release_extension["import_error"]
    if failure:
        raise RuntimeError(f"speculators' worker extension did not import in the vLLM worker ({failure}); "
                           f"the probe workers run on {engine.release_extension['base']}")
    return engine


@pytest.fixture
def engine(engine):
    """The shared TP=1 engine, once its workers are known to carry the release's extension."""
    return require_release_extension(engine)


@contextlib.contextmanager
def executor_as_used(engine, adapted):
    """The shared executor, switched to the adapter's executor subclass when that adapter is on."""
    executor = engine.executor
    original_class = type(executor)
    if "two_phase_execute" in adapted:
        from compat.cell.adapters.executor import executor_class

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
    """Scheduling is the harness's (version-proof); the release's part is the executor calls."""
    from vllm.v1.request import RequestStatus

    pending = False
    returns = []
    try:
        for _ in range(2):
            request = vllm_setup.make_request(request_id(), prompt)
            scheduler.add_request(request)
            output = scheduler.schedule()
            with speculators_call(type(executor).execute_model):
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
    reply = executor.collective_rpc("_get_captured_states", unique_reply_rank=0)
    probe_detail["reply"] = shape_of(reply)
    return reply


def _prepare_captured(executor, profile) -> list:
    """Every rank holds rank-tagged states in the release's shape; returns each rank's value,
    asked the version-proof way (without unique_reply_rank: a list, one value per rank)."""
    executor.collective_rpc("compat_prepare_captured", args=(profile.captured_shape, 3, 8))
    return list(executor.collective_rpc("_get_captured_states"))


def consumed(reply, profile):
    """What the release goes on with: 0.3 takes [0] of the reply, 0.4 the reply itself."""
    return reply[0] if profile.rpc_reply_subscript else reply


def same_value(a, b) -> bool:
    """Equal structure and equal tensors (lists and tuples alike: the release only iterates)."""
    import torch

    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    return False


def tagged(value) -> str:
    """shape_of plus the rank/layer tags of the tensors in it (rank * 100 + layer + 1)."""
    import torch

    tensors = value if isinstance(value, (list, tuple)) else list(value.values())[0] \
        if isinstance(value, dict) and value else [value]
    tags = [int(t.flatten()[0]) for t in tensors if isinstance(t, torch.Tensor) and t.numel()]
    return f"{shape_of(value)} (values {tags})"


def _check_reply(engine, profile, adapted, probe_detail):
    """What the release consumes from the reply must be rank 0's captured states, exactly."""
    with executor_as_used(engine, adapted) as executor:
        per_rank = _prepare_captured(executor, profile)
        probe_detail["per_rank"] = [tagged(v) for v in per_rank]
        with speculators_call(type(executor).collective_rpc):
            reply = _captured_states_reply(executor, profile, probe_detail)
            taken = consumed(reply, profile)
            probe_detail["consumed"] = tagged(taken)
            if not same_value(taken, per_rank[0]):
                raise ContractViolation(
                    f"MultiprocExecutor.collective_rpc(unique_reply_rank=0) at TP={engine.tp}: return changed: "
                    f"speculators takes {'reply[0]' if profile.rpc_reply_subscript else 'the reply'} = "
                    f"{tagged(taken)}, rank 0 captured {tagged(per_rank[0])}")


@pytest.mark.probe("collective_rpc_unique_reply_rank")
@pytest.mark.tp(1)
def test_collective_rpc_unique_reply_rank_tp1(engine, in_process, compat_mode, adapted, probe_detail):
    _check_reply(engine, in_process, adapted, probe_detail)


@pytest.mark.probe("aux_hidden_states_truthiness")
def test_aux_hidden_states_truthiness(engine, in_process, compat_mode, adapted, probe_detail):
    """`if not aux_hidden_states:` on what the release takes from the RPC reply (the reply's
    shape is collective_rpc_unique_reply_rank's contract; a failing RPC here is `error`)."""
    with executor_as_used(engine, adapted) as executor:
        _prepare_captured(executor, in_process)
        reply = _captured_states_reply(executor, in_process, probe_detail)
    with speculators_call():
        aux_hidden_states = consumed(reply, in_process)
        probe_detail["checked"] = shape_of(aux_hidden_states)
        if not aux_hidden_states:
            raise RuntimeError("Failed to capture hidden states from worker")


@pytest.mark.probe("worker_logging", advisory=True)
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
    _check_reply(require_release_extension(engines.get(2)), in_process, adapted, probe_detail)
