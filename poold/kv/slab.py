"""Slab: a fixed-size slot allocator over one extent of `capacity` bytes.

It only does arithmetic (which slots are free, where a slot starts); it never touches memory, so
the store decides when bytes may move and the allocator stays trivially testable.
"""

from __future__ import annotations


class Slab:
    def __init__(self, capacity: int, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.slots = capacity // block_size
        if self.slots == 0:
            raise ValueError(f"{capacity} bytes hold no block of {block_size}")
        # A LIFO free list, lowest slot on top at first: a fresh slab fills from the front, and
        # a freed slot is the next one handed out, while its pages are still warm.
        self._free = list(range(self.slots - 1, -1, -1))
        self._in_use = bytearray(self.slots)  # catches double frees, which would alias two blocks

    @property
    def used(self) -> int:
        return self.slots - len(self._free)

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def empty(self) -> bool:
        """True when every slot is free."""
        return len(self._free) == self.slots

    def alloc(self) -> int | None:
        """A free slot, or None when the slab is full."""
        if not self._free:
            return None
        slot = self._free.pop()
        self._in_use[slot] = 1
        return slot

    def alloc_many(self, count: int) -> list[int]:
        """Up to `count` free slots, the ones alloc() would hand out, in ascending order: on a
        fresh slab, and after blocks that were neighbours were freed together, a run of
        consecutive slots, so the store can copy a batch into them in one go. (In the LIFO's
        own order, slots freed in ascending order would come back descending: one copy each.)"""
        if count <= 0:
            return []
        taken = self._free[-count:]
        del self._free[-count:]
        taken.sort()
        in_use = self._in_use
        for slot in taken:
            in_use[slot] = 1
        return taken

    def free(self, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} out of range")
        if not self._in_use[slot]:
            raise ValueError(f"slot {slot} is already free")
        self._in_use[slot] = 0
        self._free.append(slot)

    def offset(self, slot: int) -> int:
        """Byte offset of `slot` from the start of the extent."""
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} out of range")
        return slot * self.block_size

    def is_used(self, slot: int) -> bool:
        return bool(self._in_use[slot])
