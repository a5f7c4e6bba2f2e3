"""poold's in-process storage plugin inside LMCache 0.5.6's StorageManager (what LMCacheEngine
stores through), on a real daemon: loaded from the documented config, chunks stored beside the
local CPU backend and read back from poold byte for byte once the CPU copies are gone, a wrong
parameter refused by name, a chunk lost with its lease a miss.

Run by tests/engines/test_lmcache.py in the LMCache venv."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch
from engine_daemon import fd_socket, held, revoke, token, uds
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager
from poold_env import MiB

from poold.integrations.lmcache import PooldBackend

SHAPE = torch.Size([2, 4, 256, 64])  # (K/V, layers, tokens, hidden): 512 KiB of bfloat16
WAIT_S = 30.0


def config(tenant: str = "a", **poold: object) -> LMCacheEngineConfig:
    made = LMCacheEngineConfig.from_defaults(chunk_size=256, local_cpu=True,
                                             max_local_cpu_size=0.05,
                                             lmcache_instance_id=f"poold-check-{tenant}")
    made.storage_plugins = ["poold"]
    made.extra_config = {
        "storage_plugin.poold.module_path": "poold.integrations.lmcache",
        "storage_plugin.poold.class_name": "PooldBackend",
        "poold.uds": uds(), "poold.fd_socket": fd_socket(),
        "poold.token": token(tenant), "poold.budget_bytes": 8 * MiB,
        "poold.lease_bytes": 2 * MiB, "poold.block_bytes": 64 * 1024,
        **{f"poold.{k}": v for k, v in poold.items()},
    }
    return made


def metadata() -> LMCacheMetadata:
    return LMCacheMetadata(model_name="tiny", world_size=1, local_world_size=1, worker_id=0,
                           local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(4, 2, 256, 1, 64))


def key(i: int) -> CacheEngineKey:
    return CacheEngineKey("tiny", 1, 0, i, torch.bfloat16)


@pytest.fixture
def manager() -> Iterator[StorageManager]:
    made = StorageManager(config=config(), metadata=metadata(), event_manager=EventManager())
    yield made
    made.close()
    assert held("a") == []


def plugin(manager: StorageManager) -> PooldBackend:
    backend = manager.storage_backends["poold"]
    assert isinstance(backend, PooldBackend)
    return backend


def chunks(manager: StorageManager, count: int, seed: int,
           keys: list[CacheEngineKey] | None = None) -> list[torch.Tensor]:
    """Stores `count` chunks of random bytes through LMCache (under `keys`, else key(seed *
    100 + i)); their tensors as written."""
    gen = torch.Generator().manual_seed(seed)
    written = []
    objs = []
    for _ in range(count):
        obj = manager.allocate(SHAPE, torch.bfloat16, MemoryFormat.KV_2LTD)
        assert obj is not None and obj.tensor is not None
        obj.tensor.view(torch.int16).copy_(torch.randint(-2**15, 2**15 - 1, SHAPE,
                                                         dtype=torch.int16, generator=gen))
        written.append(obj.tensor.clone())
        objs.append(obj)
    manager.batched_put(keys or [key(seed * 100 + i) for i in range(count)], objs)
    return written


def landed(backend: PooldBackend, keys: list[CacheEngineKey]) -> None:
    """Wait until the plugin holds every key (LMCache's CPU backend copies to it async)."""
    deadline = time.monotonic() + WAIT_S
    while backend.batched_contains(keys) < len(keys):
        assert time.monotonic() < deadline, "the plugin never held the chunks"
        time.sleep(0.02)


def test_lmcache_loads_the_plugin_and_reads_chunks_back_from_poold(
        manager: StorageManager) -> None:
    written = chunks(manager, 6, seed=1)
    backend = plugin(manager)
    keys = [key(100 + i) for i in range(6)]
    deadline = time.monotonic() + WAIT_S
    while backend.batched_contains(keys) < len(keys):  # the CPU backend's copy is async
        assert time.monotonic() < deadline, "the plugin never held the chunks"
        time.sleep(0.02)
    manager.clear(locations=["LocalCPUBackend"])  # only poold holds them now
    for k, expected in zip(keys, written, strict=True):
        got = manager.get(k)
        assert got is not None, f"{k} missing"
        assert got.get_shapes() == [SHAPE] and got.get_dtypes() == [torch.bfloat16]
        assert torch.equal(got.tensor.view(torch.int16), expected.view(torch.int16))
        got.ref_count_down()
    assert backend.batched_contains([keys[0], key(999), keys[1]]) == 1  # a prefix


def test_chunks_of_two_layouts_come_back_each_as_it_was_stored(manager: StorageManager) -> None:
    """A request's last chunk holds fewer tokens: stored between full chunks, one call each and
    in one batch, every chunk comes back with its own shape and bytes (chunks laid out alike
    share what the plugin keeps of their layout; a different one must not)."""
    backend = plugin(manager)
    cpu = backend.local_cpu_backend
    short = torch.Size([2, 4, 96, 64])
    gen = torch.Generator().manual_seed(11)
    shapes = [SHAPE, short, SHAPE, short, short, SHAPE]
    objs = []
    for shape in shapes:
        obj = cpu.allocate(shape, torch.bfloat16, MemoryFormat.KV_2LTD)
        assert obj is not None and obj.tensor is not None
        obj.tensor.view(torch.int16).copy_(torch.randint(-2**15, 2**15 - 1, shape,
                                                         dtype=torch.int16, generator=gen))
        objs.append(obj)
    one_by_one = [key(1100 + i) for i in range(3)]
    for k, obj in zip(one_by_one, objs[:3], strict=True):
        backend.batched_submit_put_task([k], [obj])
    batched = [key(1103 + i) for i in range(3)]
    backend.batched_submit_put_task(batched, objs[3:])
    keys = one_by_one + batched
    singly = [backend.get_blocking(k) for k in keys]
    together = backend.batched_get_blocking(keys)
    for got in (singly, together):
        for obj, shape, expected in zip(got, shapes, objs, strict=True):
            assert obj is not None and obj.get_shapes() == [shape]
            assert torch.equal(obj.tensor.view(torch.int16), expected.tensor.view(torch.int16))
            obj.ref_count_down()
    for obj in objs:
        obj.ref_count_down()


def test_a_sessions_chunks_are_evicted_last_across_its_gaps(manager: StorageManager) -> None:
    """A request tagged with its session (lmcache.tag.poold_session) holds what it stored: a
    flood of untagged chunks three times the plugin's budget evicts everything else first, and
    the session's chunks read back byte for byte from poold."""
    backend = plugin(manager)
    tagged = {"lmcache.tag.poold_session": "conversation-7"}
    kept = [CacheEngineKey("tiny", 1, 0, 700 + i, torch.bfloat16, request_configs=tagged)
            for i in range(4)]
    written = chunks(manager, 4, seed=7, keys=kept)
    landed(backend, kept)
    for batch in range(12):  # 48 chunks of 512 KiB: 24 MiB through an 8 MiB budget
        flood = [key(800 + 4 * batch + i) for i in range(4)]
        chunks(manager, 4, seed=8 + batch, keys=flood)
        landed(backend, flood)
    assert not backend.contains(key(800))  # the flood did evict
    assert backend.batched_contains(kept) == 4
    manager.clear(locations=["LocalCPUBackend"])
    for k, expected in zip(kept, written, strict=True):
        got = manager.get(k)
        assert got is not None, f"{k} missing"
        assert torch.equal(got.tensor.view(torch.int16), expected.view(torch.int16))
        got.ref_count_down()


def test_clear_drops_every_chunk_but_the_pinned_ones(manager: StorageManager) -> None:
    """LMCacheEngine.clear reaches the plugin (StorageManager.clear): its chunks are misses
    after it, counted in tokens as LMCache's CPU backend counts them; a pinned chunk stays, as
    that backend keeps the ones it cannot evict, and reads back byte for byte."""
    backend = plugin(manager)
    keys = [key(300 + i) for i in range(4)]
    written = chunks(manager, 4, seed=3, keys=keys)
    landed(backend, keys)
    assert backend.pin(keys[0])
    assert manager.clear(locations=["poold"]) == 3 * SHAPE[2]  # 256 tokens a chunk
    assert [backend.contains(k) for k in keys] == [True, False, False, False]
    assert manager.clear(locations=["poold"]) == 0
    backend.unpin(keys[0])
    got = backend.get_blocking(keys[0])
    assert got is not None
    assert torch.equal(got.tensor.view(torch.int16), written[0].view(torch.int16))
    got.ref_count_down()


def test_remove_and_a_revoked_lease_are_misses(manager: StorageManager) -> None:
    chunks(manager, 2, seed=2)
    backend = plugin(manager)
    assert backend.remove(key(200)) and not backend.contains(key(200))
    assert not backend.remove(key(200))
    (lease_id,) = held("a")
    revoke(lease_id)
    deadline = time.monotonic() + WAIT_S
    while backend.contains(key(201)):  # until the keepalive thread hears of it
        assert time.monotonic() < deadline, "the plugin never saw its lease revoked"
        time.sleep(0.05)
    assert backend.get_blocking(key(201)) is None


def test_an_unknown_poold_parameter_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="budget"):
        PooldBackend(config=config(budget=1), metadata=metadata(),
                     local_cpu_backend=object())
