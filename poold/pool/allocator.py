"""Best-fit extent allocator with coalescing, aligned to a fixed unit.

Owns the free/used bookkeeping of one address space [base, base + size). Free extents are kept
sorted by offset so a free merges with its neighbours in O(log n) search; best fit scans the free
list (n stays small: a hole per live extent at worst). Callers persist nothing here: the ledger
rebuilds an allocator from its rows with `reserve` after a restart.
"""

from __future__ import annotations

import bisect

from poold.types import Extent


class AllocatorError(ValueError):
    """A reserve or free that does not match the allocator's state: a caller bug, never input."""


class ExtentAllocator:
    def __init__(self, size: int, align: int, base: int = 0) -> None:
        if align <= 0 or size < 0 or size % align or base % align:
            raise AllocatorError(f"bad space: base={base} size={size} align={align}")
        self.base, self.size, self.align = base, size, align
        # Parallel sorted lists of free offsets and lengths; used extents by offset.
        self._free_offsets: list[int] = [base] if size else []
        self._free_lengths: list[int] = [size] if size else []
        self._used: dict[int, int] = {}

    @property
    def used_bytes(self) -> int:
        return sum(self._used.values())

    @property
    def free_bytes(self) -> int:
        return self.size - self.used_bytes

    @property
    def largest_free(self) -> int:
        return max(self._free_lengths, default=0)

    def free_extents(self) -> list[Extent]:
        return [Extent(o, n) for o, n in zip(self._free_offsets, self._free_lengths, strict=True)]

    def best_fit(self, length: int) -> int | None:
        """Size of the smallest hole that can take `length` (None: none can), to compare spaces."""
        fits = [n for n in self._free_lengths if n >= length]
        return min(fits) if fits else None

    def allocate(self, length: int) -> Extent | None:
        """Take `length` bytes (a positive multiple of align) from the smallest hole that fits.

        Ties go to the lowest offset, which keeps the space compact. None when nothing fits.
        """
        self._check_length(length)
        best = -1
        for i, hole in enumerate(self._free_lengths):
            if hole >= length and (best < 0 or hole < self._free_lengths[best]):
                best = i
                if hole == length:
                    break
        if best < 0:
            return None
        offset = self._free_offsets[best]
        self._take(best, offset, length)
        return Extent(offset, length)

    def reserve(self, extent: Extent) -> None:
        """Mark an exact extent used (rebuilding state from the ledger)."""
        self._check_length(extent.length)
        if extent.offset % self.align:
            raise AllocatorError(f"offset {extent.offset} is not aligned to {self.align}")
        i = bisect.bisect_right(self._free_offsets, extent.offset) - 1
        if i < 0 or extent.end > self._free_offsets[i] + self._free_lengths[i]:
            raise AllocatorError(f"{extent} is not free")
        self._take(i, extent.offset, extent.length)

    def free(self, extent: Extent) -> None:
        """Return a used extent, merging it with free neighbours."""
        if self._used.get(extent.offset) != extent.length:
            raise AllocatorError(f"{extent} is not allocated")
        del self._used[extent.offset]
        i = bisect.bisect_left(self._free_offsets, extent.offset)
        offset, length = extent.offset, extent.length
        if i < len(self._free_offsets) and self._free_offsets[i] == extent.end:
            length += self._free_lengths.pop(i)
            self._free_offsets.pop(i)
        if i > 0 and self._free_offsets[i - 1] + self._free_lengths[i - 1] == offset:
            self._free_lengths[i - 1] += length
            return
        self._free_offsets.insert(i, offset)
        self._free_lengths.insert(i, length)

    def _check_length(self, length: int) -> None:
        if length <= 0 or length % self.align:
            raise AllocatorError(f"length {length} is not a positive multiple of {self.align}")

    def _take(self, i: int, offset: int, length: int) -> None:
        """Carve [offset, offset+length) out of free hole i, which contains it."""
        hole_offset, hole_length = self._free_offsets[i], self._free_lengths[i]
        before = offset - hole_offset
        after = hole_offset + hole_length - (offset + length)
        pieces = [(o, n) for o, n in ((hole_offset, before), (offset + length, after)) if n > 0]
        self._free_offsets[i : i + 1] = [o for o, _ in pieces]
        self._free_lengths[i : i + 1] = [n for _, n in pieces]
        self._used[offset] = length
