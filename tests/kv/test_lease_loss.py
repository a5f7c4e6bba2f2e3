"""A lease revoked or lost under the store: the store stops using it, reports it, and never
writes into its memory again; a lease lost in the middle of a copy indexes nothing.

A revoked emulated lease's memory is a memfd the daemon empties and closes; the tests keep a
descriptor of it of their own (opened by its map_path before the revocation), see it emptied,
and see that whatever the store does next puts nothing there."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from poold.client import PooldClient
from poold.kv import KVStore
from poold.kv.copies import CHECK_EVERY
from poold.kv.leases import LeaseSlab
from poold.kv.stats import BlockLocation
from poold.types import KiB, MiB
from tests.kv.conftest import block, make_blocks, make_keys

BS = 64 * KiB
LEASE = 2 * MiB
PER_LEASE = LEASE // BS
# Short, so a revocation is heard within TTL_S/3; not so short that a renewal a loaded machine
# holds back lets the store's other lease lapse too.
TTL_S = 3


def read_extent(path: str | None, offset: int, length: int) -> bytes:
    assert path is not None
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def hold_memory(location: BlockLocation) -> int:
    """A descriptor of the lease's memory of our own, that outlives the daemon's."""
    assert location.map_path is not None
    return os.open(location.map_path, os.O_RDONLY)


def emptied(client: PooldClient, fd: int, lease_id: str) -> bytes:
    """Once the daemon let go of the ended lease's memory (it no longer reports a map_path),
    what our descriptor of it reads: all zeros, the memfd emptied."""
    deadline = time.monotonic() + 10
    while client.get_lease(lease_id).map_path is not None:
        assert time.monotonic() < deadline, "the daemon kept the ended lease's memory"
        time.sleep(0.02)
    return os.pread(fd, LEASE, 0)


def lose_on_next_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, the keepalive thread flips a lease lost just after a copy took its buffer
    (its writable one, or the read-only one a single get reads): the race no client can
    close, made to happen."""
    for name in ("buffer", "readable"):
        original = getattr(LeaseSlab, name)

        def then_lose(slab: LeaseSlab, original: Callable[[LeaseSlab], memoryview | None]
                      = original) -> memoryview | None:
            view = original(slab)
            slab.lease.lost_reason = "LeaseNotActive: revoked (simulated)"
            return view

        monkeypatch.setattr(LeaseSlab, name, then_lose)


def test_a_revoked_lease_is_dropped_reported_and_never_written_again(
        client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE, ttl_s=TTL_S) as store:
        keys, data = make_keys(PER_LEASE + 8), make_blocks(PER_LEASE + 8, BS)
        assert all(store.put_many(keys, data))
        doomed = store.locate(keys[0])
        assert doomed is not None
        held = hold_memory(doomed)
        assert os.pread(held, BS, doomed.map_offset + doomed.slot_offset) == block(data, 0, BS)

        client.raw("POST", f"/v1/leases/{doomed.lease_id}/revoke")
        deadline = time.monotonic() + 10
        while store.stats().leases_lost == 0:  # the keepalive thread hears of it within ttl/3
            assert time.monotonic() < deadline, "the store never noticed the revocation"
            time.sleep(0.05)
        (lost,) = store.lost_leases()
        assert lost.lease_id == doomed.lease_id and lost.blocks == PER_LEASE
        assert "revoked in the ledger" in lost.reason, lost.reason
        stats = store.stats()
        assert (stats.lost, stats.blocks_used, stats.leases) == (PER_LEASE, 8, 1)
        assert store.get_many(keys[:PER_LEASE]) == [None] * PER_LEASE
        assert store.get_many(keys[PER_LEASE:]) == [block(data, i, BS)
                                                    for i in range(PER_LEASE, len(keys))]

        # The daemon emptied the revoked lease's memory; nothing the store does afterwards
        # puts a byte there again.
        try:
            assert emptied(client, held, doomed.lease_id) == bytes(LEASE)
            more, more_data = make_keys(PER_LEASE, tag=1), make_blocks(PER_LEASE, BS, seed=1)
            assert all(store.put_many(more, more_data))  # a fresh lease, within the budget
            assert store.stats().leases_granted == 3 and store.stats().leases == 2
            assert store.get_many(more) == [block(more_data, i, BS) for i in range(PER_LEASE)]
            assert os.pread(held, LEASE, 0) == bytes(LEASE)
        finally:
            os.close(held)


