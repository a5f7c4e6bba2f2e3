"""KVStore against a real daemon: put/get in every flavour, eviction order and priorities,
the budget, idle leases, session holds across a tool-call gap, the async path and stats."""

from __future__ import annotations

import os
import threading
import time
import types
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np
import pytest

import poold.kv
from poold.client import PooldClient
from poold.kv import KVStore
from poold.types import KiB, MiB
from tests.kv.clock import FakeClock
from tests.kv.conftest import block, make_blocks, make_keys

BS = 64 * KiB
LEASE = 2 * MiB  # the device's align: 32 blocks per lease
PER_LEASE = LEASE // BS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(client: PooldClient, clock: FakeClock) -> Iterator[KVStore]:
    with KVStore(client, BS, budget_bytes=LEASE, lease_bytes=LEASE, ttl_s=10,
                 session_ttl_s=30, clock=clock) as s:
        yield s


def test_put_and_get_in_every_flavour(store: KVStore) -> None:
    keys, data = make_keys(8), make_blocks(8, BS)
    assert store.put_many(keys[:4], data[:4 * BS]) == [True] * 4  # one contiguous buffer
    parts = [np.frombuffer(block(data, i, BS), dtype=np.uint8) for i in range(4, 8)]
    assert store.put_many(keys[4:], parts) == [True] * 4  # one buffer per block
    assert store.put(keys[0], block(data, 0, BS))  # already held: same key, same bytes

    assert store.get_many(keys) == [block(data, i, BS) for i in range(8)]
    assert store.get(make_keys(1, tag=9)[0]) is None
    out = bytearray(b"\xee" * 3 * BS)
    assert store.get_many_into([keys[2], b"absent", keys[7]], out) == [True, False, True]
    assert out == block(data, 2, BS) + b"\xee" * BS + block(data, 7, BS)
    one = np.zeros(BS, dtype=np.uint8)
    assert store.get_into(keys[5], one) and one.tobytes() == block(data, 5, BS)
    assert all(store.contains_many(keys)) and not store.contains(b"absent")

    stats = store.stats()
    assert (stats.stored, stats.already_present, stats.blocks_used) == (8, 1, 8)
    assert (stats.hits, stats.misses) == (8 + 2 + 1, 1 + 1)
    assert stats.hit_rate == pytest.approx(11 / 13)


def test_a_put_in_place_is_written_by_the_caller_into_its_slots(store: KVStore) -> None:
    """What a GPU client does through leases registered with its device: the store reserves
    the slots and the caller's copy writes them, in one call for the batch."""
    keys, data = make_keys(8), make_blocks(8, BS)
    assert store.put_many(keys[:2], data[:2 * BS]) == [True, True]
    asked: list[int] = []

    def fill(positions: list[int], views: list[memoryview]) -> None:
        asked.extend(positions)
        for position, view in zip(positions, views, strict=True):
            assert (view.nbytes, view.readonly) == (BS, False)
            view[:] = block(data, position, BS)

    assert store.put_in_place(keys, fill) == [True] * 8
    assert asked == list(range(2, 8))  # the blocks held already are not asked for
    assert store.get_many(keys) == [block(data, i, BS) for i in range(8)]
    stats = store.stats()
    assert (stats.stored, stats.already_present, stats.blocks_used) == (8, 2, 8)


def test_a_put_in_place_whose_fill_fails_stores_nothing_and_frees_its_slots(
        store: KVStore) -> None:
    keys, data = make_keys(PER_LEASE), make_blocks(PER_LEASE, BS)

    def fails(positions: list[int], views: list[memoryview]) -> None:
        views[0][:] = block(data, positions[0], BS)
        raise RuntimeError("the device copy failed")

    with pytest.raises(RuntimeError, match="the device copy failed"):
        store.put_in_place(keys, fails)
    assert store.contains_many(keys) == [False] * PER_LEASE
    assert store.stats().blocks_used == 0
    # Every slot back, none left reserved: the whole lease takes the same keys again.
    assert store.put_many(keys, data) == [True] * PER_LEASE
    assert store.get_many(keys) == [block(data, i, BS) for i in range(PER_LEASE)]


