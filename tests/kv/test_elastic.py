"""Elastic KV stores against the real daemon: when another store's grant waits for room in the
full pool, the daemon asks an elastic store for a lease; the store drops that lease's blocks
(misses from then on, never foreign bytes) and gives it back at once, and the waiting store
gets the room."""

from __future__ import annotations

import json
import threading

import httpx

from poold.client import PooldClient
from poold.kv import KVStore
from poold.types import MiB
from tests.kv.clock import FakeClock
from tests.kv.conftest import DEVICE_BYTES, block, make_blocks, make_keys
from tests.timing import patience, until

BS = MiB
LEASE = 16 * MiB
PER_LEASE = LEASE // BS


def newest_event(client: PooldClient) -> int:
    """The id of the daemon's newest event: the module's tests share one daemon, so a test
    reads only the events after it (another test's asks are not its own)."""
    newest = client.events(limit=1)
    return newest[0].id if newest else 0


def test_a_full_pool_makes_room_from_an_elastic_store(client: PooldClient) -> None:
    blocks = DEVICE_BYTES // BS
    keys, data = make_keys(blocks, tag=1), make_blocks(blocks, BS, seed=1)
    before = newest_event(client)
    with KVStore(client, BS, DEVICE_BYTES, LEASE, elastic=True,
                 idle_release_s=3600) as cache, \
            KVStore(client, BS, LEASE, LEASE, grow_wait_s=30) as busy:
        assert all(cache.put_many(keys, data))  # the whole device, in four elastic leases
        assert cache.stats().leases == 4
        mine = make_keys(1, tag=2)
        assert busy.put_many(mine, make_blocks(1, BS, seed=2)) == [True]  # waited for room
        assert busy.get(mine[0]) == make_blocks(1, BS, seed=2)
        # One lease asked for, exactly the one the grant lacked, and given back by the store
        # itself (released, not revoked), as a whole: its blocks are misses, never others' bytes.
        [asked] = client.events(kind="lease.reclaim_asked", after_id=before)
        assert (asked.details["length"], asked.details["for_bytes"]) == (LEASE, LEASE)
        stats = cache.stats()
        assert (stats.leases_reclaimed, stats.reclaimed, stats.leases) == (1, PER_LEASE, 3)
        assert stats.leased_bytes == DEVICE_BYTES - LEASE
        got = cache.get_many(keys)
        kept = [i for i, value in enumerate(got) if value is not None]
        assert len(kept) == blocks - PER_LEASE
        assert all(got[i] == block(data, i, BS) for i in kept)  # never another's bytes
        [given] = [e for e in client.events(lease_id=asked.lease_id)
                   if e.kind in ("lease.released", "lease.revoked")]
        assert given.kind == "lease.released"


