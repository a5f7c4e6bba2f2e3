"""The data path: copying blocks into and out of slabs, re-checking lease loss as it goes.

The only code that touches leased memory. It asks a slab for its buffer at the start of every run
of at most `CHECK_EVERY` blocks on one lease; the slab refuses (LeaseLost) once its keepalive
thread marked the lease lost or the store gave it up, so no copy starts on memory the store no
longer holds. Within a run, blocks that are neighbours both in the lease and in the caller's
buffer move in one copy: a batch into a fresh lease is one memcpy per run, not one per block.
Deciding what a racing copy means (not indexed, a miss) is the store's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

from poold import errors
from poold.kv.buffers import BlockSource
from poold.kv.leases import LeaseSlab

# Re-check lease loss this often within one batch: bounds how much a batch can still copy after
# the keepalive thread flips the flag.
CHECK_EVERY = 64

# A slot reserved for one block of a put, nobody reads it until the put commits:
# (position in the caller's batch, key, slab, slot).
Reserved: TypeAlias = tuple[int, bytes, LeaseSlab, int]
# A committed block a get found: (position in the caller's batch, slab, byte offset in the slab).
Found: TypeAlias = tuple[int, LeaseSlab, int]


def buffer_or_none(slab: LeaseSlab) -> memoryview | None:
    try:
        return slab.buffer()
    except errors.PooldError:  # LeaseLost, or ClientError for a mapping closed meanwhile
        return None


def _runs(slabs: Sequence[LeaseSlab]) -> Iterator[tuple[int, int]]:
    """[start, end) of each run: consecutive items on one slab, at most CHECK_EVERY long."""
    n, i = len(slabs), 0
    while i < n:
        slab, end, j = slabs[i], min(n, i + CHECK_EVERY), i + 1
        while j < end and slabs[j] is slab:
            j += 1
        yield i, j
        i = j


def _neighbours(positions: Sequence[int], places: Sequence[int], start: int, end: int,
                step: int) -> Iterator[tuple[int, int]]:
    """Split [start, end) where the next item is not right after this one in both the caller's
    batch (positions, +1) and the lease (places, +step)."""
    first, place = positions[start], places[start]
    if (positions[start:end] == list(range(first, first + end - start))
            and places[start:end] == list(range(place, place + (end - start) * step, step))):
        yield start, end  # one run (a batch into fresh slots): compared in C, not item by item
        return
    a = start
    while a < end:
        b, pos, place = a + 1, positions[a], places[a]
        while b < end and positions[b] == pos + (b - a) and places[b] == place + (b - a) * step:
            b += 1
        yield a, b
        a = b


def write_blocks(reserved: list[Reserved], source: BlockSource) -> list[bool]:
    """Copy each reserved block of `source` into its slot; returns which copies happened."""
    size = source.size
    written = [False] * len(reserved)
    positions = [item[0] for item in reserved]
    slots = [item[3] for item in reserved]
    for start, end in _runs([item[2] for item in reserved]):
        buffer = buffer_or_none(reserved[start][2])
        if buffer is None:
            continue
        merge = source.whole is not None
        spans = _neighbours(positions, slots, start, end, 1) if merge else (
            (a, a + 1) for a in range(start, end))
        try:
            for a, b in spans:
                offset = slots[a] * size
                buffer[offset:offset + (b - a) * size] = source.span(positions[a], b - a)
                written[a:b] = [True] * (b - a)
        except ValueError:  # the mapping was released under us: the lease was given up
            continue
    return written


def hand_out_slots(reserved: list[Reserved], size: int,
                   fill: Callable[[list[int], list[memoryview]], None]) -> list[bool]:
    """Call `fill` once with the positions and writable views of the reserved slots whose lease
    is still held; returns which were handed out (all of those, once `fill` returned)."""
    handed = [False] * len(reserved)
    positions: list[int] = []
    views: list[memoryview] = []
    buffers: dict[LeaseSlab, memoryview | None] = {}  # each lease checked once
    for i, (position, _key, slab, slot) in enumerate(reserved):
        if slab not in buffers:
            buffers[slab] = buffer_or_none(slab)
        buffer = buffers[slab]
        if buffer is not None:
            positions.append(position)
            views.append(buffer[slot * size:(slot + 1) * size])
            handed[i] = True
    if views:
        fill(positions, views)
    return handed


def read_into(found: list[Found], out: memoryview, size: int) -> list[bool]:
    """Copy each found block to out[position * size:]; returns which copies happened."""
    copied = [False] * len(found)
    positions = [item[0] for item in found]
    offsets = [item[2] for item in found]
    for start, end in _runs([item[1] for item in found]):
        buffer = buffer_or_none(found[start][1])
        if buffer is None:
            continue
        for a, b in _neighbours(positions, offsets, start, end, size):
            dst, src, length = positions[a] * size, offsets[a], (b - a) * size
            out[dst:dst + length] = buffer[src:src + length]
            copied[a:b] = [True] * (b - a)
    return copied


def read_blocks(found: list[Found], size: int, sink: Callable[[memoryview], Any],
                out: list[Any]) -> None:
    """For each found block, hand its bytes to sink and keep its answer in out[position];
    blocks on a lease found lost are skipped (left None)."""
    for start, end in _runs([item[1] for item in found]):
        buffer = buffer_or_none(found[start][1])
        if buffer is not None:  # reads run under the store's lock: nothing unmaps meanwhile
            for i, _slab, offset in found[start:end]:
                out[i] = sink(buffer[offset:offset + size])