def test_gets_can_be_zero_copy_views_of_the_lease(store: KVStore) -> None:
    key, data = make_keys(1)[0], make_blocks(1, BS)
    store.put(key, data)
    view, array = store.get_view(key), store.get_array(key)
    assert view is not None and array is not None
    assert view.readonly and not array.flags.writeable and bytes(view) == data
    where = store.locate(key)
    assert where is not None
    fd = os.open(where.map_path, os.O_RDWR)
    # Written by the lease's map_path: the views show it, so they are the lease's memory.
    try:
        os.pwrite(fd, b"\x01\x02\x03", where.map_offset + where.slot_offset)
    finally:
        os.close(fd)
    assert bytes(view[:3]) == b"\x01\x02\x03" and array[:3].tolist() == [1, 2, 3]
    del view, array


def test_bad_shapes_and_priorities_are_refused(store: KVStore) -> None:
    keys = make_keys(2)
    with pytest.raises(ValueError, match="blocks"):
        store.put_many(keys, b"x" * BS)
    with pytest.raises(ValueError, match="bytes, not"):
        store.put_many(keys, [b"x" * BS, b"x"])
    with pytest.raises(ValueError, match="unknown priority"):
        store.put(keys[0], b"x" * BS, priority="nope")
    with pytest.raises(ValueError, match="output buffer"):
        store.get_many_into(keys, bytearray(BS))
    with pytest.raises(ValueError, match="read-only"):
        store.get_many_into(keys[:1], bytes(BS))
    with pytest.raises(ValueError, match="contiguous"):
        store.put_many(keys, np.zeros((2, 2 * BS), dtype=np.uint8)[:, ::2])
    assert store.stats().blocks_used == 0


def test_full_store_evicts_the_low_class_first_then_by_lru_2(store: KVStore,
                                                             clock: FakeClock) -> None:
    vision, text, fresh = make_keys(16, 1), make_keys(16, 2), make_keys(20, 3)
    store.put_many(vision, make_blocks(16, BS), priority="vision")
    clock.advance(1)
    store.put_many(text, make_blocks(16, BS))
    clock.advance(1)
    store.get_many(text[:4])  # text[:4] are now seen twice; text[4:] once, oldest first
    clock.advance(1)
    assert store.eviction_order()[:16] == vision
    assert store.eviction_order()[16:28] == text[4:]

    assert store.put_many(fresh, make_blocks(20, BS)) == [True] * 20
    stats = store.stats()
    assert stats.evictions == 20 and stats.evictions_by_priority == {"vision": 16, "default": 4}
    assert not any(store.contains_many(vision)) and not any(store.contains_many(text[4:8]))
    assert all(store.contains_many(text[:4] + text[8:] + fresh))
    assert stats.leases == 1 and stats.blocks_used == PER_LEASE


def test_the_budget_caps_the_leases_and_pins_can_make_a_put_fail(client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE, ttl_s=10) as store:
        keys, data = make_keys(100), make_blocks(100, BS)
        for i in range(0, 100, 20):
            assert store.put_many(keys[i:i + 20], data[i * BS:(i + 20) * BS]) == [True] * 20
        stats = store.stats()
        assert (stats.leases, stats.leased_bytes, stats.leases_granted) == (2, 2 * LEASE, 2)
        assert stats.evictions == 100 - 2 * PER_LEASE and stats.budget_refusals > 0
        active = [x for x in client.leases() if x.state == "active"]
        assert len(active) == 2 and all(x.labels["poold.kv"] == "block-store" for x in active)

        held = [k for k, hit in zip(keys, store.contains_many(keys), strict=True) if hit]
        assert store.pin(held) == 2 * PER_LEASE
        more = make_keys(3, tag=5)
        assert store.put_many(more, make_blocks(3, BS)) == [False] * 3  # all pinned, no budget
        assert store.stats().rejected == 3 and store.stats().pinned == 2 * PER_LEASE
        assert store.unpin(held[:1]) == 1
        assert store.put_many(more, make_blocks(3, BS)) == [True, False, False]


