"""ObjectStore: objects of any size over the block store, through a real daemon's leases. An
object is whole or a miss: never a part of it, never another object's bytes."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from poold.client import PooldClient
from poold.integrations.objects import ObjectStore, Put, part_keys
from poold.kv import KVStore
from poold.types import KiB, MiB

BLOCK = 64 * KiB


@pytest.fixture
def store(client: PooldClient) -> Iterator[ObjectStore]:
    objects = ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=8 * MiB,
                                  lease_bytes=2 * MiB, idle_release_s=3600))
    yield objects
    objects.close()


def payload(nbytes: int, seed: int) -> memoryview:
    return memoryview(bytearray(random.Random(seed).randbytes(nbytes)))


@pytest.mark.parametrize("nbytes", [1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 5 * BLOCK + 17])
def test_an_object_comes_back_byte_for_byte_whatever_its_size(store: ObjectStore,
                                                              nbytes: int) -> None:
    data = payload(nbytes, nbytes)
    assert store.put_many([b"k"], [data]) == [Put.STORED]
    assert store.sizes([b"k", b"absent"]) == [nbytes, None]
    out = memoryview(bytearray(nbytes))
    assert store.get_many_into([b"k"], [out]) == [True]
    assert out == data


@pytest.mark.parametrize("nbytes", [7, BLOCK, 3 * BLOCK + 1])
def test_one_object_at_a_time_is_the_batch_of_one(store: ObjectStore, nbytes: int) -> None:
    """put/get_into, the per-call paths (one whole block takes a shorter one), answer as
    put_many/get_many_into of one."""
    data = payload(nbytes, nbytes)
    assert store.put(b"k", data) is Put.STORED
    assert store.put(b"k", payload(nbytes, 0)) is Put.PRESENT  # kept, not written again
    out = memoryview(bytearray(nbytes))
    assert store.get_into(b"k", out) and out == data
    assert not store.get_into(b"absent", out)
    wrong = memoryview(bytearray(nbytes + 1))
    assert not store.get_into(b"k", wrong) and bytes(wrong) == bytes(nbytes + 1)
    store.kv.discard(part_keys(b"k", nbytes, BLOCK)[-1:])  # as an eviction would
    assert not store.get_into(b"k", out)
    assert store.gone() == [(b"k", nbytes)] and len(store) == 0
    assert store.put(b"k", data) is Put.STORED  # evicted: written again


def test_one_whole_block_without_room_is_refused_and_leaves_nothing(
        client: PooldClient) -> None:
    with ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=2 * MiB,
                             lease_bytes=2 * MiB, idle_release_s=3600)) as store:
        store.put_many([b"pinned"], [payload(32 * BLOCK, 0)])
        store.lock([b"pinned"])
        assert store.put(b"one", payload(BLOCK, 1)) is Put.REFUSED
        assert store.sizes([b"one"]) == [None] and len(store) == 1
        store.unlock([b"pinned"])
        assert store.put(b"one", payload(BLOCK, 1)) is Put.STORED  # the pinned one evicted


def test_a_batch_of_objects_of_mixed_sizes_and_their_misses(store: ObjectStore) -> None:
    sizes = [BLOCK * 2, 100, BLOCK + 5, 7]
    keys = [f"obj-{i}".encode() for i in range(len(sizes))]
    data = [payload(n, i) for i, n in enumerate(sizes)]
    assert store.put_many(keys, data) == [Put.STORED] * len(keys)
    outs = [memoryview(bytearray(n)) for n in sizes] + [memoryview(bytearray(7))]
    assert store.get_many_into([*keys, b"never"], outs) == [True] * len(keys) + [False]
    assert [bytes(o) for o in outs[:-1]] == [bytes(d) for d in data]
    assert bytes(outs[-1]) == bytes(7)  # a miss leaves its buffer alone


def test_a_key_held_already_is_not_written_again(store: ObjectStore) -> None:
    first = payload(BLOCK + 3, 1)
    assert store.put_many([b"k"], [first]) == [Put.STORED]
    assert store.put_many([b"k"], [payload(BLOCK + 3, 2)]) == [Put.PRESENT]
    out = memoryview(bytearray(BLOCK + 3))
    assert store.get_many_into([b"k"], [out]) == [True]
    assert out == first


def test_a_buffer_of_another_size_is_a_miss_and_left_untouched(store: ObjectStore) -> None:
    store.put_many([b"k"], [payload(BLOCK, 1)])
    out = memoryview(bytearray(BLOCK - 1))
    assert store.get_many_into([b"k"], [out]) == [False]
    assert bytes(out) == bytes(BLOCK - 1)
    assert store.sizes([b"k"]) == [BLOCK]  # still there for a buffer of its size


def test_one_part_evicted_makes_the_whole_object_a_miss_reported_once(
        store: ObjectStore) -> None:
    data = payload(3 * BLOCK, 9)
    store.put_many([b"k"], [data])
    store.kv.discard([part_keys(b"k", 3 * BLOCK, BLOCK)[1]])  # as an eviction would
    assert store.sizes([b"k"]) == [None]
    assert not any(store.kv.contains_many(part_keys(b"k", 3 * BLOCK, BLOCK)))
    assert store.gone() == [(b"k", 3 * BLOCK)]
    assert store.gone() == []
    assert len(store) == 0


def test_delete_forgets_and_frees(store: ObjectStore) -> None:
    store.put_many([b"a", b"b"], [payload(2 * BLOCK, 1), payload(10, 2)])
    assert store.delete([b"a", b"absent"]) == [2 * BLOCK, None]
    assert store.sizes([b"a", b"b"]) == [None, 10]
    assert not any(store.kv.contains_many(part_keys(b"a", 2 * BLOCK, BLOCK)))
    assert store.gone() == []  # a delete is no loss


def test_a_locked_object_outlives_eviction_pressure_until_unlocked(
        client: PooldClient) -> None:
    # one 2 MiB lease of 32 blocks: the budget is full after 32 one-block objects
    with ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=2 * MiB,
                             lease_bytes=2 * MiB, idle_release_s=3600)) as store:
        store.put_many([b"locked"], [payload(BLOCK, 0)])
        assert store.lock([b"locked", b"absent"]) == [True, False]
        store.lock([b"locked"])  # locks nest
        assert store.locked(b"locked") and not store.locked(b"absent")
        for i in range(64):
            store.put_many([f"filler-{i}".encode()], [payload(BLOCK, i)])
        assert store.sizes([b"locked"]) == [BLOCK]
        store.unlock([b"locked"])
        for i in range(64, 96):
            store.put_many([f"filler-{i}".encode()], [payload(BLOCK, i)])
        assert store.sizes([b"locked"]) == [BLOCK]  # one lock is left
        assert store.locked(b"locked")
        store.unlock([b"locked"])
        assert not store.locked(b"locked")
        store.unlock([b"locked"])  # one more than it had: nothing happens
        for i in range(96, 160):
            store.put_many([f"filler-{i}".encode()], [payload(BLOCK, i)])
        assert store.sizes([b"locked"]) == [None]


def test_a_deleted_locked_object_is_unpinned_by_its_unlock(client: PooldClient) -> None:
    with ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=2 * MiB,
                             lease_bytes=2 * MiB, idle_release_s=3600)) as store:
        store.put_many([b"k"], [payload(BLOCK, 0)])
        store.lock([b"k"])
        store.delete([b"k"])
        assert store.kv.stats().pinned == 1  # a pinned block is not freed by a delete
        store.unlock([b"k"])
        assert store.kv.stats().pinned == 0


def test_no_room_stores_nothing_of_an_object(client: PooldClient) -> None:
    with ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=2 * MiB,
                             lease_bytes=2 * MiB, idle_release_s=3600)) as store:
        store.put_many([b"pinned"], [payload(31 * BLOCK, 0)])
        store.lock([b"pinned"])
        # one block left: a three-block object cannot be placed whole
        assert store.put_many([b"big"], [payload(3 * BLOCK, 1)]) == [Put.REFUSED]
        assert store.sizes([b"big"]) == [None]
        assert not any(store.kv.contains_many(part_keys(b"big", 3 * BLOCK, BLOCK)))
        store.unlock([b"pinned"])


def test_part_keys_name_the_object_its_size_and_the_part() -> None:
    a = part_keys(b"k", 3 * BLOCK, BLOCK)
    assert len(a) == 3 and len(set(a)) == 3
    assert part_keys(b"k", 1, BLOCK) != part_keys(b"k", 2, BLOCK)
    assert set(a).isdisjoint(part_keys(b"k2", 3 * BLOCK, BLOCK))
    assert len(part_keys(b"k", 0, BLOCK)) == 1
    assert part_keys(b"k", BLOCK, BLOCK) == (b"k",)  # one whole block: its own part
    digest_long = part_keys(b"a", 2 * BLOCK, BLOCK)[0]  # a key as long as a hashed part
    assert part_keys(digest_long, BLOCK, BLOCK) != (digest_long,)


def test_a_whole_block_object_is_never_taken_for_another(store: ObjectStore) -> None:
    """A whole-block object is stored under its own key: an object of another size under that
    key, and one whose key is another object's hashed part, each come back as stored."""
    whole, shorter = payload(BLOCK, 1), payload(BLOCK - 1, 2)
    assert store.put(b"k", whole) is Put.STORED
    assert store.put_many([b"k"], [shorter]) == [Put.STORED]  # the same key, another size
    out = memoryview(bytearray(BLOCK - 1))
    assert store.get_into(b"k", out) and out == shorter
    two = payload(2 * BLOCK, 3)
    assert store.put_many([b"a"], [two]) == [Put.STORED]
    named_like_a_part = part_keys(b"a", 2 * BLOCK, BLOCK)[0]
    assert store.put(named_like_a_part, whole) is Put.STORED
    back = memoryview(bytearray(2 * BLOCK))
    assert store.get_into(b"a", back) and back == two
    alone = memoryview(bytearray(BLOCK))
    assert store.get_into(named_like_a_part, alone) and alone == whole