def test_a_store_that_is_not_elastic_is_never_asked(client: PooldClient) -> None:
    keys = make_keys(DEVICE_BYTES // BS, tag=3)
    with KVStore(client, BS, DEVICE_BYTES, LEASE, idle_release_s=3600) as holder, \
            KVStore(client, BS, LEASE, LEASE, grow_wait_s=0.5) as busy:
        assert all(holder.put_many(keys, make_blocks(len(keys), BS, seed=3)))
        assert busy.put_many(make_keys(1, tag=4), make_blocks(1, BS, seed=4)) == [False]
        assert busy.stats().grow_failures == 1
        assert holder.stats().leases_reclaimed == 0
        assert all(v is not None for v in holder.get_many(keys))


def test_what_a_session_holds_is_kept_when_its_lease_is_asked_back(client: PooldClient) -> None:
    """The asked lease's session-held blocks move to the store's other leases (the coldest
    blocks there make room); the rest of it is dropped; nothing returns another key's bytes."""
    blocks = DEVICE_BYTES // BS
    keys, data = make_keys(blocks, tag=5), make_blocks(blocks, BS, seed=5)
    held = keys[::8]  # two in every lease
    with KVStore(client, BS, DEVICE_BYTES, LEASE, elastic=True,
                 idle_release_s=3600) as cache, \
            KVStore(client, BS, LEASE, LEASE, grow_wait_s=30) as busy:
        assert all(cache.put_many(keys, data))
        assert cache.pin_session("agent-1", held, ttl_s=3600) == len(held)
        assert busy.put_many(make_keys(1, tag=6), make_blocks(1, BS, seed=6)) == [True]
        stats = cache.stats()
        assert (stats.leases_reclaimed, stats.leases) == (1, 3)
        assert stats.reclaimed == PER_LEASE - 2  # its two held blocks moved, not dropped
        assert stats.evictions == 2  # the coldest blocks elsewhere made room for them
        got = dict(zip(keys, cache.get_many(keys), strict=True))
        assert all(got[k] == block(data, keys.index(k), BS) for k in held)
        present = [k for k, v in got.items() if v is not None]
        assert len(present) == blocks - PER_LEASE
        assert all(got[k] == block(data, keys.index(k), BS) for k in present)


class RecordedReports(httpx.HTTPTransport):
    """The seam between the store's SDK and the daemon: records what each session keepalive
    reported of the leases' idleness, and passes everything on."""

    def __init__(self) -> None:
        super().__init__()
        self.reports: list[dict[str, float]] = []
        self.keepalives = 0  # with or without a report

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/keepalive"):
            self.keepalives += 1
            if request.content:
                self.reports.append(json.loads(request.content)["idle_s"])
        return super().handle_request(request)


def test_the_lease_asked_back_is_the_one_used_least_lately(daemon_url: str,
                                                          client: PooldClient) -> None:
    """The store tells the daemon, at each keepalive, how long each lease went unreferenced:
    of two full leases, the one whose blocks were read lately is kept."""
    clock = FakeClock(0.0)
    pool_blocks = DEVICE_BYTES // BS
    keys, data = make_keys(2 * PER_LEASE, tag=7), make_blocks(2 * PER_LEASE, BS, seed=7)
    transport = RecordedReports()
    with PooldClient(daemon_url, transport=transport) as reporting, \
            KVStore(client, BS, DEVICE_BYTES - 2 * LEASE, LEASE, idle_release_s=3600) as filler, \
            KVStore(reporting, BS, 2 * LEASE, LEASE, elastic=True, ttl_s=3,
                    idle_release_s=3600, clock=clock) as cache, \
            KVStore(client, BS, LEASE, LEASE, grow_wait_s=30) as busy:
        others = make_keys(pool_blocks - 2 * PER_LEASE, tag=8)
        assert all(filler.put_many(others, make_blocks(len(others), BS, seed=8)))
        assert all(cache.put_many(keys, data))  # two leases, in the order of the keys
        cold, hot = (cache.locate(keys[0]), cache.locate(keys[-1]))
        assert cold is not None and hot is not None and cold.lease_id != hot.lease_id
        clock.now = 100.0
        assert all(v is not None for v in cache.get_many(keys[PER_LEASE:]))  # the second, hot
        sent = len(transport.reports)
        until("a keepalive tells the daemon", lambda: len(transport.reports) > sent,
              patience(3))
        assert transport.reports[-1] == {cold.lease_id: 100.0, hot.lease_id: 0.0}
        assert busy.put_many(make_keys(1, tag=9), make_blocks(1, BS, seed=9)) == [True]
        got = cache.get_many(keys)
        assert got[:PER_LEASE] == [None] * PER_LEASE  # the cold lease went
        assert got[PER_LEASE:] == [block(data, i, BS) for i in range(PER_LEASE, 2 * PER_LEASE)]


def test_keepalives_go_on_while_a_growth_waits_for_room_holding_the_lock(
        daemon_url: str, client: PooldClient) -> None:
    """A growth waits for room holding the store's lock, here for longer than the store's
    leases live unrenewed: the keepalive thread does not wait for that lock (it sends no idle
    report instead), so the leases outlive the wait and their blocks are still there. (Its
    waiting for the lock also hung close, which holds the lock while it joins that thread.)"""
    pool_blocks = DEVICE_BYTES // BS
    transport = RecordedReports()
    mine, data = make_keys(PER_LEASE, tag=10), make_blocks(PER_LEASE, BS, seed=10)
    grown: list[list[bool]] = []
    with PooldClient(daemon_url, transport=transport) as reporting, \
            KVStore(client, BS, DEVICE_BYTES - LEASE, LEASE, idle_release_s=3600) as filler:
        assert all(filler.put_many(make_keys(pool_blocks - PER_LEASE, tag=11),
                                   make_blocks(pool_blocks - PER_LEASE, BS, seed=11)))
        with KVStore(reporting, BS, 2 * LEASE, LEASE, ttl_s=3, grow_wait_s=60,
                     idle_release_s=3600) as waiting:
            assert all(waiting.put_many(mine, data))  # the last lease the pool had
            growth = threading.Thread(target=lambda: grown.append(
                waiting.put_many(make_keys(1, tag=12), make_blocks(1, BS, seed=12))))
            growth.start()
            sent = transport.keepalives
            until("keepalives through a wait longer than the leases' ttl",
                  lambda: transport.keepalives >= sent + 4, patience(4))
            assert growth.is_alive()  # still waiting for room: the pool is full
            filler.close()  # room, at last
            growth.join(patience(3))
            assert grown == [[True]]
            assert waiting.get_many(mine) == [block(data, i, BS) for i in range(PER_LEASE)]
            assert waiting.stats().leases_lost == 0


def test_two_full_stores_growing_at_once_give_each_other_room(client: PooldClient) -> None:
    """Each store's growth asks for the other's lease while holding its own lock: each hands
    back what it was asked between the steps of its own wait, so both are served."""
    half = DEVICE_BYTES // 2
    first_keys, second_keys = make_keys(half // BS, tag=10), make_keys(half // BS, tag=11)
    before = newest_event(client)
    with KVStore(client, BS, DEVICE_BYTES, LEASE, elastic=True, grow_wait_s=20,
                 idle_release_s=3600) as first, \
            KVStore(client, BS, DEVICE_BYTES, LEASE, elastic=True, grow_wait_s=20,
                    idle_release_s=3600) as second:
        assert all(first.put_many(first_keys, make_blocks(len(first_keys), BS, seed=10)))
        assert all(second.put_many(second_keys, make_blocks(len(second_keys), BS, seed=11)))
        # The pool is full; both now need a lease more, at the same time.
        stored: dict[str, list[bool]] = {}
        ready = threading.Barrier(2)

        def grow(store: KVStore, name: str, tag: int) -> None:
            ready.wait()
            stored[name] = store.put_many(make_keys(PER_LEASE + 1, tag=tag),
                                          make_blocks(PER_LEASE + 1, BS, seed=tag))

        growing = [threading.Thread(target=grow, args=args)
                   for args in ((first, "first", 12), (second, "second", 13))]
        for thread in growing:
            thread.start()
        for thread in growing:
            thread.join(patience(20))
        assert stored == {"first": [True] * (PER_LEASE + 1), "second": [True] * (PER_LEASE + 1)}
        assert first.stats().grow_failures == second.stats().grow_failures == 0
        assert first.stats().leases_reclaimed + second.stats().leases_reclaimed >= 2
        # Given back by the stores, none taken by the daemon's reclaimer past the deadline.
        assert [e for e in client.events(kind="lease.revoked", after_id=before)
                if e.actor == "reclaimer"] == []