def test_a_batch_larger_than_the_store_keeps_its_first_blocks(store: KVStore) -> None:
    """A block's key chains over its whole prefix, so the head of a sequence is what makes the
    rest usable: a put never evicts blocks of its own batch."""
    keys = make_keys(PER_LEASE + 8)
    assert store.put_many(keys, make_blocks(len(keys), BS)) == [True] * PER_LEASE + [False] * 8
    assert store.stats().rejected == 8 and store.stats().evictions == 0


def test_a_lease_rounded_up_past_the_budget_is_given_back(client: PooldClient) -> None:
    # 3 MiB is granted as 4 MiB (2 MiB align), more than the 3 MiB budget.
    with KVStore(client, BS, budget_bytes=3 * MiB, lease_bytes=3 * MiB) as store:
        assert store.put(make_keys(1)[0], make_blocks(1, BS)) is False
        assert store.stats().leases == 0 and store.stats().budget_refusals == 1
        assert not [x for x in client.leases() if x.state == "active"]
    with pytest.raises(ValueError):
        KVStore(client, BS, budget_bytes=LEASE, lease_bytes=2 * LEASE)


def test_a_full_daemon_is_a_refused_put_then_growth_resumes(client: PooldClient,
                                                            clock: FakeClock) -> None:
    with KVStore(client, BS, budget_bytes=4 * LEASE, lease_bytes=LEASE, clock=clock) as store:
        hog = client.lease(64 * MiB)
        try:
            assert store.put(make_keys(1)[0], make_blocks(1, BS)) is False
            assert store.stats().grow_failures == 1
        finally:
            hog.release()
        assert store.put(make_keys(1)[0], make_blocks(1, BS)) is False  # backing off
        clock.advance(1)
        assert store.put(make_keys(1)[0], make_blocks(1, BS)) is True


def test_emptied_leases_are_given_back_after_the_idle_time(client: PooldClient,
                                                           clock: FakeClock) -> None:
    with KVStore(client, BS, budget_bytes=4 * LEASE, lease_bytes=LEASE, idle_release_s=10,
                 clock=clock) as store:
        keys = make_keys(PER_LEASE + 4)
        store.put_many(keys, make_blocks(len(keys), BS))
        first, second = store.locate(keys[0]), store.locate(keys[-1])
        assert first is not None and second is not None and first.lease_id != second.lease_id
        assert store.discard(keys[PER_LEASE:]) == 4
        clock.advance(9)
        store.maintain()
        assert store.stats().leases == 2
        clock.advance(1)
        store.maintain()
        stats = store.stats()
        assert (stats.leases, stats.leases_released, stats.discarded) == (1, 1, 4)
        assert client.get_lease(second.lease_id).state in ("scrubbing", "released")
        assert all(store.contains_many(keys[:PER_LEASE]))


def test_the_worker_gives_idle_leases_back_while_the_engine_is_quiet(
        client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=LEASE, lease_bytes=LEASE, idle_release_s=0.2,
                 maintenance_period_s=0.05) as store:
        keys = make_keys(4)
        store.put_many(keys, make_blocks(4, BS))
        where = store.locate(keys[0])
        assert where is not None
        store.discard(keys)
        deadline = time.monotonic() + 10
        while client.get_lease(where.lease_id).state == "active":  # no store calls meanwhile
            assert time.monotonic() < deadline, "the idle lease was never given back"
            time.sleep(0.05)
        assert store.stats().leases_released == 1


