"""Batches copy neighbouring blocks in one go: whatever the layout of slots (fresh, scattered
after evictions, across two leases) and of the caller's buffers, every block lands intact."""

from __future__ import annotations

import numpy as np

from poold.client import PooldClient
from poold.kv import KVStore
from poold.types import KiB, MiB
from tests.kv.conftest import block, make_blocks, make_keys

BS = 16 * KiB
LEASE = 2 * MiB
PER_LEASE = LEASE // BS


def test_scattered_slots_and_mixed_buffers_keep_every_byte(client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=2 * LEASE, lease_bytes=LEASE) as store:
        first, data = make_keys(PER_LEASE + 10), make_blocks(PER_LEASE + 10, BS)
        assert all(store.put_many(first, data))  # one run per lease, across the boundary
        assert store.discard(first[1::3]) == len(first[1::3])  # free every third slot
        later, more = make_keys(60, tag=1), make_blocks(60, BS, seed=1)
        parts = [np.frombuffer(block(more, i, BS), dtype=np.uint8) for i in range(30)]
        assert all(store.put_many(later[:30], parts))  # one buffer per block
        assert all(store.put_many(later[30:], more[30 * BS:]))  # one buffer, scattered slots

        kept = [k for k in first if k not in set(first[1::3])]
        want = {k: block(data, first.index(k), BS) for k in kept}
        want.update({k: block(more, i, BS) for i, k in enumerate(later)})
        asked = [*kept[::-1], b"absent", *later, *kept]  # neighbours in the lease, reversed
        out = bytearray(b"\xee" * len(asked) * BS)
        hits = store.get_many_into(asked, out)
        assert hits == [k != b"absent" for k in asked]
        for i, key in enumerate(asked):
            assert out[i * BS:(i + 1) * BS] == want.get(key, b"\xee" * BS)
        assert store.get_many(asked) == [want.get(k) for k in asked]
        views = store.get_many_views(asked)
        assert [None if v is None else bytes(v) for v in views] == [want.get(k) for k in asked]
        del views


def test_a_batch_larger_than_the_room_stores_what_fits(client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=LEASE, lease_bytes=LEASE) as store:
        keys, data = make_keys(PER_LEASE + 5), make_blocks(PER_LEASE + 5, BS)
        store.pin(keys)  # nothing is pinned yet: a no-op
        held = store.put_many(keys[:PER_LEASE], data[:PER_LEASE * BS])
        assert all(held)
        store.pin(keys[:PER_LEASE])
        assert store.put_many(keys[PER_LEASE:], data[PER_LEASE * BS:]) == [False] * 5
        stats = store.stats()
        assert (stats.rejected, stats.blocks_used) == (5, PER_LEASE)
        assert store.unpin(keys[:3]) == 3
        assert store.put_many(keys[PER_LEASE:], data[PER_LEASE * BS:]) == [True] * 3 + [
            False] * 2
        assert store.get_many(keys[PER_LEASE:PER_LEASE + 3]) == [
            block(data, i, BS) for i in range(PER_LEASE, PER_LEASE + 3)]
