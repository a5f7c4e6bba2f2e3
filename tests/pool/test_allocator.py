"""Properties of the pure allocator under random churn (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poold.pool import AllocatorError, ExtentAllocator
from poold.types import Extent

ALIGN = 4


def check(allocator: ExtentAllocator, live: list[Extent]) -> None:
    used = sorted(live, key=lambda e: e.offset)
    for a, b in itertools.pairwise(used):
        assert a.end <= b.offset, "live extents overlap"
    for e in used:
        assert e.offset % ALIGN == 0 and e.length % ALIGN == 0
        assert allocator.base <= e.offset and e.end <= allocator.base + allocator.size
    free = allocator.free_extents()
    assert allocator.used_bytes + sum(f.length for f in free) == allocator.size
    assert allocator.used_bytes == sum(e.length for e in used)
    # Free extents never touch (coalescing) and never overlap used ones.
    for a, b in itertools.pairwise(free):
        assert a.end < b.offset
    for f in free:
        assert not any(f.overlaps(e) for e in used)


@settings(max_examples=300, deadline=None)
@given(
    base_units=st.integers(0, 8),
    size_units=st.integers(1, 64),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 24), st.integers(0, 1000)), max_size=80),
)
def test_random_churn_keeps_invariants(base_units: int, size_units: int,
                                       ops: list[tuple[bool, int, int]]) -> None:
    allocator = ExtentAllocator(size_units * ALIGN, ALIGN, base=base_units * ALIGN)
    live: list[Extent] = []
    for is_alloc, units, pick in ops:
        if is_alloc or not live:
            got = allocator.allocate(units * ALIGN)
            if got is None:
                assert allocator.largest_free < units * ALIGN, "refused while a hole fits"
            else:
                assert got.length == units * ALIGN
                live.append(got)
        else:
            allocator.free(live.pop(pick % len(live)))
        check(allocator, live)
    for extent in live:
        allocator.free(extent)
    assert allocator.free_extents() == [Extent(allocator.base, allocator.size)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=20))
def test_rebuild_with_reserve_matches_original(lengths: list[int]) -> None:
    original = ExtentAllocator(256 * ALIGN, ALIGN)
    live = [e for n in lengths if (e := original.allocate(n * ALIGN)) is not None]
    for extent in live[::2]:
        original.free(extent)
    rebuilt = ExtentAllocator(256 * ALIGN, ALIGN)
    for extent in live[1::2]:
        rebuilt.reserve(extent)
    assert rebuilt.free_extents() == original.free_extents()


def test_best_fit_prefers_smallest_hole() -> None:
    a = ExtentAllocator(100 * ALIGN, ALIGN)
    x = [a.allocate(n * ALIGN) for n in (10, 1, 3, 1, 50)]
    assert all(x)
    a.free(x[0])  # hole of 10 at 0
    a.free(x[2])  # hole of 3 at 11
    got = a.allocate(3 * ALIGN)
    assert got == x[2]


@pytest.mark.parametrize(("size", "align", "base"), [
    (16, 0, 0), (16, -ALIGN, 0),  # no alignment
    (-ALIGN, ALIGN, 0),  # a negative size, aligned
    (ALIGN + 2, ALIGN, 0),  # a size that is not a multiple of the alignment
    (16, ALIGN, 2),  # a base off the alignment
])
def test_a_bad_space_is_refused_by_what_it_is(size: int, align: int, base: int) -> None:
    with pytest.raises(AllocatorError) as refused:
        ExtentAllocator(size, align, base)
    assert str(refused.value) == f"bad space: base={base} size={size} align={align}"


def test_an_empty_space_is_valid_and_has_nothing_free() -> None:
    """A device of no capacity (or a claim of none) still gets an allocator; it hands out
    nothing and reports no free extent, not one of length 0."""
    empty = ExtentAllocator(0, ALIGN, base=8 * ALIGN)
    assert empty.free_extents() == [] and empty.largest_free == 0 and empty.free_bytes == 0
    assert empty.allocate(ALIGN) is None


@pytest.mark.parametrize("bad", [0, -ALIGN, ALIGN + 1])
def test_bad_lengths_are_refused(bad: int) -> None:
    with pytest.raises(AllocatorError):
        ExtentAllocator(16 * ALIGN, ALIGN).allocate(bad)


def test_double_free_and_foreign_free_are_refused() -> None:
    a = ExtentAllocator(16 * ALIGN, ALIGN)
    e = a.allocate(ALIGN)
    assert e is not None
    a.free(e)
    with pytest.raises(AllocatorError, match=r"is not allocated$"):
        a.free(e)
    with pytest.raises(AllocatorError, match=r"^Extent\(offset=4, length=64\) is not free$"):
        a.reserve(Extent(ALIGN, 16 * ALIGN))
    with pytest.raises(AllocatorError, match=r"^offset 6 is not aligned to 4$"):
        a.reserve(Extent(6, ALIGN))


def test_with_byte_alignment_a_one_byte_remainder_stays_free() -> None:
    """The pieces a take leaves on either side stay free however small: one byte, where the
    alignment is one byte."""
    space = ExtentAllocator(5, 1)
    space.reserve(Extent(1, 3))
    assert space.free_extents() == [Extent(0, 1), Extent(4, 1)]
    assert space.allocate(1) == Extent(0, 1) and space.allocate(1) == Extent(4, 1)
    assert space.allocate(1) is None
