"""Tier: the store's state behind its lock: index, leases, reserved slots, lost leases.

Decides where a block goes (a free slot, else a new lease within the budget, else an eviction),
admits copied blocks into the index, and keeps the leases honest: every pass drops the blocks of
leases the keepalive thread found lost, unmaps them and records them, and gives back leases that
sat empty for idle_release_s. It never copies bytes (poold.kv.copies does) and never locks
(poold.kv.store does, around every call here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from poold.client import PooldClient
from poold.kv.copies import Reserved
from poold.kv.index import BlockIndex
from poold.kv.leases import LeaseSet, LeaseSlab
from poold.kv.stats import BlockLocation, KVStats, LostLease

log = logging.getLogger(__name__)


class Tier:
    def __init__(self, client: PooldClient, *, block_size: int, budget_bytes: int,
                 lease_bytes: int, ttl_s: int, priorities: Mapping[str, int],
                 idle_release_s: float, correlated_s: float, labels: dict[str, str],
                 pool: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.block_size = block_size
        self._clock = clock
        self.leases = LeaseSet(client, block_size=block_size, lease_bytes=lease_bytes,
                               budget_bytes=budget_bytes, ttl_s=ttl_s,
                               idle_release_s=idle_release_s, labels=labels, pool=pool,
                               clock=clock)
        self.index = BlockIndex(priorities, correlated_s=correlated_s, clock=clock)
        self.inflight: set[bytes] = set()  # reserved by a put that is still copying
        self.lost: list[LostLease] = []

    def reserve(self, keys: Sequence[bytes]) -> tuple[list[bool], list[Reserved]]:
        """A slot for each key not held yet. Returns, per key, whether it is held already, and
        the reservations to copy into."""
        held = [False] * len(keys)
        reserved: list[Reserved] = []
        for i, key in enumerate(keys):
            if key in self.index or key in self.inflight:
                held[i] = True  # content-hash keys: the same key is the same bytes
                self.index.counts["already_present"] += 1
                continue
            got = self._alloc()
            if got is None:
                self.index.counts["rejected"] += 1
                continue
            self.inflight.add(key)
            reserved.append(Reserved(i, key, *got))
        return held, reserved

    def commit(self, reserved: list[Reserved], written: list[bool], held: list[bool],
               priority: str) -> None:
        """Index the blocks that were copied into a lease still held; free the other slots."""
        self.reap_lost()  # a lease lost during the copy: its blocks never enter the index
        now = self._clock()
        for item, ok in zip(reserved, written, strict=True):
            self.inflight.discard(item.key)
            if ok and item.slab.usable:
                self.index.add(item.key, item.slab, item.slot, priority)
                self.index.counts["stored"] += 1
                held[item.index] = True
            elif item.slab.usable:
                item.slab.free(item.slot, now)
            # else: the slot went with its lease

    def _alloc(self) -> tuple[LeaseSlab, int] | None:
        """A free slot; else lease more within the budget; else evict."""
        got = self.leases.alloc()
        if got is None and self.leases.grow() is not None:
            got = self.leases.alloc()
        while got is None and self.index.evict_one():
            got = self.leases.alloc()
        return got

    def maintain(self) -> None:
        """Expire sessions, drop lost leases, give idle ones back."""
        self.index.expire_sessions()
        self.reap_lost()
        for slab in self.leases.take_idle():
            log.info("kv.lease_idle lease=%s", slab.id)
            slab.close("idle")

    def reap_lost(self) -> None:
        for slab in self.leases.take_lost():
            reason = slab.lease.lost_reason or slab.dead_reason or "lost"
            blocks = self.index.drop_slab(slab)
            self.index.counts["lost"] += blocks
            self.lost.append(LostLease(slab.id, reason, blocks))
            log.warning("kv.lease_lost lease=%s blocks=%d reason=%s", slab.id, blocks, reason)
            slab.close(f"lost: {reason}")

    def close(self) -> None:
        for slab in self.leases.take_all():
            slab.close("store closed")

    def locate(self, key: bytes) -> BlockLocation | None:
        where = self.index.get(key)
        if where is None:
            return None
        info = where.slab.lease.info
        return BlockLocation(info.id, info.chardev, info.offset, info.length, info.align,
                             where.offset, self.block_size)

    def stats(self) -> KVStats:
        c, leases = self.index.counts, self.leases
        return KVStats(
            hits=c["hits"], misses=c["misses"], stored=c["stored"],
            already_present=c["already_present"], rejected=c["rejected"],
            evictions=c["evictions"], evictions_by_priority=dict(self.index.evicted_by),
            lost=c["lost"], discarded=c["discarded"], blocks_used=len(self.index),
            blocks_capacity=leases.capacity_blocks, pinned=self.index.pinned,
            sessions=self.index.sessions, leases=len(leases.slabs),
            leases_granted=leases.granted, leases_released=leases.released,
            leases_lost=leases.lost, grow_failures=leases.grow_failures,
            budget_refusals=leases.budget_refusals, leased_bytes=leases.leased_bytes,
            budget_bytes=leases.budget_bytes)
