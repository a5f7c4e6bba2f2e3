"""Zero-copy torch tensors from the store: they are views of the lease, misses are None, and a
lost lease gives no tensor."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from poold.client import PooldClient
from poold.kv import KVStore
from poold.types import KiB, MiB
from tests.kv.conftest import block, make_blocks, make_keys

BS = 64 * KiB
LEASE = 2 * MiB


@pytest.fixture
def store(client: PooldClient) -> Iterator[KVStore]:
    with KVStore(client, BS, budget_bytes=LEASE, lease_bytes=LEASE) as s:
        yield s


def test_tensors_are_zero_copy_views_of_the_lease(store: KVStore) -> None:
    keys, data = make_keys(4), make_blocks(4, BS)
    assert all(store.put_many(keys, data))
    tensor = store.get_tensor(keys[1])
    assert tensor is not None and tensor.dtype == torch.uint8 and tensor.shape == (BS,)
    assert bytes(tensor.numpy()) == block(data, 1, BS)
    where = store.locate(keys[1])
    assert where is not None
    fd = os.open(where.map_path, os.O_RDWR)
    # Written by the lease's map_path: the tensor shows it, so it is the lease's memory.
    try:
        os.pwrite(fd, b"\x01\x02\x03", where.map_offset + where.slot_offset)
    finally:
        os.close(fd)
    assert tensor[:3].tolist() == [1, 2, 3]
    del tensor


def test_many_tensors_with_a_dtype_and_misses(store: KVStore) -> None:
    keys = make_keys(3)
    halves = [torch.full((BS // 2,), float(i), dtype=torch.float16) for i in range(3)]
    assert all(store.put_many(keys, [h.view(torch.uint8).numpy() for h in halves]))
    got = store.get_many_tensors([keys[2], b"absent", keys[0]], torch.float16)
    assert got[1] is None
    first, last = got[0], got[2]
    assert first is not None and last is not None
    assert torch.equal(first, halves[2]) and torch.equal(last, halves[0])
    assert first.dtype == torch.float16 and first.shape == (BS // 2,)
    stats = store.stats()
    assert (stats.hits, stats.misses) == (2, 1)
    del got, first, last


def test_no_tensor_from_a_lost_lease(store: KVStore) -> None:
    keys, data = make_keys(2), make_blocks(2, BS)
    assert all(store.put_many(keys, data))
    slab = store._tier.leases.slabs[0]
    slab.lease.lost_reason = "LeaseNotActive: revoked (simulated)"
    assert store.get_many_tensors(keys) == [None, None]
    assert store.get_tensor(keys[0]) is None
    (lost,) = store.lost_leases()
    assert "simulated" in lost.reason
