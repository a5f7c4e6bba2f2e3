"""The leases under a store: grow within a budget, give idle ones back, notice lost ones.

Each `LeaseSlab` is one lease, its mapping and the slots carved from it. `LeaseSet` grants a new
lease when the store is full and the budget allows, releases a lease whose slots have all been
free for `idle_release_s`, and hands back the slabs whose lease the keepalive thread marked lost.
It owns no keys: the store drops the blocks of a lost slab from its index.

Its leases share one client session (poold.client.Session), opened with the first lease and
closed with the set: one keepalive a period renews them all, however many the budget holds.

Elastic leases: the session's reclaim thread queues the ids the daemon asks back (`asked`) and
nudges the store, which gives them back under its lock (`take_asked`), at once if the lock is
free, else at its next call. A growth that waits for room holds the store's lock for the whole
wait (one wait, so the daemon answers waiting grants in order of arrival) but touches nothing
while it waits: meanwhile the reclaim thread may give back through `gate` (`waiting_for_room`
says so), and the growth takes the gate again before it goes on. Two stores growing at once,
each asked for the other's lease, would otherwise hold their locks against each other.

Not thread-safe by itself: the store calls it under its lock. The one field another thread
changes is `Lease.lost_reason`, flipped by the lease's keepalive thread at any instant, so `usable`
reads it afresh every time and nothing caches it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from poold import errors
from poold.client import IdleReport, Lease, Mapping, PooldClient, ReclaimAsk, Session
from poold.kv.slab import Slab

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)



class LeaseSlab:
    def __init__(self, lease: Lease, block_size: int, now: float) -> None:
        self.lease = lease
        self.slab = Slab(lease.info.length, block_size)
        self.mapping: Mapping | None = lease.map()
        # A read-only view of the whole extent, so a zero-copy get is one slice of it.
        self.readonly: memoryview | None = self.mapping.buffer.toreadonly()
        self.dead_reason: str | None = None  # set once the store stopped using this lease
        self.idle_since: float | None = now  # when the last slot became free; None: in use

    @property
    def id(self) -> str:
        return self.lease.id

    @property
    def length(self) -> int:
        return self.lease.info.length

    @property
    def usable(self) -> bool:
        """False once the store gave the lease up or the keepalive thread found it lost."""
        return self.dead_reason is None and not self.lease.lost

    def buffer(self) -> memoryview:
        """The mapping, or LeaseLost once the lease is gone (never the old memory)."""
        if not self.usable or self.mapping is None:
            raise errors.LeaseLost(f"lease {self.id} is no longer held")
        return self.mapping.buffer

    def readable(self) -> memoryview | None:
        """The read-only view while the lease is usable, else None: buffer() and usable in one
        call without raising (a get of one block runs it once a block, and their property
        calls and try cost a tenth of a 256 KiB copy)."""
        if self.dead_reason is None and self.lease.lost_reason is None:
            return self.readonly
        return None

    def tensor(self, offset: int, length: int, dtype: torch.dtype | None) -> torch.Tensor:
        """A zero-copy torch tensor over [offset, offset+length) (needs torch); LeaseLost once
        the lease is gone."""
        if not self.usable or self.mapping is None:
            raise errors.LeaseLost(f"lease {self.id} is no longer held")
        return self.mapping.tensor(dtype, offset=offset, length=length)

    def alloc(self) -> int | None:
        slot = self.slab.alloc()
        if slot is not None:
            self.idle_since = None
        return slot

    def alloc_many(self, count: int) -> list[int]:
        slots = self.slab.alloc_many(count)
        if slots:
            self.idle_since = None
        return slots

    def free(self, slot: int, now: float) -> None:
        self.slab.free(slot)
        if self.slab.empty:
            self.idle_since = now

    def close(self, reason: str) -> None:
        """Stop using the lease: unmap (views still exported keep the pages until they go) and
        release it; a lost lease's release is refused or moot, which is fine."""
        self.dead_reason = self.dead_reason or reason
        if self.readonly is not None:
            self.readonly.release()
            self.readonly = None
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        with contextlib.suppress(errors.PooldError):
            self.lease.release()


