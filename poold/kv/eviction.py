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

Candidates live in two places. A block whose every reference came in order sits in one
insertion-ordered dict per class, in the order of its last reference: inserting one (the
commonest operation) or touching one that still has fewer than K references is a dict store at
the end, because the clock never goes back. Every other candidate (K references, or one whose pin
or class changed) is in a heap with lazy deletion: each change pushes a fresh item, stale items are
skipped when they surface, and the heap is rebuilt when stale items outnumber live ones. The
victim is the smaller of the dicts' first key and the heap's top.

An entry is a plain list, [rank, pins, seq, oldest reference, ..., latest reference]: building
one per stored block is the store's commonest cost, and a list is several times cheaper to make
than an object.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# An entry: [rank, pins, seq, reference times (1 to K, oldest first)...]. seq is that of its
# live heap item, or -1 when it has none (in a young dict, or pinned).
RANK, PINS, SEQ, HISTORY = 0, 1, 2, 3
_Entry = list[float]
_Item = tuple[float, bool, float, float, K]  # heap item: rank, full, when, seq, key


class LRUK(Generic[K]):
    def __init__(self, k: int = 2, *, clock: Callable[[], float] = time.monotonic,
                 correlated_s: float = 0.0) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = k
        self.correlated_s = correlated_s
        self._clock = clock
        self._entries: dict[K, _Entry] = {}
        # Unpinned keys whose references all came in order and number fewer than K, per rank,
        # least recently referenced first.
        self._young: dict[float, OrderedDict[K, None]] = {}
        self._heap: list[_Item[K]] = []  # every other unpinned key (see the module's doc)
        self._live = 0  # live items in the heap
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
        """Track `key` (its first reference is now); a key already tracked is refused."""
        entries = self._entries
        if key in entries:
            raise KeyError(f"{key!r} is already tracked")
        entries[key] = entry = [rank, 0, -1, self._clock()]
        if self.k > 1:
            self._young_of(rank)[key] = None
        else:
            self._push(key, entry)

    def insert_many(self, keys: Sequence[K], rank: int = 0) -> None:
        """Track each of `keys`, all referenced now; a key already tracked, or twice in `keys`,
        is refused before any is tracked."""
        entries = self._entries
        if not entries.keys().isdisjoint(keys) or len(set(keys)) != len(keys):
            raise KeyError(f"a key of {len(keys)} is already tracked")
        now = self._clock()
        if self.k > 1:  # the common case, in bulk: each entry a list of its own, young in order
            entries.update({key: [rank, 0, -1, now] for key in keys})
            self._young_of(rank).update(dict.fromkeys(keys))
            return
        for key in keys:
            entries[key] = entry = [rank, 0, -1, now]
            self._push(key, entry)

    def touch(self, key: K) -> None:
        """Record a reference to `key`."""
        entry = self._entries[key]
        now = self._clock()
        if self.correlated_s > 0 and now - entry[-1] < self.correlated_s:
            entry[-1] = now
        else:
            entry.append(now)
            if len(entry) > HISTORY + self.k:
                del entry[HISTORY]
        if entry[PINS]:
            return
        if entry[SEQ] >= 0:
            entry[SEQ] = -1  # its heap item goes stale
            self._live -= 1
        else:
            del self._young[entry[RANK]][key]
        if len(entry) - HISTORY < self.k:  # referenced now, the latest time: the dict's end
            self._young[entry[RANK]][key] = None
            return
        # _push, inlined: every get of a block reused K times comes here, and the two calls
        # cost a quarter of a touch. With K references, the item is ordered by the oldest.
        self._seq += 1
        entry[SEQ] = self._seq
        self._live += 1
        heapq.heappush(self._heap, (entry[RANK], True, entry[HISTORY], self._seq, key))
        if len(self._heap) > 2 * self._live + 64:
            self._maybe_compact()

    def set_rank(self, key: K, rank: int) -> None:
        entry = self._entries[key]
        if entry[PINS] == 0:
            self._unlist(key, entry)
            entry[RANK] = rank
            self._push(key, entry)
        else:
            entry[RANK] = rank

    def remove(self, key: K) -> bool:
        """Forget `key`, pinned or not; False when it was not tracked."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        if entry[PINS]:
            self._pinned -= 1
        else:
            self._unlist(key, entry)
        return True

    def pin(self, key: K) -> None:
        """One more pin on `key`; pins nest, and a pinned key is never a victim."""
        entry = self._entries[key]
        entry[PINS] += 1
        if entry[PINS] == 1:
            self._pinned += 1
            self._unlist(key, entry)

    def unpin(self, key: K) -> bool:
        """Drop one pin; False when `key` is unknown or not pinned (a no-op then)."""
        entry = self._entries.get(key)
        if entry is None or entry[PINS] == 0:
            return False
        entry[PINS] -= 1
        if entry[PINS] == 0:
            self._pinned -= 1
            self._push(key, entry)  # its last reference may be old: the heap places it
        return True

    def last_reference(self, key: K) -> float:
        """When the key was last referenced (clock time)."""
        return self._entries[key][-1]

    def pins(self, key: K) -> int:
        entry = self._entries.get(key)
        return int(entry[PINS]) if entry is not None else 0

    def references(self, key: K) -> int:
        """How many references (at most K) the history holds."""
        return len(self._entries[key]) - HISTORY

    def victim(self) -> K | None:
        """The key eviction would take next, without removing it; None when all are pinned."""
        heap, entries = self._heap, self._entries
        while heap:
            entry = entries.get(heap[0][4])
            if entry is not None and entry[SEQ] == heap[0][3]:
                break
            heapq.heappop(heap)
        for rank in sorted(self._young):
            young = self._young[rank]
            if young:
                first = next(iter(young))
                if not heap or (rank, False, entries[first][-1]) <= heap[0][:3]:
                    return first
                break
        return heap[0][4] if heap else None

    def pop_victim(self) -> K | None:
        """Remove and return the next victim; None when every tracked key is pinned."""
        key = self.victim()
        if key is not None:
            self.remove(key)
        return key

    def order(self) -> list[K]:
        """All unpinned keys, next victim first (for tests and inspection; O(n log n)).
        Ties go as victim() breaks them: the dicts' order first, then the heap's."""
        ranked: list[tuple[float, bool, float, tuple[int, float], K]] = []
        for rank, young in self._young.items():
            ranked += [(rank, False, self._entries[k][-1], (0, i), k)
                       for i, k in enumerate(young)]
        ranked += [(*self._item(k, e)[:3], (1, e[SEQ]), k)
                   for k, e in self._entries.items() if e[SEQ] >= 0]
        return [item[-1] for item in sorted(ranked)]

    def _item(self, key: K, entry: _Entry) -> _Item[K]:
        # Fewer than K references: infinite K-distance, ordered by the last reference (LRU).
        # K references: ordered by the K-th most recent one, the oldest being the farthest.
        full = len(entry) - HISTORY >= self.k
        return (entry[RANK], full, entry[HISTORY] if full else entry[-1], entry[SEQ], key)

    def _young_of(self, rank: float) -> OrderedDict[K, None]:
        young = self._young.get(rank)
        if young is None:
            young = self._young[rank] = OrderedDict()
        return young

    def _unlist(self, key: K, entry: _Entry) -> None:
        """Take an unpinned key out of the candidates (to pin, remove or move it)."""
        if entry[SEQ] >= 0:
            entry[SEQ] = -1  # its heap item goes stale
            self._live -= 1
            self._maybe_compact()
        else:
            del self._young[entry[RANK]][key]

    def _push(self, key: K, entry: _Entry) -> None:
        self._seq += 1
        entry[SEQ] = self._seq
        self._live += 1
        heapq.heappush(self._heap, self._item(key, entry))
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * self._live + 64:
            self._heap = [self._item(k, e) for k, e in self._entries.items() if e[SEQ] >= 0]
            heapq.heapify(self._heap)
