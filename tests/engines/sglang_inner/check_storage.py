"""poold as SGLang 0.5.23's HiCache storage, on a real daemon: built by SGLang's own storage
backend factory from the `dynamic` extra config an operator writes; pages round-tripped through
the tensor calls and, zero-copy, between the host pool's page buffers (K and V a page) and
poold; batch_exists counting a prefix; two tensor-parallel ranks' shards of one page kept apart,
and two tenants' pages under one key; a revoked lease lost as misses; a wrong parameter refused.

The host KV pool is the one seam faked: SGLang's MHA host pool is built from a device pool's
pointer tables, which need a GPU. The stand-in lays pages out as SGLang's page_first layout does
(a K and a V buffer a page) and answers get_page_buffer_meta as SGLang's pools do.
Run by tests/engines/test_sglang.py in SGLang's venv (these files import sglang)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from engine_daemon import fd_socket, held, nothing_left_behind, revoke, token, uds
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

from poold.integrations.sglang import PooldHiCacheStorage

PAGE_TOKENS = 16
BUFFER = 16 * 1024  # one page's K (or V) bytes
WAIT_S = 30.0


def extra(tenant: str = "a", **overrides: Any) -> dict[str, Any]:
    """--hicache-storage-backend-extra-config, as an operator writes it."""
    return {"backend_name": "poold", "module_path": "poold.integrations.sglang",
            "class_name": "PooldHiCacheStorage", "interface_v1": 1,
            "uds": uds(), "fd_socket": fd_socket(),
            "token": token(tenant), "budget_bytes": 8 << 20, "lease_bytes": 2 << 20,
            "block_bytes": BUFFER, "idle_release_s": 0.5, **overrides}


def config(tenant: str = "a", tp_rank: int = 0, tp_size: int = 1,
           **overrides: Any) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
        is_page_first_layout=True, model_name="tiny/model", extra_config=extra(tenant,
                                                                              **overrides))


class HostPool:
    """pages x (K, V) buffers of BUFFER bytes, page_first: what get_page_buffer_meta tells."""

    def __init__(self, pages: int) -> None:
        self.page_size = PAGE_TOKENS
        self.buffer = torch.zeros((pages, 2, BUFFER), dtype=torch.uint8)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        assert len(indices) % self.page_size == 0
        pointers = []
        for first in indices.tolist()[::self.page_size]:
            page = first // self.page_size
            pointers += [self.buffer[page, 0].data_ptr(), self.buffer[page, 1].data_ptr()]
        return pointers, [BUFFER] * len(pointers)

    def fill(self, page: int, seed: int) -> bytes:
        data = torch.randint(0, 256, (2, BUFFER), dtype=torch.uint8,
                             generator=torch.Generator().manual_seed(seed))
        self.buffer[page] = data
        return bytes(data.numpy())

    def page(self, page: int) -> bytes:
        return bytes(self.buffer[page].numpy())


def indices(pages: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(p * PAGE_TOKENS, (p + 1) * PAGE_TOKENS) for p in pages])


def backend(host: HostPool | None = None, **kw: Any) -> PooldHiCacheStorage:
    made = StorageBackendFactory.create_backend("dynamic", config(**kw), host)
    assert isinstance(made, PooldHiCacheStorage)
    if host is not None:
        made.register_mem_pool_host(host)
    return made


__all__ = ["nothing_left_behind"]  # autouse, from engine_daemon


def test_sglangs_factory_builds_it_and_pages_round_trip_through_the_tensor_calls() -> None:
    store = backend()
    try:
        pages = [torch.randint(0, 2**15, (BUFFER // 2,), dtype=torch.int16,
                               generator=torch.Generator().manual_seed(i)) for i in range(3)]
        assert store.batch_set(["p0", "p1", "p2"], pages)
        out = [torch.zeros_like(p) for p in pages]
        got = store.batch_get(["p0", "p1", "p2"], out)
        assert all(g is o for g, o in zip(got, out, strict=True))
        assert all(torch.equal(o, p) for o, p in zip(out, pages, strict=True))
        assert store.get("absent", torch.zeros_like(pages[0])) is None
        assert store.batch_exists(["p0", "p1", "absent", "p2"]) == 2  # a prefix
        assert store.exists("p2") and not store.exists("absent")
        store.clear()
        assert store.batch_exists(["p0"]) == 0
    finally:
        store.close()


def test_pages_move_zero_copy_between_the_host_pool_and_poold() -> None:
    host = HostPool(pages=8)
    store = backend(host)
    try:
        written = [host.fill(p, seed=p) for p in range(4)]
        keys = [f"page-{p}" for p in range(4)]
        assert store.batch_set_v1(keys, indices([0, 1, 2, 3])) == [True] * 4
        assert store.batch_exists(keys) == 4
        assert store.batch_get_v1([*keys[:2], "absent"], indices([4, 5, 6])) == [
            True, True, False]
        assert [host.page(4), host.page(5)] == written[:2]
        assert host.page(6) == bytes(2 * BUFFER)  # a miss writes nothing
    finally:
        store.close()


def test_a_sessions_pages_are_evicted_last_across_its_gaps() -> None:
    """A request whose extra_info names its session (poold_session) holds the pages it stored:
    a flood of other pages three times the budget evicts everything else first, and the
    session's pages come back byte for byte."""
    host = HostPool(pages=68)
    store = backend(host)
    conversation = HiCacheStorageExtraInfo(extra_info={"poold_session": "conversation-7"})
    slots = list(range(4, 68))
    try:
        written = [host.fill(p, seed=70 + p) for p in range(4)]
        kept = [f"kept-{p}" for p in range(4)]
        assert store.batch_set_v1(kept, indices([0, 1, 2, 3]), conversation) == [True] * 4
        for batch in range(12):  # 12 x 64 pages of 32 KiB: 24 MiB through an 8 MiB budget
            for p in slots:
                host.fill(p, seed=1000 * batch + p)
            flood = [f"flood-{batch}-{p}" for p in slots]
            assert store.batch_set_v1(flood, indices(slots)) == [True] * len(slots)
        assert store.batch_exists(["flood-0-4"]) == 0  # the flood did evict
        assert store.batch_exists(kept, conversation) == 4
        assert store.batch_get_v1(kept, indices([4, 5, 6, 7])) == [True] * 4
        assert [host.page(p) for p in (4, 5, 6, 7)] == written
    finally:
        store.close()