class LeaseSet:
    def __init__(self, client: PooldClient, *, block_size: int, lease_bytes: int,
                 budget_bytes: int, ttl_s: int, idle_release_s: float,
                 labels: dict[str, str] | None = None, pool: str | None = None,
                 grow_backoff_s: float = 1.0, elastic: bool = False,
                 on_reclaim: Callable[[], None] | None = None,
                 grow_wait_s: float = 0.0,
                 idle_s: IdleReport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`elastic`: the leases are a cache the daemon may ask back; `on_reclaim()` is then
        called (from the session's reclaim thread) once their ids are in `asked`.
        `grow_wait_s`: how long a grant may wait for room in a full pool (others' elastic
        leases asked back) before the store evicts its own blocks instead.
        `idle_s()`: seconds since each lease was last used, told to the daemon at each
        keepalive (the coldest are asked back first); by default how long each sat empty."""
        if lease_bytes < block_size:
            raise ValueError("lease_bytes must hold at least one block")
        if budget_bytes < lease_bytes:
            raise ValueError("budget_bytes must allow at least one lease")
        self._client = client
        self.block_size, self.lease_bytes, self.budget_bytes = block_size, lease_bytes, budget_bytes
        self.ttl_s, self.idle_release_s = ttl_s, idle_release_s
        self._labels, self._pool = labels or {}, pool
        self._backoff_s = grow_backoff_s
        self._clock = clock
        self._no_grow_until = float("-inf")
        self._session: Session | None = None
        self._elastic, self._on_reclaim, self._grow_wait_s = elastic, on_reclaim, grow_wait_s
        # Held by whoever changes the set while a growth waits for room: the growth flips
        # waiting_for_room under it, the reclaim thread gives back under it.
        self.gate = threading.Lock()
        self.waiting_for_room = False
        self._idle_report = idle_s or self._idle_s
        self.asked: deque[str] = deque()  # lease ids the daemon asked back, not handled yet
        if elastic and on_reclaim is None:
            raise ValueError("elastic leases need on_reclaim to give them back")
        self.slabs: list[LeaseSlab] = []
        self.granted = self.released = self.lost = self.grow_failures = self.budget_refusals = 0
        self.reclaimed = 0

    @property
    def leased_bytes(self) -> int:
        return sum(s.length for s in self.slabs)

    @property
    def capacity_blocks(self) -> int:
        return sum(s.slab.slots for s in self.slabs)

    @property
    def used_blocks(self) -> int:
        return sum(s.slab.used for s in self.slabs)

    def alloc(self) -> tuple[LeaseSlab, int] | None:
        """A free slot from the oldest usable lease that has one: filling old leases first
        lets the newest drain, go idle and be given back."""
        for slab in self.slabs:
            if slab.slab.free_count and slab.usable:
                slot = slab.alloc()
                assert slot is not None  # it has a free one
                return slab, slot
        return None

    def alloc_many(self, count: int) -> list[tuple[LeaseSlab, int]]:
        """Up to `count` free slots, oldest usable lease first, as alloc() would pick them."""
        got: list[tuple[LeaseSlab, int]] = []
        for slab in self.slabs:
            if len(got) == count:
                break
            if slab.slab.free_count and slab.usable:
                got += [(slab, slot) for slot in slab.alloc_many(count - len(got))]
        return got

    def grow(self) -> LeaseSlab | None:
        """Lease `lease_bytes` more if the budget allows and the daemon grants it, else None."""
        if self.leased_bytes + self.lease_bytes > self.budget_bytes:
            self.budget_refusals += 1
            return None
        if self._clock() < self._no_grow_until:
            return None  # the daemon just said no; do not ask again on every put
        try:
            lease = self._lease_more()
        except errors.PooldError as exc:
            self.grow_failures += 1
            self._no_grow_until = self._clock() + self._backoff_s
            log.warning("kv.grow_failed error=%s detail=%s", type(exc).__name__, exc)
            return None
        if self.leased_bytes + lease.info.length > self.budget_bytes:
            # Rounded up to the device's align past the budget: give it back, and stop asking.
            with contextlib.suppress(errors.PooldError):
                lease.release()
            self.budget_refusals += 1
            self._no_grow_until = float("inf")
            return None
        try:
            slab = LeaseSlab(lease, self.block_size, self._clock())
        except errors.PooldError as exc:  # cannot map it (permissions, a lease lost at once)
            with contextlib.suppress(errors.PooldError):
                lease.release()
            self.grow_failures += 1
            self._no_grow_until = self._clock() + self._backoff_s
            log.warning("kv.map_failed lease=%s detail=%s", lease.id, exc)
            return None
        self.slabs.append(slab)
        self.granted += 1
        log.info("kv.lease_granted lease=%s length=%d", lease.id, lease.info.length)
        return slab

    def _lease_more(self) -> Lease:
        """A lease of lease_bytes in the set's session (a new one if the last was lost),
        waiting up to grow_wait_s for room (see the module's doc for what may run meanwhile)."""
        if self._session is None or self._session.lost:
            if self._session is not None:
                self._session.close()
            self._session = None
            self._session = self._client.session(
                ttl_s=self.ttl_s, labels=self._labels, idle_s=self._idle_report,
                on_reclaim=self._reclaimed if self._elastic else None)
        session, waits = self._session, self._grow_wait_s > 0
        if waits:
            with self.gate:
                self.waiting_for_room = True
        try:
            return session.lease(self.lease_bytes, pool=self._pool, labels=self._labels,
                                 elastic=self._elastic, wait_s=self._grow_wait_s)
        finally:
            if waits:
                with self.gate:  # after any give-back that began while it waited
                    self.waiting_for_room = False

    def _reclaimed(self, asks: list[ReclaimAsk]) -> None:
        self.asked.extend(ask.lease for ask in asks)
        if self._on_reclaim is not None:
            self._on_reclaim()

    def _idle_s(self) -> dict[str, float]:
        """Seconds each lease has sat empty (0 while it holds blocks), for the daemon to ask
        back the coldest first. Read from the keepalive thread without the store's lock: a
        stale value only reorders whom the daemon asks."""
        now = self._clock()
        return {s.id: 0.0 if s.idle_since is None else now - s.idle_since
                for s in list(self.slabs)}

    def take_asked(self) -> list[LeaseSlab]:
        """Remove and return the slabs of the leases the daemon asked back since the last call
        (a lease no longer held is skipped: it went idle or lost meanwhile)."""
        wanted = set()
        while self.asked:
            wanted.add(self.asked.popleft())
        taken = [s for s in self.slabs if s.id in wanted]
        if taken:
            self.slabs = [s for s in self.slabs if s.id not in wanted]
            self.reclaimed += len(taken)
        return taken

    def close(self) -> None:
        """Close the session, which releases whatever lease is still in it."""
        if self._session is not None:
            session, self._session = self._session, None
            with contextlib.suppress(errors.PooldError):
                session.close()

    def take_lost(self) -> list[LeaseSlab]:
        """Remove and return every slab whose lease went lost since the last call."""
        lost = [s for s in self.slabs if not s.usable]
        if lost:
            self.slabs = [s for s in self.slabs if s not in lost]
            self.lost += len(lost)
            # Leases can be lost because the daemon is in trouble; let growth try again.
            self._no_grow_until = min(self._no_grow_until, self._clock())
        return lost

    def take_idle(self) -> list[LeaseSlab]:
        """Remove and return the slabs that have been empty for idle_release_s."""
        now = self._clock()
        idle = [s for s in self.slabs if s.idle_since is not None
                and now - s.idle_since >= self.idle_release_s]
        if idle:
            self.slabs = [s for s in self.slabs if s not in idle]
            self.released += len(idle)
        return idle

    def take_all(self) -> list[LeaseSlab]:
        slabs, self.slabs = self.slabs, []
        self.released += len(slabs)
        return slabs
