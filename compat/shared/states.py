"""Pure pieces of hidden-state handling, shared by adapters, probes and the Kimi suite."""

from __future__ import annotations

from typing import Any, Sequence


def rank_reply(reply: Any, rank: int, world_size: int, single_result: bool) -> Any:
    """One rank's value from what `collective_rpc` returned.

    Without unique_reply_rank the reply is a list with one value per rank (every vLLM release);
    with it, vLLM 0.11.0 returns a one-element list and 0.11.1+ the value itself
    (`single_result`). The value may itself be a list, so the caller must say which form it has.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    if single_result:
        return reply
    if not isinstance(reply, list) or len(reply) not in (1, world_size):
        raise ValueError(f"expected a list of 1 or {world_size} replies, got {type(reply).__name__}"
                         f"{'[' + str(len(reply)) + ']' if isinstance(reply, list) else ''}")
    return reply[0] if len(reply) == 1 else reply[rank]


def split_by_lengths(rows: Any, lengths: Sequence[int]) -> list[Any]:
    """Cut concatenated rows (a tensor or array, first axis) back into one block per sequence."""
    if any(n < 0 for n in lengths):
        raise ValueError(f"negative sequence length in {list(lengths)}")
    total = sum(lengths)
    if len(rows) != total:
        raise ValueError(f"{len(rows)} rows for sequences of {list(lengths)} tokens ({total} in all)")
    pieces, offset = [], 0
    for n in lengths:
        pieces.append(rows[offset:offset + n])
        offset += n
    return pieces


def default_layer_ids(num_layers: int) -> list[int]:
    """speculators 0.3/0.4's default EAGLE-3 layers [2, n//2, n-3, n-1], without repeats.

    For n < 8 the rule repeats a layer (n=6: 2, 3, 3, 5) and speculators would capture it twice;
    we keep the first occurrence and the order, and reject models too small for layer 2.
    """
    if num_layers < 4:
        raise ValueError(f"{num_layers} layers: the default selection needs at least 4 (it takes layer 2 and n-1)")
    wanted = [2, num_layers // 2, num_layers - 3, num_layers - 1]
    return list(dict.fromkeys(wanted))
