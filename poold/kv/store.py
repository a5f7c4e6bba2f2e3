"""KVStore: fixed-size KV blocks in leased memory, for an inference engine's offload tier.

One engine process owns a store: the index lives here, the bytes in leases the store takes from
poold as it fills (up to `budget_bytes`) and gives back when they sit empty. Puts copy into free
slots, evicting by LRU-K with priority classes when full; gets copy out, into a caller's buffer,
or hand out zero-copy views. Every call takes many blocks, so small blocks are not capped by
per-call overhead.

Lease loss: a lease's keepalive thread may flip `lease.lost` at any instant. Copies re-check it
(poold.kv.copies); every call drops a lost lease's blocks from the index, unmaps it and records it
(`lost_leases()`, `stats().lost`). A put whose lease was lost by the time it commits is not
indexed; a get whose lease was lost by the end of its copy is a miss. What no client can prevent
is the window between the daemon revoking a lease and the keepalive thread hearing of it.

Threads: one lock guards the index and the leases. A put reserves slots under the lock, copies
outside it (nobody reads a reserved slot) and commits under it, so the asynchronous worker's
copies do not stall the engine's gets. Gets copy under the lock, so an eviction cannot reuse a
slot mid-read. Growing and releasing leases (HTTP to the local daemon) happen under the lock;
they are rare.

Cost per call: a batch is reserved, copied and indexed as a batch (blocks that are neighbours
in the caller's buffer and in the lease move in one copy); upkeep runs only when due
(Tier.tick); a zero-copy get is a dict lookup, a slice and an LRU-K touch.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from poold import errors
from poold.client import PooldClient
from poold.kv.buffers import block_view, output_view, split_blocks
from poold.kv.copies import (
    Found,
    Reserved,
    buffer_or_none,
    hand_out_slots,
    read_blocks,
    read_into,
    write_blocks,
)
from poold.kv.leases import LeaseSlab
from poold.kv.stats import BlockLocation, KVStats, LostLease
from poold.kv.tier import Tier
from poold.kv.worker import Worker

if TYPE_CHECKING:
    import numpy as np
    import torch

    from poold.kv.buffers import Blocks, BufferLike

# How long the reclaim thread waits for the store's lock before leaving an ask to the call that
# holds it, and the keepalive thread before sending no idle report this time.
GIVE_BACK_WAIT_S = 0.01
IDLE_REPORT_WAIT_S = 0.01
# Lower ranks are evicted first; a whole class goes before any block of a higher one.
DEFAULT_PRIORITIES: dict[str, int] = {"vision": 0, "default": 1, "system": 2}


class KVStore:
    def __init__(self, client: PooldClient, block_size: int, budget_bytes: int,
                 lease_bytes: int, *, ttl_s: int = 30,
                 priorities: Mapping[str, int] | None = None,
                 session_ttl_s: float = 60.0, idle_release_s: float = 30.0,
                 correlated_s: float = 0.0, labels: dict[str, str] | None = None,
                 pool: str | None = None, maintenance_period_s: float = 0.5,
                 elastic: bool = False, grow_wait_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`elastic`: lease as a cache the daemon may ask back for a grant waiting for room;
        the store then drops those leases' blocks (misses from then on) and releases them at
        once, the coldest leases (empty longest) being the ones the daemon asks first.
        `grow_wait_s`: how long growing may wait for such room (holding the store's lock)
        before the store evicts its own blocks instead; 0: it evicts at once."""
        self.block_size = block_size
        self.session_ttl_s = session_ttl_s
        self._lock = threading.RLock()
        self._tier = Tier(client, block_size=block_size, budget_bytes=budget_bytes,
                          lease_bytes=lease_bytes, ttl_s=ttl_s,
                          priorities=priorities or DEFAULT_PRIORITIES,
                          idle_release_s=idle_release_s, correlated_s=correlated_s,
                          labels={"poold.kv": "block-store", **(labels or {})}, pool=pool,
                          maintenance_period_s=maintenance_period_s, elastic=elastic,
                          on_reclaim=self._give_back, grow_wait_s=grow_wait_s,
                          idle_s=self._idle_report, clock=clock)
        self._index = self._tier.index
        self._closed = False
        self._worker = Worker("poold-kv-worker", self.maintain, maintenance_period_s)

    def _give_back(self) -> None:
        """The daemon asked for leases (their ids are queued): give them back now if the lock
        comes soon, or through the gate if its holder is a growth waiting for room; else the
        call holding it does at its next tick, or the maintenance worker within its period."""
        if self._lock.acquire(timeout=GIVE_BACK_WAIT_S):
            try:
                self._tier.give_back_asked()
            finally:
                self._lock.release()
        else:
            self._tier.give_back_while_growing()

    def _idle_report(self) -> dict[str, float] | None:
        """What each keepalive tells the daemon of the leases' idleness. The keepalive thread
        never waits long for the store's lock: close holds it while it joins that thread, and
        a growth may hold it for grow_wait_s, longer than a lease lives unrenewed. Without the
        lock this keepalive reports nothing and the daemon keeps the last report."""
        if not self._lock.acquire(timeout=IDLE_REPORT_WAIT_S):
            return None
        try:
            return self._tier.idle_report()
        finally:
            self._lock.release()

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finish pending async puts, then release every lease. Idempotent."""
        self._worker.close()  # runs what was queued before returning; refuses new puts
        with self._lock:
            self._closed = True
            self._tier.close()

    # -- writes --------------------------------------------------------------------------------

    def put(self, key: bytes, block: BufferLike, *, priority: str = "default",
            session: str | None = None) -> bool:
        """put_many for one block, on a shorter path (an engine may call it once a block)."""
        if session is not None:
            return self.put_many([key], block, priority=priority, session=session)[0]
        source = block_view(block, self.block_size)
        self._index.rank(priority)  # refuse an unknown class before reserving anything
        with self._lock:
            self._check_open()
            self._tier.tick()
            got = self._tier.reserve_one(key)
        if isinstance(got, bool):
            return got
        slab, slot = got
        written = False
        try:
            buffer = buffer_or_none(slab)
            if buffer is not None:
                offset = slot * self.block_size
                buffer[offset:offset + self.block_size] = source
                written = True
        except ValueError:  # the mapping was released under us: the lease was given up
            pass
        finally:  # on any error too, so the slot goes back before it goes up
            with self._lock:
                stored = self._tier.commit_one(key, slab, slot, written, priority)
        return stored

    def put_many(self, keys: Sequence[bytes], blocks: Blocks, *, priority: str = "default",
                 session: str | None = None) -> list[bool]:
        """Store blocks: one contiguous buffer of len(keys) blocks, or one buffer each.
        Returns, per key, whether the store holds it now. False: no room (budget spent and every
        block pinned), or its lease was lost during the copy. `session` also holds the keys
        for that session (see pin_session)."""
        source = split_blocks(blocks, len(keys), self.block_size)
        return self._put(keys, lambda reserved: write_blocks(reserved, source), priority,
                         session)

    def put_in_place(self, keys: Sequence[bytes],
                     fill: Callable[[list[int], list[memoryview]], None], *,
                     priority: str = "default", session: str | None = None) -> list[bool]:
        """put_many whose caller writes the blocks into their slots itself: `fill(positions,
        views)` is called once, with the positions in `keys` of the blocks to write (a key held
        already is not asked for) and a writable view of block_size bytes of leased memory for
        each, and must have written them all when it returns (a GPU copy into leases registered
        with the device, say, synchronised). The views are the lease's memory: use them only
        inside `fill`. If `fill` raises, nothing is stored and the error goes up. Returns what
        put_many returns."""
        size = self.block_size
        return self._put(keys, lambda reserved: hand_out_slots(reserved, size, fill), priority,
                         session)

    def put_async(self, keys: Sequence[bytes], blocks: Blocks, *, priority: str = "default",
                  session: str | None = None) -> Future[list[bool]]:
        """put_many on the background worker, in submission order; the future completes with
        its result. Leave `blocks` unchanged until then: the copy reads them in place."""
        keys = list(keys)
        source = split_blocks(blocks, len(keys), self.block_size)  # bad shapes fail here, now
        self._index.rank(priority)
        return self._worker.submit(lambda: self._put(
            keys, lambda reserved: write_blocks(reserved, source), priority, session))

    def _put(self, keys: Sequence[bytes], write: Callable[[list[Reserved]], list[bool]],
             priority: str, session: str | None) -> list[bool]:
        self._index.rank(priority)  # refuse an unknown class before reserving anything
        with self._lock:
            self._check_open()
            self._tier.tick()
            held, reserved = self._tier.reserve(keys)
        try:
            written = write(reserved)
        except BaseException:  # give the reserved slots back before the error goes up
            with self._lock:
                self._tier.commit(reserved, [False] * len(reserved), held, priority)
            raise
        with self._lock:
            self._tier.commit(reserved, written, held, priority)
            if session is not None:
                self._index.hold(session, [k for k, ok in zip(keys, held, strict=True) if ok],
                                 self.session_ttl_s)
        return held

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every put_async submitted so far."""
        self._worker.flush(timeout)

    def discard(self, keys: Iterable[bytes]) -> int:
        """Drop unpinned blocks now; an emptied lease is given back after idle_release_s."""
        with self._lock:
            gone = sum(self._index.discard(k) for k in keys)
            self._index.counts["discarded"] += gone
            return gone

    # -- reads ---------------------------------------------------------------------------------

    def contains(self, key: bytes) -> bool:
        return self.contains_many([key])[0]

    def contains_many(self, keys: Iterable[bytes]) -> list[bool]:
        """Which keys a get would find now (a lookup is not a reference for eviction)."""
        with self._lock:
            self._tier.tick()
            return [(w := self._index.get(k)) is not None and w.slab.usable for k in keys]

    def get(self, key: bytes) -> bytes | None:
        """A copy of the block, or None on a miss."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            found, out = self._find(keys)
            read_blocks(found, self.block_size, bytes, out)
            return self._finish(keys, found, out)

    def get_into(self, key: bytes, out: BufferLike) -> bool:
        """get_many_into for one key, on a shorter path (an engine may call it once a block).
        The copy runs under the lock, as every get's does, and the lease is checked after it:
        lost by then, it is a miss."""
        dst = output_view(out, 1, self.block_size)
        with self._lock:
            self._check_open()
            self._tier.tick()
            where = self._index.get(key)
            if where is not None:
                slab = where.slab
                view = slab.readable()
                if view is not None:
                    dst[:self.block_size] = view[where.offset:where.offset + self.block_size]
                    if slab.readable() is not None:  # else lost during the copy: a miss
                        self._index.touch(key)
                        self._index.counts["hits"] += 1
                        return True
                self._tier.reap_lost()
            self._index.counts["misses"] += 1
            return False

    def get_many_into(self, keys: Sequence[bytes], out: BufferLike) -> list[bool]:
        """Copy block i into out[i * block_size:(i + 1) * block_size]; a miss leaves its part
        untouched. Returns which keys hit."""
        dst = output_view(out, len(keys), self.block_size)
        with self._lock:
            found, hits = self._find(keys)
            for (i, _slab, _offset), ok in zip(found, read_into(found, dst, self.block_size),
                                               strict=True):
                hits[i] = ok or None
            return [got is not None for got in self._finish(keys, found, hits)]

    def get_view(self, key: bytes) -> memoryview | None:
        """get_many_views for one key, on a shorter path (it is called once per block)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            self._tier.tick()
            where = self._index.get(key)
            if where is not None:
                view = where.slab.readonly
                if view is not None and where.slab.usable:
                    self._index.touch(key)
                    self._index.counts["hits"] += 1
                    return view[where.offset:where.offset + self.block_size]
            self._index.counts["misses"] += 1
            return None

    def get_many_views(self, keys: Sequence[bytes]) -> list[memoryview | None]:
        """Zero-copy, read-only views into the lease. A view stays valid until its block is
        evicted or discarded (pin it to prevent that) or its lease is lost: copy out promptly."""
        size = self.block_size
        with self._lock:
            found, out = self._find(keys)
            for i, slab, offset in found:
                view = slab.readonly
                if view is not None:
                    out[i] = view[offset:offset + size]
            return self._finish(keys, found, out)

    def get_array(self, key: bytes) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """A zero-copy, read-only uint8 numpy view of the block (needs numpy)."""
        import numpy as np

        view = self.get_view(key)
        return None if view is None else np.frombuffer(view, dtype=np.uint8)

    def get_tensor(self, key: bytes, dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """get_many_tensors for one key."""
        return self.get_many_tensors([key], dtype)[0]

    def get_many_tensors(self, keys: Sequence[bytes], dtype: torch.dtype | None = None
                         ) -> list[torch.Tensor | None]:
        """Zero-copy, 1-D torch CPU tensors over the blocks, of `dtype` (uint8 by default; the
        block size must be a multiple of its size); needs torch. Valid as long as views are
        (see get_many_views). torch has no read-only tensors: writing into one changes the
        stored block, so treat them as read-only (`.to(device)` or `.clone()` to own a copy)."""
        size = self.block_size
        with self._lock:
            found, out = self._find(keys)
            for i, slab, offset in found:
                with contextlib.suppress(errors.PooldError):  # lost: a miss
                    out[i] = slab.tensor(offset, size, dtype)
            return self._finish(keys, found, out)

    def _find(self, keys: Sequence[bytes]) -> tuple[list[Found], list[Any]]:
        """Where the present keys are, and an answer list of Nones. Under the lock."""
        self._check_open()
        self._tier.tick()
        get = self._index.locations.get
        found = [(i, where[0], where[2]) for i, key in enumerate(keys)
                 if (where := get(key)) is not None]
        return found, [None] * len(keys)

    def _finish(self, keys: Sequence[bytes], found: list[Found], out: list[Any]) -> list[Any]:
        """After the reads: a block whose lease was lost meanwhile is a miss (its bytes may be
        someone else's by now); a hit is a reference for eviction. Counts hits and misses."""
        usable: dict[LeaseSlab, bool] = {}
        touch = self._index.touch
        hits = 0
        for i, slab, _offset in found:
            if out[i] is None:
                continue
            alive = usable.get(slab)
            if alive is None:
                alive = usable[slab] = slab.usable
            if alive:
                touch(keys[i])
                hits += 1
            else:
                out[i] = None
        if len(usable) and not all(usable.values()):
            self._tier.reap_lost()
        self._index.counts["hits"] += hits
        self._index.counts["misses"] += len(keys) - hits
        return out

    # -- retention -----------------------------------------------------------------------------

    def pin(self, keys: Iterable[bytes]) -> int:
        """Pin present blocks (pins nest); a pinned block is never evicted. Returns how many."""
        with self._lock:
            return self._index.pin(keys)

    def unpin(self, keys: Iterable[bytes]) -> int:
        """Drop one pin from each; unpinning an unpinned or absent block is a no-op."""
        with self._lock:
            return self._index.unpin(keys)

    def pin_session(self, session: str, keys: Iterable[bytes], ttl_s: float | None = None) -> int:
        """Hold the present `keys` for `session` across a gap (a tool call) until
        end_session or until ttl_s (default session_ttl_s) passes without touch_session."""
        with self._lock:
            self._tier.tick()
            return self._index.hold(session, keys, self.session_ttl_s if ttl_s is None else ttl_s)

    def touch_session(self, session: str, ttl_s: float | None = None) -> bool:
        """Push the session's deadline out; False when it already ended or expired."""
        with self._lock:
            self._tier.tick()
            return self._index.extend(session, self.session_ttl_s if ttl_s is None else ttl_s)

    def end_session(self, session: str) -> int:
        """Release the session's holds; its blocks stay cached, evictable again."""
        with self._lock:
            return self._index.end_session(session)

    # -- inspection and upkeep -----------------------------------------------------------------

    def locate(self, key: bytes) -> BlockLocation | None:
        """Where the block's bytes are, for another process mapping the same lease."""
        with self._lock:
            self._tier.maintain()
            return self._tier.locate(key)

    def eviction_order(self) -> list[bytes]:
        """Unpinned keys, next victim first."""
        with self._lock:
            return self._index.order()

    def lost_leases(self) -> list[LostLease]:
        """Every lease this store lost (expired or revoked under it), oldest first."""
        with self._lock:
            self._tier.maintain()
            return list(self._tier.lost)

    def stats(self) -> KVStats:
        with self._lock:
            self._tier.maintain()
            return self._tier.stats()

    def maintain(self) -> None:
        """Expire sessions, drop lost leases, give idle ones back. Every call does this first;
        the worker also does it while the engine is quiet."""
        with self._lock:
            if not self._closed:
                self._tier.maintain()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
