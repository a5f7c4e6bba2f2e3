"""Block keys chain over the whole token prefix, like an engine's prefix-cache hashes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poold.kv import KEY_BYTES, chain_hash, prefix_keys

tokens_st = st.lists(st.integers(min_value=0, max_value=2**40), max_size=40)


def test_a_key_is_sixteen_bytes_and_deterministic() -> None:
    key = chain_hash(None, [1, 2, 3])
    assert len(key) == KEY_BYTES == 16
    assert key == chain_hash(None, [1, 2, 3])


def test_each_block_chains_on_its_parent() -> None:
    keys = prefix_keys(list(range(12)), 4)
    first = chain_hash(None, [0, 1, 2, 3])
    second = chain_hash(first, [4, 5, 6, 7])
    assert keys == [first, second, chain_hash(second, [8, 9, 10, 11])]


def test_a_trailing_partial_block_has_no_key() -> None:
    assert len(prefix_keys(list(range(11)), 4)) == 2
    assert prefix_keys([1, 2, 3], 4) == []


def test_the_same_block_after_different_prefixes_gets_different_keys() -> None:
    a = prefix_keys([1, 1, 1, 1, 9, 9, 9, 9], 4)
    b = prefix_keys([2, 2, 2, 2, 9, 9, 9, 9], 4)
    assert a[1] != b[1]


def test_parent_extra_and_block_boundaries_all_change_the_key() -> None:
    assert chain_hash(None, [1]) != chain_hash(b"", [1])
    assert chain_hash(None, [1], b"lora-7") != chain_hash(None, [1])
    assert chain_hash(None, [1, 2]) != chain_hash(chain_hash(None, [1]), [2])
    assert chain_hash(None, [256]) != chain_hash(None, [1, 0])
    assert prefix_keys([1, 2], 1, parent=b"p" * 16)[0] == chain_hash(b"p" * 16, [1])


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        chain_hash(None, [-1])
    with pytest.raises(ValueError):
        prefix_keys([1, 2], 0)


@given(tokens_st, tokens_st, st.integers(min_value=1, max_value=5))
def test_keys_agree_exactly_as_far_as_the_prefixes_do(a: list[int], b: list[int],
                                                      block: int) -> None:
    ka, kb = prefix_keys(a, block), prefix_keys(b, block)
    for n in range(min(len(ka), len(kb))):
        assert (ka[n] == kb[n]) == (a[:(n + 1) * block] == b[:(n + 1) * block])