def test_session_blocks_survive_a_tool_call_gap_until_the_session_ends(
        store: KVStore, clock: FakeClock) -> None:
    turn = make_keys(8, tag=1)
    assert store.put_many(turn, make_blocks(8, BS), session="agent-1") == [True] * 8
    assert store.stats().sessions == 1 and store.stats().pinned == 8

    clock.advance(20)  # the tool runs; meanwhile other requests fill the store twice over
    store.put_many(make_keys(64, tag=2), make_blocks(64, BS))
    assert all(store.contains_many(turn))
    assert store.touch_session("agent-1")  # the agent is back: 30 s more
    clock.advance(29)
    store.put_many(make_keys(32, tag=3), make_blocks(32, BS))
    assert all(store.contains_many(turn))

    assert store.end_session("agent-1") == 8
    assert store.stats().pinned == 0 and store.stats().sessions == 0
    assert all(store.contains_many(turn))  # still cached, only evictable now
    store.put_many(make_keys(32, tag=4), make_blocks(32, BS))
    assert not any(store.contains_many(turn))


def test_session_holds_expire_after_their_ttl(store: KVStore, clock: FakeClock) -> None:
    turn = make_keys(4, tag=1)
    store.put_many(turn, make_blocks(4, BS))
    assert store.pin_session("agent-2", [*turn, b"absent"], ttl_s=5) == 4
    clock.advance(4.9)
    store.put_many(make_keys(40, tag=2), make_blocks(40, BS))
    assert all(store.contains_many(turn))
    clock.advance(0.1)
    assert not store.touch_session("agent-2")  # expired: the ttl passed without a touch
    store.put_many(make_keys(40, tag=3), make_blocks(40, BS))
    assert not any(store.contains_many(turn))


def test_async_puts_complete_in_order_off_the_callers_thread(store: KVStore) -> None:
    keys, data = make_keys(24), make_blocks(24, BS)
    with store._lock:  # the store is busy: submitting still returns at once
        futures: list[Future[list[bool]]] = [
            store.put_async(keys[i:i + 8], data[i * BS:(i + 8) * BS]) for i in (0, 8, 16)]
        assert not any(f.done() for f in futures)
    assert [f.result(timeout=10) for f in futures] == [[True] * 8] * 3
    store.put_async(keys[:1], data[:BS], session="s")
    store.flush(timeout=10)
    assert store.stats().sessions == 1
    assert store.get_many(keys) == [block(data, i, BS) for i in range(24)]
    with pytest.raises(ValueError):
        store.put_async(keys[:2], data[:BS])  # shapes are checked before queueing


def test_async_put_after_close_is_refused(client: PooldClient) -> None:
    store = KVStore(client, BS, budget_bytes=LEASE, lease_bytes=LEASE)
    future = store.put_async(make_keys(1), make_blocks(1, BS))
    store.close()
    assert future.result(timeout=10) == [True]  # queued before close: finished by close
    with pytest.raises(RuntimeError):
        store.put_async(make_keys(1), make_blocks(1, BS))
    with pytest.raises(RuntimeError):
        store.get(make_keys(1)[0])
    store.close()


def test_concurrent_puts_and_gets_keep_every_block_intact(client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        data = {tag: make_blocks(16, BS, seed=tag) for tag in range(8)}
        errors: list[str] = []

        def work(tag: int) -> None:
            keys = make_keys(16, tag)
            for _ in range(10):
                store.put_many(keys, data[tag])
                for i, got in enumerate(store.get_many(keys)):
                    if got is not None and got != block(data[tag], i, BS):
                        errors.append(f"tag {tag} block {i} corrupted")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and store.stats().evictions > 0


def test_public_names() -> None:
    assert sorted(poold.kv.__all__) == sorted(
        name for name in dir(poold.kv) if not name.startswith("_")
        and not isinstance(getattr(poold.kv, name), types.ModuleType))
    for name in poold.kv.__all__:
        assert getattr(poold.kv, name) is not None
