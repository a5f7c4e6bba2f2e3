"""poold's L2 adapter inside LMCache 0.5.6, on a real daemon: loaded the way an operator
configures it, bytes round-tripped through LMCache's own memory objects, two tenants apart,
capacity handed from one engine process to another, a revoked lease lost as misses.

Run by tests/engines/test_lmcache.py in the LMCache venv (these files import lmcache)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import select
import time

import pytest
import torch
from engine_daemon import held, nothing_left_behind, revoke
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.internal_api import L2AdapterListener
from lmcache.v1.distributed.l2_adapters.config import (
    add_l2_adapters_args,
    parse_args_to_l2_adapters_config,
)
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
from lmcache.v1.platform import consume_fd
from poold_env import LEASE, MiB, adapter, params

from poold.integrations.lmcache import PooldL2Adapter

WAIT_S = 30.0  # generous: the machine may be loaded; every wait ends on its event


def key(i: int, salt: str = "") -> ObjectKey:
    return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name="tiny", kv_rank=0,
                     cache_salt=salt)


def chunk(nbytes: int, seed: int) -> TensorMemoryObj:
    data = torch.randint(0, 256, (nbytes,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))
    meta = MemoryObjMetadata(shape=torch.Size([nbytes]), dtype=torch.uint8, address=0,
                             phy_size=nbytes, fmt=MemoryFormat.KV_2LTD, ref_count=1)
    return TensorMemoryObj(data, meta, parent_allocator=None)


def empty(nbytes: int) -> TensorMemoryObj:
    obj = chunk(nbytes, 0)
    assert obj.tensor is not None
    obj.tensor.zero_()
    return obj


def wait(fd: int) -> None:
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    assert poll.poll(WAIT_S * 1000), "the adapter did not signal its event fd"
    consume_fd(fd)


def store(a: PooldL2Adapter, keys: list[ObjectKey], objs: list[TensorMemoryObj]) -> int:
    task = a.submit_store_task(keys, objs)
    done: dict[int, object] = {}
    while task not in done:
        wait(a.get_store_event_fd())
        done.update(a.pop_completed_store_tasks())
    result = done[task]
    assert result.is_successful()  # type: ignore[attr-defined]
    return int(result.bytes_transferred())  # type: ignore[attr-defined]


def lookup(a: PooldL2Adapter, keys: list[ObjectKey]) -> list[bool]:
    task = a.submit_lookup_and_lock_task(keys, {})
    while (bitmap := a.query_lookup_and_lock_result(task)) is None:
        wait(a.get_lookup_and_lock_event_fd())
    return [bitmap.test(i) for i in range(len(keys))]


def load(a: PooldL2Adapter, keys: list[ObjectKey], outs: list[TensorMemoryObj]) -> list[bool]:
    task = a.submit_load_task(keys, outs)
    while (bitmap := a.query_load_result(task)) is None:
        wait(a.get_load_event_fd())
    return [bitmap.test(i) for i in range(len(keys))]


class Deletions(L2AdapterListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.deleted: list[ObjectKey] = []

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        pass

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        pass

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        self.deleted += keys


__all__ = ["nothing_left_behind"]  # autouse, from engine_daemon


def test_lmcache_builds_the_adapter_from_the_operators_flag() -> None:
    spec = {"type": "plugin", "module_path": "poold.integrations.lmcache",
            "class_name": "PooldL2Adapter", "adapter_params": params()}
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    config = parse_args_to_l2_adapters_config(
        parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    made = create_l2_adapter_from_registry(config.adapters[0])
    try:
        assert isinstance(made, PooldL2Adapter)
        objs = [chunk(100_000, 1), chunk(3, 2)]  # several blocks, and less than one
        assert store(made, [key(1), key(2)], objs) == 100_003
        outs = [empty(100_000), empty(3)]
        assert load(made, [key(1), key(2), key(3)], [*outs, empty(3)]) == [True, True, False]
        assert all(torch.equal(o.tensor, i.tensor) for o, i in zip(outs, objs, strict=True))
        assert made.report_status()["leases"] == 1
    finally:
        made.close()


def test_a_bad_parameter_is_refused_by_name() -> None:
    spec = {"type": "plugin", "module_path": "poold.integrations.lmcache",
            "class_name": "PooldL2Adapter", "adapter_params": {**params(), "budget": 1}}
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    args = parser.parse_args(["--l2-adapter", json.dumps(spec)])
    config = parse_args_to_l2_adapters_config(args)
    with pytest.raises(ValueError, match="budget"):
        create_l2_adapter_from_registry(config.adapters[0])


def test_two_tenants_storing_one_key_each_get_their_own_bytes_back() -> None:
    a, b = adapter(4 * MiB, tenant="a"), adapter(4 * MiB, tenant="b")
    try:
        mine, theirs = chunk(50_000, 10), chunk(50_000, 20)
        store(a, [key(7)], [mine])
        store(b, [key(7)], [theirs])
        got_a, got_b = empty(50_000), empty(50_000)
        assert load(a, [key(7)], [got_a]) == [True]
        assert load(b, [key(7)], [got_b]) == [True]
        assert torch.equal(got_a.tensor, mine.tensor)
        assert torch.equal(got_b.tensor, theirs.tensor)
        assert set(held("a")).isdisjoint(held("b"))
    finally:
        a.close()
        b.close()


def fill_then_give_back(commands: multiprocessing.Queue, answers: multiprocessing.Queue,
                        env: dict[str, str]) -> None:
    """Engine process A: takes the whole pool, then, when told, drops its chunks and lets its
    leases go idle, which gives them back."""
    os.environ.update(env)
    a = adapter(64 * MiB, tenant="a")
    try:
        keys = [key(i) for i in range(32)]
        answers.put(store(a, keys, [chunk(LEASE, i) for i in range(32)]))
        assert commands.get(timeout=WAIT_S) == "give back"
        a.delete(keys)
        deadline = time.monotonic() + WAIT_S
        while a.report_status()["leases"] and time.monotonic() < deadline:
            time.sleep(0.1)  # the store releases an idle lease after idle_release_s (0.5 s)
        answers.put(a.report_status()["leases"])
    finally:
        a.close()


def test_capacity_one_engine_gives_back_is_leased_by_another() -> None:
    ctx = multiprocessing.get_context("spawn")
    commands, answers = ctx.Queue(), ctx.Queue()
    env = {k: v for k, v in os.environ.items() if k.startswith("POOLD_ENGINE_")}
    engine_a = ctx.Process(target=fill_then_give_back, args=(commands, answers, env))
    engine_a.start()
    b = adapter(16 * MiB, tenant="b")
    try:
        assert answers.get(timeout=WAIT_S * 4) == 64 * MiB  # A holds the whole device
        assert store(b, [key(100)], [chunk(LEASE, 100)]) == 0  # refused: nothing free
        assert lookup(b, [key(100)]) == [False]
        commands.put("give back")
        assert answers.get(timeout=WAIT_S * 2) == 0
        # B's store succeeds once the freed extents are scrubbed and its growth back-off
        # (a second after the refusal) has passed
        deadline = time.monotonic() + WAIT_S
        while store(b, [key(100)], [chunk(LEASE, 100)]) != LEASE:
            assert time.monotonic() < deadline, "B never got the capacity A gave back"
            time.sleep(0.1)
        out = empty(LEASE)
        assert load(b, [key(100)], [out]) == [True]
        assert torch.equal(out.tensor, chunk(LEASE, 100).tensor)
    finally:
        b.close()
        engine_a.join(WAIT_S)
        if engine_a.is_alive():
            engine_a.kill()
    assert engine_a.exitcode == 0


def test_a_revoked_lease_is_lost_chunks_never_the_next_holders_bytes() -> None:
    a = adapter(2 * MiB, tenant="a")
    listener = Deletions()
    a.register_listener(listener)
    b = adapter(64 * MiB, tenant="b")
    try:
        store(a, [key(1), key(2)], [chunk(500_000, 1), chunk(500_000, 2)])
        (lease_id,) = held("a")
        revoke(lease_id)
        # B takes every byte there is, the revoked extent among them, and fills it
        stored = store(b, [key(i, "b") for i in range(32)],
                       [chunk(LEASE, 1000 + i) for i in range(32)])
        assert stored > 0
        deadline = time.monotonic() + WAIT_S
        while a.report_status()["leases_lost"] == 0:  # the keepalive thread hears of it
            assert time.monotonic() < deadline, "the adapter never saw its lease revoked"
            time.sleep(0.05)
        assert lookup(a, [key(1), key(2)]) == [False, False]
        outs = [empty(500_000), empty(500_000)]
        assert load(a, [key(1), key(2)], outs) == [False, False]
        assert all(int(o.tensor.count_nonzero()) == 0 for o in outs)  # nothing written
        assert {k.chunk_hash for k in listener.deleted} == {key(1).chunk_hash,
                                                           key(2).chunk_hash}
        assert a.get_usage().total_bytes_used == 0
    finally:
        a.close()
        b.close()