def test_an_object_whose_lease_is_asked_back_is_a_miss_whole(client: PooldClient) -> None:
    """An elastic tier (TierSettings elastic) whose lease the daemon asks back for another
    engine's grant: the objects with a part in it are misses and reported gone, the others
    come back byte for byte."""
    elastic = ObjectStore(KVStore(client, block_size=BLOCK, budget_bytes=64 * MiB,
                                  lease_bytes=16 * MiB, idle_release_s=3600, elastic=True))
    data = [payload(3 * BLOCK, seed) for seed in range(256 * 4 // 3)]  # the whole 64 MiB
    keys = [b"o%d" % i for i in range(len(data))]
    try:
        assert set(elastic.put_many(keys, data)) == {Put.STORED}
        granted = client.grant(16 * MiB, wait_s=30)  # another engine, the pool full
        present = elastic.sizes(keys)
        missing = [k for k, size in zip(keys, present, strict=True) if size is None]
        assert 0 < len(missing) < len(keys)
        assert {k for k, _ in elastic.gone()} == set(missing)
        for key, value in zip(keys, data, strict=True):
            if key not in missing:
                out = memoryview(bytearray(len(value)))
                assert elastic.get_many_into([key], [out]) == [True] and out == value
        client.release(granted.id)
    finally:
        elastic.close()
