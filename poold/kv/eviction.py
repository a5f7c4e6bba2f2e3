"""LRU-K eviction (K=2 by default) with priority classes and pins.

Pure bookkeeping over keys: no memory, no threads, the clock injected. The victim is chosen in
this order:

1. the lowest priority rank first (a whole class goes before any block of a higher class, so for
   example vision-token blocks go before text prefix blocks);
2. within a class, blocks referenced fewer than K times first (their backward K-distance is
   infinite), oldest last reference first: a block seen once, by a scan, does not push out blocks
   that are reused;
3. then the block whose K-th most recent reference is oldest (the largest backward K-distance).

Pinned blocks are never victims. References closer together than `correlated_s` count as one
(LRU-K's correlated reference period), so a put followed at once by a get of the same block in
the same engine step does not look like reuse.

Victims come from a heap with lazy deletion: each reference pushes a fresh item, stale items are
skipped when they surface, and the heap is rebuilt when stale items outnumber live ones.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Entry:
    rank: int
    history: deque[float]  # the last K reference times, oldest first
    pins: int = 0
    seq: int = field(default=-1)  # the seq of this entry's live heap item; -1: none (pinned)


class LRUK(Generic[K]):
    def __init__(self, k: int = 2, *, clock: Callable[[], float] = time.monotonic,
                 correlated_s: float = 0.0) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = k
        self.correlated_s = correlated_s
        self._clock = clock
        self._entries: dict[K, _Entry] = {}
        self._heap: list[tuple[int, int, float, int, K]] = []
        self._seq = 0
        self._pinned = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    @property
    def pinned_count(self) -> int:
        """Keys with at least one pin."""
        return self._pinned

    def insert(self, key: K, rank: int = 0) -> None:
        """Track `key` (its first reference is now)."""
        if key in self._entries:
            raise KeyError(f"{key!r} is already tracked")
        self._entries[key] = entry = _Entry(rank, deque([self._clock()], maxlen=self.k))
        self._push(key, entry)

    def touch(self, key: K) -> None:
        """Record a reference to `key`."""
        entry = self._entries[key]
        now = self._clock()
        if self.correlated_s > 0 and now - entry.history[-1] < self.correlated_s:
            entry.history[-1] = now
        else:
            entry.history.append(now)
        self._push(key, entry)

    def set_rank(self, key: K, rank: int) -> None:
        entry = self._entries[key]
        entry.rank = rank
        self._push(key, entry)

    def remove(self, key: K) -> bool:
        """Forget `key`, pinned or not; False when it was not tracked."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        if entry.pins:
            self._pinned -= 1
        self._maybe_compact()
        return True

    def pin(self, key: K) -> None:
        """One more pin on `key`; pins nest, and a pinned key is never a victim."""
        entry = self._entries[key]
        entry.pins += 1
        if entry.pins == 1:
            self._pinned += 1
            entry.seq = -1  # its heap item goes stale; unpin pushes a fresh one

    def unpin(self, key: K) -> bool:
        """Drop one pin; False when `key` is unknown or not pinned (a no-op then)."""
        entry = self._entries.get(key)
        if entry is None or entry.pins == 0:
            return False
        entry.pins -= 1
        if entry.pins == 0:
            self._pinned -= 1
            self._push(key, entry)
        return True

    def pins(self, key: K) -> int:
        entry = self._entries.get(key)
        return entry.pins if entry is not None else 0

    def references(self, key: K) -> int:
        """How many references (at most K) the history holds."""
        return len(self._entries[key].history)

    def victim(self) -> K | None:
        """The key eviction would take next, without removing it; None when all are pinned."""
        while self._heap:
            _rank, _full, _t, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.seq == seq:
                return key
            heapq.heappop(self._heap)
        return None

    def pop_victim(self) -> K | None:
        """Remove and return the next victim; None when every tracked key is pinned."""
        key = self.victim()
        if key is not None:
            self.remove(key)
        return key

    def order(self) -> list[K]:
        """All unpinned keys, next victim first (for tests and inspection; O(n log n))."""
        return [item[-1] for item in sorted(self._item(k, e) for k, e in self._entries.items()
                                            if e.pins == 0)]

    def _item(self, key: K, entry: _Entry) -> tuple[int, int, float, int, K]:
        full = len(entry.history) >= self.k
        # Fewer than K references: infinite K-distance, ordered by the last reference (LRU).
        # K references: ordered by the K-th most recent one, the oldest being the farthest.
        when = entry.history[0] if full else entry.history[-1]
        return (entry.rank, int(full), when, entry.seq, key)

    def _push(self, key: K, entry: _Entry) -> None:
        if entry.pins:
            return
        self._seq += 1
        entry.seq = self._seq
        heapq.heappush(self._heap, self._item(key, entry))
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._heap = [self._item(k, e) for k, e in self._entries.items() if e.pins == 0]
            heapq.heapify(self._heap)