def test_a_lease_lost_while_the_caller_fills_it_in_place_indexes_nothing(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """put_in_place hands out the slots, then the lease goes while the caller writes them:
    nothing the caller wrote is ever read back as a block."""
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        first = make_keys(1, tag=9)
        store.put_many(first, make_blocks(1, BS))  # the lease exists before the race
        lose_on_next_buffer(monkeypatch)
        keys, data = make_keys(4), make_blocks(4, BS, seed=4)
        filled: list[int] = []

        def fill(positions: list[int], views: list[memoryview]) -> None:
            for position, view in zip(positions, views, strict=True):
                view[:] = block(data, position, BS)
                filled.append(position)

        assert store.put_in_place(keys, fill) == [False] * 4
        monkeypatch.undo()
        assert filled == [0, 1, 2, 3]  # the copy ran, on a lease lost under it
        assert store.get_many(keys + first) == [None] * 5  # lost: misses, both
        assert store.stats().blocks_used == 0


def test_a_lease_lost_during_a_copy_stops_the_copy_and_indexes_nothing(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    bs = 16 * KiB
    with KVStore(client, bs, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        first = make_keys(1, tag=9)
        store.put_many(first, make_blocks(1, bs))  # the lease exists before the race
        where = store.locate(first[0])
        assert where is not None
        before = read_extent(where.map_path, where.map_offset, LEASE)
        # Our own descriptor: the store releases the lost lease, and the daemon may close its
        # memfd (its map_path) before this test reads what the copy left there.
        held = hold_memory(where)

        lose_on_next_buffer(monkeypatch)
        keys, data = make_keys(100), make_blocks(100, bs, seed=3)
        assert store.put_many(keys, data) == [False] * 100
        monkeypatch.undo()

        try:
            after = os.pread(held, LEASE, where.map_offset)
        finally:
            os.close(held)
        # The copy that had started before the flip finishes its run of CHECK_EVERY blocks
        # (slots 1..64; the window no client can close); nothing past it was written.
        written_to = (1 + CHECK_EVERY) * bs
        assert after[written_to:] == before[written_to:]
        stats = store.stats()
        assert (stats.leases_lost, stats.lost, stats.stored) == (1, 1, 1)
        assert not any(store.contains_many(keys + first))
        (lost,) = store.lost_leases()
        assert "simulated" in lost.reason
        assert all(store.put_many(keys[:4], data[:4 * bs]))  # growth goes on with a new lease
        assert store.stats().leases_granted == 2


def test_a_lease_lost_during_a_single_put_indexes_nothing(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """put() has its own one-block path: the same guarantees as put_many's."""
    bs = 16 * KiB
    with KVStore(client, bs, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        first = make_keys(1, tag=9)
        assert store.put(first[0], make_blocks(1, bs))
        lose_on_next_buffer(monkeypatch)
        (key,) = make_keys(1, tag=10)
        assert store.put(key, make_blocks(1, bs, seed=4)) is False
        monkeypatch.undo()
        stats = store.stats()
        assert (stats.leases_lost, stats.lost, stats.stored, stats.blocks_used) == (1, 1, 1, 0)
        assert not store.contains(key) and not store.contains(first[0])
        # Once lost, a lease is not even offered a copy: the next put grows a new lease.
        assert store.put(key, make_blocks(1, bs, seed=4))
        assert store.stats().leases_granted == 2
        assert store.get(key) == make_blocks(1, bs, seed=4)


def test_a_lease_lost_during_a_single_get_into_is_a_miss(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_into() has its own one-block path: a lease lost by the end of its copy is a miss,
    and one lost before it is not even read."""
    bs = 16 * KiB
    with KVStore(client, bs, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        keys = make_keys(2, tag=11)
        assert all(store.put_many(keys, make_blocks(2, bs, seed=5)))
        out = bytearray(bs)
        assert store.get_into(keys[0], out) and out == block(make_blocks(2, bs, seed=5), 0, bs)
        lose_on_next_buffer(monkeypatch)
        assert store.get_into(keys[1], bytearray(bs)) is False  # copied, then found lost
        monkeypatch.undo()
        untouched = bytearray(b"\xee" * bs)
        assert store.get_into(keys[0], untouched) is False  # lost before: nothing copied
        assert untouched == b"\xee" * bs
        stats = store.stats()
        assert (stats.hits, stats.misses, stats.leases_lost, stats.lost) == (1, 2, 1, 2)
        assert not any(store.contains_many(keys))
        with pytest.raises(ValueError, match="holds"):
            store.get_into(keys[0], bytearray(bs - 1))


def test_a_lease_found_lost_when_a_single_get_starts_is_not_read(client: PooldClient) -> None:
    """Lost between two calls (its keepalive thread flipped it; no call has reaped it yet): the
    next one-block get finds the block indexed, reads nothing of the lease, and reaps it. (The
    test above loses its lease during a copy, so its later get finds nothing indexed.)"""
    bs = 16 * KiB
    with KVStore(client, bs, budget_bytes=LEASE, lease_bytes=LEASE,
                 maintenance_period_s=3600) as store:  # no upkeep reaps it first
        keys = make_keys(1, tag=12)
        assert store.put_many(keys, make_blocks(1, bs, seed=6)) == [True]
        (slab,) = store._tier.leases.slabs
        slab.lease.lost_reason = "LeaseNotActive: revoked (simulated)"  # what the thread does
        untouched = bytearray(b"\xee" * bs)
        assert store.get_into(keys[0], untouched) is False
        assert untouched == b"\xee" * bs
        stats = store.stats()
        assert (stats.hits, stats.misses, stats.leases_lost, stats.lost) == (0, 1, 1, 1)


def test_single_puts_after_a_revocation_never_touch_the_revoked_extent(
        client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE, ttl_s=TTL_S) as store:
        keys, data = make_keys(PER_LEASE), make_blocks(PER_LEASE, BS)
        assert all(store.put(k, data[i * BS:(i + 1) * BS]) for i, k in enumerate(keys))
        doomed = store.locate(keys[0])
        assert doomed is not None
        assert store.discard(keys[:4]) == 4  # free slots in the doomed lease
        held = hold_memory(doomed)
        client.raw("POST", f"/v1/leases/{doomed.lease_id}/revoke")
        deadline = time.monotonic() + 10
        while not store.lost_leases():
            assert time.monotonic() < deadline, "the store never noticed the revocation"
            time.sleep(0.05)
        try:
            assert emptied(client, held, doomed.lease_id) == bytes(LEASE)
            more, more_data = make_keys(8, tag=2), make_blocks(8, BS, seed=2)
            assert all(store.put(k, more_data[i * BS:(i + 1) * BS])
                       for i, k in enumerate(more))
            assert os.pread(held, LEASE, 0) == bytes(LEASE)
            assert store.get_many(more) == [block(more_data, i, BS) for i in range(8)]
        finally:
            os.close(held)
