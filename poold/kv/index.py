"""BlockIndex: which key lives in which slot, and who may evict it.

Ties the key -> slot map to the eviction policy (LRU-K with priority classes), the pins and the
session holds, so the three never disagree: a key is in the policy exactly when it is in the map,
and every session hold is one pin. It frees slots of evicted blocks but never touches their bytes;
reading and writing memory is the store's job. Not thread-safe: the store calls it under its lock.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from poold.kv.eviction import LRUK
from poold.kv.leases import LeaseSlab
from poold.kv.sessions import SessionTable


class Location(NamedTuple):
    """Where one committed block lives."""

    slab: LeaseSlab
    slot: int
    offset: int  # of the slot, in bytes from the start of the lease
    priority: str


_new_tuple = tuple.__new__  # builds a Location without NamedTuple's Python-level __new__


class BlockIndex:
    def __init__(self, priorities: Mapping[str, int], block_size: int, *,
                 correlated_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.block_size = block_size
        self.priorities = dict(priorities)
        self._clock = clock
        self._where: dict[bytes, Location] = {}
        self._policy: LRUK[bytes] = LRUK(2, clock=clock, correlated_s=correlated_s)
        self._sessions = SessionTable(clock)
        self.counts: Counter[str] = Counter()
        self.evicted_by: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    @property
    def pinned(self) -> int:
        return self._policy.pinned_count

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def rank(self, priority: str) -> int:
        try:
            return self.priorities[priority]
        except KeyError:
            raise ValueError(f"unknown priority {priority!r}; known: "
                             f"{sorted(self.priorities)}") from None

    def get(self, key: bytes) -> Location | None:
        return self._where.get(key)

    @property
    def locations(self) -> dict[bytes, Location]:
        """key -> Location, for the store's hot loops; change it only through this class."""
        return self._where

    @property
    def sessions_due(self) -> float:
        """No session expires before this (clock time)."""
        return self._sessions.next_deadline

    def add(self, key: bytes, slab: LeaseSlab, slot: int, priority: str) -> None:
        """Index one committed block, referenced now."""
        self._policy.insert(key, self.rank(priority))  # refuses a key indexed already
        self._where[key] = _new_tuple(Location, (slab, slot, slot * self.block_size, priority))

    def add_many(self, blocks: Sequence[tuple[bytes, LeaseSlab, int]], priority: str) -> None:
        """Index committed blocks (key, slab, slot), all referenced now."""
        if not blocks:
            return
        size = self.block_size
        self._policy.insert_many([b[0] for b in blocks], self.rank(priority))
        self._where.update({key: _new_tuple(Location, (slab, slot, slot * size, priority))
                            for key, slab, slot in blocks})

    def touch(self, key: bytes) -> None:
        self._policy.touch(key)

    def evict_one(self) -> bool:
        """Evict the policy's victim and free its slot; False when every block is pinned."""
        key = self._policy.pop_victim()
        if key is None:
            return False
        where = self._where.pop(key)
        where.slab.free(where.slot, self._clock())
        self.counts["evictions"] += 1
        self.evicted_by[where.priority] += 1
        return True

    def discard(self, key: bytes) -> bool:
        """Remove an unpinned block and free its slot; pinned or absent blocks stay."""
        where = self._where.get(key)
        if where is None or self._policy.pins(key):
            return False
        self._forget(key)
        where.slab.free(where.slot, self._clock())
        return True

    def drop_slab(self, slab: LeaseSlab) -> int:
        """Forget every block of a slab the store no longer holds (pins and holds included);
        its slots are not freed, they went with the lease. Returns how many blocks went.
        (A scan of the index: leases are lost rarely, blocks are stored all the time, so no
        per-slab key list is kept up to date for it.)"""
        keys = [key for key, where in self._where.items() if where.slab is slab]
        for key in keys:
            self._forget(key)
        return len(keys)

    def last_used(self) -> dict[LeaseSlab, float]:
        """Slab -> when a block in it was last referenced (a scan: called once a keepalive)."""
        last: dict[LeaseSlab, float] = {}
        for key, where in self._where.items():
            at = self._policy.last_reference(key)
            if at > last.get(where.slab, float("-inf")):
                last[where.slab] = at
        return last

    def is_pinned(self, key: bytes) -> bool:
        """Pinned by a caller or held by a live session."""
        return self._policy.pins(key) > 0

    def move(self, key: bytes, slab: LeaseSlab, slot: int) -> None:
        """Re-point a block its bytes were copied to another slot (compaction): its history,
        pins and session holds stay; the old slot is the caller's (it goes with its lease)."""
        old = self._where[key]
        self._where[key] = _new_tuple(Location, (slab, slot, slot * self.block_size,
                                                 old.priority))

    def evict_one_off(self, slab: LeaseSlab) -> bool:
        """Evict the coldest unpinned block that is not on `slab` (making room elsewhere for
        what a lease being given back keeps); False when there is none."""
        victim = next((k for k in self._policy.order() if self._where[k].slab is not slab), None)
        if victim is None:
            return False
        where = self._where[victim]
        self._forget(victim)
        where.slab.free(where.slot, self._clock())
        self.counts["evictions"] += 1
        self.evicted_by[where.priority] += 1
        return True

    def pin(self, keys: Iterable[bytes]) -> int:
        pinned = 0
        for key in keys:
            if key in self._where:
                self._policy.pin(key)
                pinned += 1
        return pinned

    def unpin(self, keys: Iterable[bytes]) -> int:
        return sum(self._policy.unpin(key) for key in keys)

    def hold(self, session: str, keys: Iterable[bytes], ttl_s: float) -> int:
        """Hold the present `keys` for `session` until now + ttl_s (each key pinned once per
        session); returns how many of them the session holds now."""
        present = [k for k in keys if k in self._where]
        self.pin(self._sessions.hold(session, present, ttl_s))
        return len(present)

    def extend(self, session: str, ttl_s: float) -> bool:
        return self._sessions.extend(session, ttl_s)

    def end_session(self, session: str) -> int:
        return self.unpin(self._sessions.end(session))

    def expire_sessions(self) -> int:
        return sum(self.unpin(keys) for _name, keys in self._sessions.expire())

    def order(self) -> list[bytes]:
        """Unpinned keys, next victim first."""
        return self._policy.order()

    def _forget(self, key: bytes) -> None:
        self._where.pop(key)
        self._policy.remove(key)  # drops its pins, session holds included
        self._sessions.forget(key)
