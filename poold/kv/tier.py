"""Tier: the store's state behind its lock: index, leases, reserved slots, lost leases.

Decides where a block goes (a free slot, else a new lease within the budget, else an eviction),
admits copied blocks into the index, and keeps the leases honest: every pass drops the blocks of
leases the keepalive thread found lost, unmaps them and records them, and gives back leases that
sat empty for idle_release_s. It never copies bytes (poold.kv.copies does) and never locks
(poold.kv.store does, around every call here).

Upkeep stays off the hot path: `tick()`, which every call runs, is a clock read and two
comparisons unless a session deadline has passed (then it expires sessions) or
`maintenance_period_s` (at most idle_release_s) has (then a full `maintain()`). Nothing unsafe
waits for it: copies check each lease before touching it, gets re-check it after, allocation
skips lost leases and reaps them before growing, and inspection calls maintain first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from poold.client import IdleReport, PooldClient
from poold.kv.copies import Reserved
from poold.kv.index import BlockIndex
from poold.kv.leases import LeaseSet, LeaseSlab
from poold.kv.stats import BlockLocation, KVStats, LostLease

log = logging.getLogger(__name__)


class Tier:
    def __init__(self, client: PooldClient, *, block_size: int, budget_bytes: int,
                 lease_bytes: int, ttl_s: int, priorities: Mapping[str, int],
                 idle_release_s: float, correlated_s: float, labels: dict[str, str],
                 pool: str | None, maintenance_period_s: float = 0.5,
                 elastic: bool = False, on_reclaim: Callable[[], None] | None = None,
                 grow_wait_s: float = 0.0,
                 idle_s: IdleReport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.block_size = block_size
        self._clock = clock
        self._period = min(maintenance_period_s, idle_release_s)
        self._due = float("-inf")  # when tick() next runs a full maintain()
        self.leases = LeaseSet(client, block_size=block_size, lease_bytes=lease_bytes,
                               budget_bytes=budget_bytes, ttl_s=ttl_s,
                               idle_release_s=idle_release_s, labels=labels, pool=pool,
                               elastic=elastic, on_reclaim=on_reclaim,
                               grow_wait_s=grow_wait_s, idle_s=idle_s, clock=clock)
        self.index = BlockIndex(priorities, block_size, correlated_s=correlated_s,
                                clock=clock)
        self.inflight: set[bytes] = set()  # reserved by a put that is still copying
        self.lost: list[LostLease] = []

    def reserve(self, keys: Sequence[bytes]) -> tuple[list[bool], list[Reserved]]:
        """A slot for each key not held yet. Returns, per key, whether it is held already, and
        the reservations to copy into, in the order of `keys`."""
        held = [False] * len(keys)
        index, inflight, where = self.index, self.inflight, self.index.locations
        todo: list[int]
        if where.keys().isdisjoint(keys) and inflight.isdisjoint(keys) \
                and len(set(keys)) == len(keys):  # all new: the common case, in bulk
            inflight.update(keys)
            todo = list(range(len(keys)))
        else:
            todo = []
            for i, key in enumerate(keys):
                if key in where or key in inflight:
                    held[i] = True  # content-hash keys: the same key is the same bytes
                else:
                    inflight.add(key)  # also catches a key twice in one batch
                    todo.append(i)
        index.counts["already_present"] += len(keys) - len(todo)
        slots = self._alloc(len(todo))
        inflight.difference_update([keys[i] for i in todo[len(slots):]])
        index.counts["rejected"] += len(todo) - len(slots)
        return held, [(i, keys[i], slab, slot)
                     for i, (slab, slot) in zip(todo[:len(slots)], slots, strict=True)]

    def reserve_one(self, key: bytes) -> tuple[LeaseSlab, int] | bool:
        """reserve() for one key, on a shorter path (a per-block put calls it once a block):
        True when the key is held already, False when there is no room, else the slot."""
        if key in self.index.locations or key in self.inflight:
            self.index.counts["already_present"] += 1
            return True
        got = self.leases.alloc()
        if got is None:
            more = self._alloc(1)  # grow, or evict
            if not more:
                self.index.counts["rejected"] += 1
                return False
            got = more[0]
        self.inflight.add(key)
        return got

    def commit_one(self, key: bytes, slab: LeaseSlab, slot: int, written: bool,
                   priority: str) -> bool:
        """commit() for one reservation; True when the block is stored."""
        self.inflight.discard(key)
        if written and slab.usable:
            self.index.add(key, slab, slot, priority)
            self.index.counts["stored"] += 1
            return True
        if slab.usable:
            slab.free(slot, self._clock())
        else:  # the slot went with its lease
            self.reap_lost()
        return False

    def commit(self, reserved: list[Reserved], written: list[bool], held: list[bool],
               priority: str) -> None:
        """Index the blocks that were copied into a lease still held; free the other slots."""
        self.inflight.difference_update([item[1] for item in reserved])
        if all(written) and all(slab.usable for slab in {item[2] for item in reserved}):
            # Every copy made, every lease still held: the common case, in bulk.
            self.index.add_many([(key, slab, slot) for _i, key, slab, slot in reserved],
                                priority)
            self.index.counts["stored"] += len(reserved)
            for item in reserved:
                held[item[0]] = True
            return
        stored: list[tuple[bytes, LeaseSlab, int]] = []
        lost, last, alive = False, None, False
        for (i, key, slab, slot), ok in zip(reserved, written, strict=True):
            if slab is not last:  # reservations come in runs on one lease
                last, alive = slab, slab.usable
            if ok and alive:
                stored.append((key, slab, slot))
                held[i] = True
            elif alive:
                slab.free(slot, self._clock())
            else:  # the slot went with its lease
                lost = True
        self.index.add_many(stored, priority)
        self.index.counts["stored"] += len(stored)
        if lost:  # a lease lost during the copy: drop it now
            self.reap_lost()

    def _alloc(self, count: int) -> list[tuple[LeaseSlab, int]]:
        """Up to `count` free slots; past the free ones, lease more within the budget; past
        that, evict."""
        leases = self.leases
        got = leases.alloc_many(count)
        if len(got) < count:
            self.reap_lost()  # a lost lease's bytes must not count against the budget
            while len(got) < count and leases.grow() is not None:
                got += leases.alloc_many(count - len(got))
        while len(got) < count:
            need = count - len(got)
            evicted = 0
            while evicted < need and self.index.evict_one():
                evicted += 1
            if not evicted:
                break  # every block is pinned
            got += leases.alloc_many(need)
        return got

    def tick(self) -> None:
        """What every call runs first: cheap unless some upkeep is due (see the module doc)."""
        now = self._clock()
        if self.leases.asked:
            self.give_back_asked()
        if now >= self._due:
            self.maintain()
        elif now >= self.index.sessions_due:
            self.index.expire_sessions()

    def maintain(self) -> None:
        """Give back what the daemon asked, expire sessions, drop lost leases, give idle ones
        back."""
        self._due = self._clock() + self._period
        self.give_back_asked()
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

    def idle_report(self) -> dict[str, float]:
        """Seconds since each lease's blocks were last referenced (since it went empty, for an
        empty one): what the store tells the daemon, so its coldest leases are asked first."""
        now, last = self._clock(), self.index.last_used()
        return {slab.id: now - last[slab] if slab in last
                else now - (slab.idle_since if slab.idle_since is not None else now)
                for slab in self.leases.slabs}

    def give_back_while_growing(self) -> bool:
        """Give back what the daemon asked while this store's own growth waits for room (its
        caller holds the store's lock but touches nothing until the gate is free again);
        False if no growth is waiting: then the lock's holder gives back at its next tick."""
        with self.leases.gate:
            if not self.leases.waiting_for_room:
                return False
            self.give_back_asked()
            return True

    def give_back_asked(self) -> None:
        """The daemon asked for these (elastic) leases: keep what is worth keeping in the other
        leases (compaction), drop the rest of their blocks and release them at once."""
        for slab in self.leases.take_asked():
            kept = self._move_out(slab)
            dropped = self.index.drop_slab(slab)
            self.index.counts["reclaimed"] += dropped
            log.info("kv.lease_reclaimed lease=%s kept=%d dropped=%d", slab.id, kept, dropped)
            slab.close("asked back by the daemon")

    def _move_out(self, slab: LeaseSlab) -> int:
        """Copy blocks of a lease being given back into the store's other leases: pinned and
        session-held ones first, evicting the coldest blocks elsewhere to make room for them,
        then the hottest of the rest into slots that are free anyway. Returns how many."""
        index = self.index
        on = [key for key, where in index.locations.items() if where.slab is slab]
        if not on or not slab.usable:
            return 0
        pinned = [key for key in on if index.is_pinned(key)]
        rest = set(on).difference(pinned)
        hottest = [key for key in reversed(index.order()) if key in rest]
        source, size, moved = slab.buffer(), self.block_size, 0
        for key in pinned + hottest:
            got = self.leases.alloc()
            if got is None and key not in rest and index.evict_one_off(slab):
                got = self.leases.alloc()
            if got is None:
                if key in rest:
                    break  # no free slot left: the rest is dropped
                continue
            target, slot = got
            at = index.locations[key].offset
            target.buffer()[slot * size:(slot + 1) * size] = source[at:at + size]
            index.move(key, target, slot)
            moved += 1
        return moved

    def close(self) -> None:
        for slab in self.leases.take_all():
            slab.close("store closed")
        self.leases.close()

    def locate(self, key: bytes) -> BlockLocation | None:
        where = self.index.get(key)
        if where is None:
            return None
        info = where.slab.lease.info
        return BlockLocation(info.id, info.map_path, info.map_offset, info.length, info.align,
                             where.offset, self.block_size)

    def stats(self) -> KVStats:
        c, leases = self.index.counts, self.leases
        return KVStats(
            hits=c["hits"], misses=c["misses"], stored=c["stored"],
            already_present=c["already_present"], rejected=c["rejected"],
            evictions=c["evictions"], evictions_by_priority=dict(self.index.evicted_by),
            lost=c["lost"], reclaimed=c["reclaimed"], discarded=c["discarded"],
            blocks_used=len(self.index),
            blocks_capacity=leases.capacity_blocks, pinned=self.index.pinned,
            sessions=self.index.sessions, leases=len(leases.slabs),
            leases_granted=leases.granted, leases_released=leases.released,
            leases_lost=leases.lost, leases_reclaimed=leases.reclaimed,
            grow_failures=leases.grow_failures,
            budget_refusals=leases.budget_refusals, leased_bytes=leases.leased_bytes,
            budget_bytes=leases.budget_bytes)
