"""The data path: copying blocks into and out of slabs, re-checking lease loss as it goes.

The only code that touches leased memory. It asks a slab for its buffer at the start of every run
of blocks on one lease and every `CHECK_EVERY` blocks within it; the slab refuses (LeaseLost) once
its keepalive thread marked the lease lost or the store gave it up, so no copy starts on memory
the store no longer holds. Deciding what a racing copy means (not indexed, a miss) is the store's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poold import errors
from poold.kv.leases import LeaseSlab

# Re-check lease loss this often within one batch: bounds how much a batch can still copy after
# the keepalive thread flips the flag.
CHECK_EVERY = 64


@dataclass
class Reserved:
    """A slot reserved for one block of a put: nobody reads it until the put commits."""

    index: int  # position in the caller's batch
    key: bytes
    slab: LeaseSlab
    slot: int


def buffer_or_none(slab: LeaseSlab) -> memoryview | None:
    try:
        return slab.buffer()
    except errors.PooldError:  # LeaseLost, or ClientError for a mapping closed meanwhile
        return None


def write_blocks(reserved: list[Reserved], views: list[memoryview], size: int) -> list[bool]:
    """Copy views[item.index] into each reserved slot; returns which copies happened."""
    written = [False] * len(reserved)
    current: LeaseSlab | None = None
    buffer: memoryview | None = None
    for n, item in enumerate(reserved):
        if item.slab is not current or n % CHECK_EVERY == 0:
            current, buffer = item.slab, buffer_or_none(item.slab)
        if buffer is None:
            continue
        offset = item.slab.slab.offset(item.slot)
        try:
            buffer[offset:offset + size] = views[item.index]
        except ValueError:  # the mapping was released under us: the lease was given up
            buffer = None
            continue
        written[n] = True
    return written


def read_blocks(found: list[tuple[int, LeaseSlab, int]], size: int,
                sink: Callable[[int, memoryview], Any], out: list[Any]) -> None:
    """For each (position, slab, offset), hand the block's bytes to sink and keep its answer in
    out[position]; blocks on a lease found lost are skipped (left None)."""
    current: LeaseSlab | None = None
    buffer: memoryview | None = None
    for n, (i, slab, offset) in enumerate(found):
        if slab is not current or n % CHECK_EVERY == 0:
            current, buffer = slab, buffer_or_none(slab)
        if buffer is not None:  # reads run under the store's lock: nothing unmaps meanwhile
            out[i] = sink(i, buffer[offset:offset + size])
