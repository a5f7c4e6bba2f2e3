"""Blocks one process puts are the bytes another process reads through its own mapping."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

from poold.client import PooldClient
from poold.kv import KVStore
from poold.types import KiB, MiB
from tests.kv.conftest import block, make_blocks, make_keys
from tests.kv.reader import read_published_blocks

BS = 16 * KiB


def test_a_second_process_reads_identical_bytes(client: PooldClient) -> None:
    with KVStore(client, BS, budget_bytes=4 * MiB, lease_bytes=2 * MiB) as store:
        keys, data = make_keys(200), make_blocks(200, BS, seed=7)
        assert all(store.put_many(keys, data))  # 200 blocks over two leases
        # Publish (lease extent -> slot offsets); remember which block each slot holds.
        extents: dict[tuple[str, int, int, int], list[tuple[int, int]]] = defaultdict(list)
        for i, key in enumerate(keys):
            where = store.locate(key)
            assert where is not None
            extent = (where.map_path, where.map_offset, where.lease_length, where.align)
            extents[extent].append((where.slot_offset, i))
        assert len(extents) == 2

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        reader = ctx.Process(target=read_published_blocks, args=(child,))
        reader.start()
        try:
            parent.send(([(*extent, [slot for slot, _ in slots])
                          for extent, slots in extents.items()], BS))
            assert parent.poll(30), "the reader process did not answer"
            seen: list[bytes] = parent.recv()
        finally:
            reader.join(30)
            if reader.is_alive():
                reader.kill()
        assert reader.exitcode == 0
        expected = [block(data, i, BS) for slots in extents.values() for _, i in slots]
        assert len(seen) == 200 and seen == expected
