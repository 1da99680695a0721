import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat.shared.states import default_layer_ids, rank_reply, split_by_lengths

replies = st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=3), max_leaves=8)


@given(world=st.integers(1, 8), data=st.data(), value=replies)
def test_rank_reply_finds_the_rank_value_in_every_form(world, data, value):
    rank = data.draw(st.integers(0, world - 1))
    per_rank = [value if r == rank else ["other", r] for r in range(world)]
    assert rank_reply(per_rank, rank, world, single_result=False) == value  # no unique_reply_rank
    assert rank_reply([value], rank, world, single_result=False) == value  # 0.11.0 with it
    assert rank_reply(value, rank, world, single_result=True) == value  # 0.11.1+ with it


@given(world=st.integers(2, 8), extra=st.integers(1, 3))
def test_rank_reply_rejects_a_list_of_the_wrong_length(world, extra):
    with pytest.raises(ValueError, match="expected a list"):
        rank_reply(list(range(world + extra)), 0, world, single_result=False)


def test_rank_reply_rejects_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="outside world size"):
        rank_reply([1, 2], 2, 2, single_result=False)


@given(lengths=st.lists(st.integers(0, 40), max_size=12), hidden=st.integers(1, 5))
def test_split_by_lengths_round_trips(lengths, hidden):
    rows = np.arange(sum(lengths) * hidden).reshape(sum(lengths), hidden)
    pieces = split_by_lengths(rows, lengths)
    assert [len(p) for p in pieces] == lengths
    joined = np.concatenate(pieces) if pieces else np.empty((0, hidden), dtype=rows.dtype)
    assert np.array_equal(joined, rows)


@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12), off=st.integers(1, 5))
def test_split_by_lengths_refuses_a_row_count_that_does_not_add_up(lengths, off):
    rows = np.zeros((sum(lengths) + off, 2))
    with pytest.raises(ValueError, match="rows for sequences"):
        split_by_lengths(rows, lengths)


@given(n=st.integers(4, 200))
def test_default_layers_are_distinct_in_range_and_keep_the_last(n):
    layers = default_layer_ids(n)
    assert len(layers) == len(set(layers))
    assert all(0 <= layer < n for layer in layers)
    assert layers[0] == 2 and layers[-1] == n - 1
    assert set(layers) == {2, n // 2, n - 3, n - 1}


def test_default_layers_for_kimi_and_the_tiny_model():
    assert default_layer_ids(61) == [2, 30, 58, 60]
    assert default_layer_ids(6) == [2, 3, 5]


def test_default_layers_refuse_tiny_models():
    with pytest.raises(ValueError, match="at least 4"):
        default_layer_ids(3)