def test_two_ranks_shards_and_two_tenants_pages_under_one_key_stay_apart() -> None:
    stores = {(tenant, rank): backend(HostPool(pages=2), tenant=tenant, tp_rank=rank,
                                      tp_size=2) for tenant in ("a", "b") for rank in (0, 1)}
    try:
        written = {}
        for i, (who, store) in enumerate(stores.items()):
            written[who] = store.mem_pool_host.fill(0, seed=100 + i)
            assert store.batch_set_v1(["shared-key"], indices([0])) == [True]
        for who, store in stores.items():
            assert store.batch_get_v1(["shared-key"], indices([1])) == [True]
            assert store.mem_pool_host.page(1) == written[who]
        assert set(held("a")).isdisjoint(held("b"))
    finally:
        for store in stores.values():
            store.close()


def test_a_revoked_lease_is_lost_pages() -> None:
    host = HostPool(pages=2)
    store = backend(host)
    try:
        host.fill(0, seed=1)
        assert store.batch_set_v1(["k"], indices([0])) == [True]
        (lease_id,) = held("a")
        revoke(lease_id)
        deadline = time.monotonic() + WAIT_S
        while store.batch_exists(["k"]):  # until the keepalive thread hears of it
            assert time.monotonic() < deadline, "the store never saw its lease revoked"
            time.sleep(0.05)
        assert store.batch_get_v1(["k"], indices([1])) == [False]
        assert host.page(1) == bytes(2 * BUFFER)
    finally:
        store.close()


def test_an_unknown_parameter_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="budget"):
        StorageBackendFactory.create_backend("dynamic", config(budget=1), None)
