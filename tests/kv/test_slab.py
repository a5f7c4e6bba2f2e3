"""The slot allocator: every slot handed out once, offsets in bounds, double frees refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poold.kv import Slab


def test_slots_fill_the_extent_from_the_front() -> None:
    slab = Slab(10_000, 4096)  # the tail of 1808 bytes holds no block
    assert slab.slots == 2 and slab.empty
    assert [slab.alloc(), slab.alloc(), slab.alloc()] == [0, 1, None]
    assert slab.used == 2 and slab.free_count == 0
    assert slab.offset(1) == 4096


def test_freed_slots_come_back_and_double_frees_are_refused() -> None:
    slab = Slab(4 * 4096, 4096)
    slots = [slab.alloc() for _ in range(4)]
    slab.free(2)
    assert slab.alloc() == 2
    slab.free(2)
    with pytest.raises(ValueError, match="already free"):
        slab.free(2)
    for slot in (0, 1, 3):
        slab.free(slot)
    assert slab.empty and slots == [0, 1, 2, 3]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        Slab(100, 4096)
    with pytest.raises(ValueError):
        Slab(4096, 0)
    with pytest.raises(ValueError):
        Slab(4096, 4096).offset(1)


@given(st.lists(st.booleans(), max_size=200))
def test_no_slot_is_handed_out_twice(ops: list[bool]) -> None:
    slab = Slab(16 * 64, 64)
    held: set[int] = set()
    for take in ops:
        if take:
            slot = slab.alloc()
            if slot is None:
                assert len(held) == 16
            else:
                assert slot not in held and 0 <= slab.offset(slot) < 16 * 64
                held.add(slot)
        elif held:
            slab.free(held.pop())
        assert slab.used == len(held)


def test_alloc_many_hands_out_what_alloc_would_in_ascending_order() -> None:
    one, many = Slab(8 * 64, 64), Slab(8 * 64, 64)
    assert many.alloc_many(3) == [one.alloc(), one.alloc(), one.alloc()] == [0, 1, 2]
    many.free(1)
    one.free(1)
    assert many.alloc_many(10) == [one.alloc() for _ in range(6)] == [1, 3, 4, 5, 6, 7]
    for slot in (4, 5, 6):  # neighbours freed together (a batch discarded) come back as a run
        many.free(slot)
        one.free(slot)
    assert many.alloc_many(3) == sorted(one.alloc() for _ in range(3)) == [4, 5, 6]
    assert many.alloc_many(1) == [] and many.alloc_many(0) == [] and many.used == 8
    many.free(1)
    with pytest.raises(ValueError, match="already free"):
        many.free(1)
