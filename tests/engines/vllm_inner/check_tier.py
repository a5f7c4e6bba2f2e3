"""poold as a secondary tier inside vLLM 0.33.0's tiered KV offloading, on a real daemon:
built by vLLM's SecondaryTierFactory from the `secondary_tiers` entry an operator writes, driven
by vLLM's own TieringOffloadingManager over its CPU primary tier (chunks stored to the CPU tier
cascade to poold; evicted there, they are promoted back from poold byte for byte), two tenants'
rows under one key kept apart, a revoked lease lost as failed loads, never foreign bytes.

The CPU tier's shared-memory region is the one seam faked, as vLLM's own tiering tests fake it
(a MagicMock handing out a memoryview of rows): on this machine nothing maps it from a GPU.
Run by tests/engines/test_vllm.py in the vLLM venv (these files import vllm)."""

from __future__ import annotations

import time
from unittest.mock import MagicMock

import numpy as np
import pytest
import torch
from engine_daemon import fd_socket, held, nothing_left_behind, revoke, token, uds
from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadKey,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.tiering.base import TransferJob
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
from vllm.v1.kv_offload.tiering.manager import (
    CPUPrimaryTierOffloadingManager,
    TieringOffloadingManager,
)

from poold.integrations.vllm import PooldSecondaryTier

ROW = 64 * 1024  # one offload chunk of the CPU tier
WAIT_S = 30.0
CTX = ReqContext(req_id="check")


def tier_entry(tenant: str = "a", **overrides: object) -> dict[str, object]:
    """One `secondary_tiers` entry, as an operator writes it in kv_connector_extra_config."""
    return {"type": "PooldSecondaryTier", "module_path": "poold.integrations.vllm",
            "uds": uds(), "fd_socket": fd_socket(),
            "token": token(tenant), "budget_bytes": 8 << 20, "lease_bytes": 2 << 20,
            "idle_release_s": 0.5, **overrides}


def rows(count: int) -> memoryview:
    return memoryview(torch.zeros((count, ROW), dtype=torch.int8).numpy())


def region(view: memoryview) -> MagicMock:
    mock = MagicMock()
    mock.create_kv_memoryview.return_value = view
    return mock


def keys(ids: range) -> list[OffloadKey]:
    return [make_offload_key(f"block-{i}".encode(), 0) for i in ids]


def fill(view: memoryview, chunk_ids: np.ndarray, seed: int) -> list[bytes]:
    flat = view.cast("B")
    data = []
    for i, c in enumerate(chunk_ids):
        chunk = np.random.default_rng(seed + i).integers(0, 256, ROW, dtype=np.uint8).tobytes()
        flat[int(c) * ROW:(int(c) + 1) * ROW] = chunk
        data.append(chunk)
    return data


def read(view: memoryview, chunk_id: int) -> bytes:
    return bytes(view.cast("B")[chunk_id * ROW:(chunk_id + 1) * ROW])


__all__ = ["nothing_left_behind"]  # autouse, from engine_daemon


def make_tier(view: memoryview, tenant: str = "a") -> PooldSecondaryTier:
    made = SecondaryTierFactory.create_secondary_tier(tier_entry(tenant), view, MagicMock())
    assert isinstance(made, PooldSecondaryTier)
    return made


def job(job_id: int, ks: list[OffloadKey], chunk_ids: list[int], promotion: bool,
        ctx: ReqContext = CTX) -> TransferJob:
    return TransferJob(job_id=job_id, keys=ks, chunk_ids=np.array(chunk_ids, dtype=np.int64),
                       is_promotion=promotion, req_context=ctx)


def finished(tier: PooldSecondaryTier) -> dict[int, object]:
    tier.drain_jobs()
    return {r.job_id: r for r in tier.get_finished_jobs()}


def step(manager: TieringOffloadingManager) -> None:
    manager.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
    list(manager.take_events())


def settle(manager: TieringOffloadingManager, tier: PooldSecondaryTier, until: object,
           what: str) -> None:
    """Step the scheduler until `until()` holds (the tier's worker copies meanwhile)."""
    deadline = time.monotonic() + WAIT_S
    while not until():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never within {WAIT_S} s: {what}"
        tier.drain_jobs()
        step(manager)


def test_vllm_cascades_to_poold_and_promotes_evicted_chunks_back_byte_for_byte() -> None:
    view = rows(4)
    primary = CPUPrimaryTierOffloadingManager(num_chunks=4, mmap_region=region(view))
    tier = make_tier(view)
    manager = TieringOffloadingManager(primary_tier=primary, secondary_tiers=[tier])
    try:
        manager.on_new_request(CTX)
        first = keys(range(4))
        out = manager.prepare_store(first, CTX)
        assert out is not None and len(out.keys_to_store) == 4
        written = dict(zip(first, fill(view, out.store_spec.chunk_ids, seed=1), strict=True))
        manager.complete_store(first, CTX, success=True)  # cascades to poold
        settle(manager, tier, lambda: all(tier.lookup(k, CTX) is LookupResult.HIT
                                          for k in first), "the chunks reached poold")
        step(manager)
        step(manager)  # the cascade's completion releases the primary rows
        second = keys(range(4, 8))  # the CPU tier holds 4 rows: these evict the first four
        out = manager.prepare_store(second, CTX)
        assert out is not None and sorted(out.evicted_keys) == sorted(first)
        fill(view, out.store_spec.chunk_ids, seed=100)
        manager.complete_store(second, CTX, success=True)
        settle(manager, tier, lambda: all(tier.lookup(k, CTX) is LookupResult.HIT
                                          for k in second), "the second chunks reached poold")
        step(manager)
        step(manager)
        wanted = first[:2]
        settle(manager, tier, lambda: all(manager.lookup(k, CTX) is LookupResult.HIT
                                          for k in wanted), "promotion from poold")
        spec = manager.prepare_load(wanted, CTX)
        for k, c in zip(wanted, spec.chunk_ids, strict=True):
            assert read(view, int(c)) == written[k]
        assert tier.objects.kv.stats().leases >= 1
    finally:
        manager.on_request_finished(CTX)
        tier.shutdown()


def test_a_sessions_chunks_are_evicted_last_across_its_gaps() -> None:
    """An agent's conversation names its session in kv_transfer_params: what its requests
    stored is held, so a flood of other requests' chunks, far past the tier's budget, evicts
    everything else first; its chunks come back byte for byte."""
    view = rows(16)
    tier = SecondaryTierFactory.create_secondary_tier(
        tier_entry(budget_bytes=4 << 20), view, MagicMock())  # 64 rows' worth
    conversation = ReqContext(req_id="turn-1",
                              kv_transfer_params={"poold_session": "conversation-7"})
    try:
        kept = keys(range(1000, 1008))
        written = fill(view, np.arange(8), seed=7)
        tier.submit_store(job(1, kept, list(range(8)), False, conversation))
        plain = keys(range(2000, 2008))
        tier.submit_store(job(2, plain, list(range(8, 16)), False))
        for batch in range(20):  # 160 more rows, none of a session
            tier.submit_store(job(10 + batch, keys(range(3000 + 8 * batch, 3008 + 8 * batch)),
                                  list(range(8, 16)), False))
        assert all(r.success for r in finished(tier).values() if r.job_id < 10)
        assert all(tier.lookup(k, CTX) is LookupResult.HIT for k in kept)
        assert all(tier.lookup(k, CTX) is LookupResult.MISS for k in plain)  # evicted first
        view.cast("B")[:] = bytes(len(view.cast("B")))
        tier.submit_load(job(99, kept, list(range(8)), True, conversation))
        assert finished(tier)[99].success
        assert [read(view, c) for c in range(8)] == written
    finally:
        tier.shutdown()


def test_two_tenants_rows_under_one_key_stay_their_own() -> None:
    view_a, view_b = rows(2), rows(2)
    a, b = make_tier(view_a, "a"), make_tier(view_b, "b")
    try:
        (k,) = keys(range(1))
        mine = fill(view_a, np.array([0]), seed=7)[0]
        theirs = fill(view_b, np.array([0]), seed=8)[0]
        a.submit_store(job(1, [k], [0], promotion=False))
        b.submit_store(job(1, [k], [0], promotion=False))
        assert finished(a)[1].success and finished(b)[1].success  # type: ignore[attr-defined]
        a.submit_load(job(2, [k], [1], promotion=True))
        b.submit_load(job(2, [k], [1], promotion=True))
        assert finished(a)[2].success and finished(b)[2].success  # type: ignore[attr-defined]
        assert read(view_a, 1) == mine and read(view_b, 1) == theirs
        assert set(held("a")).isdisjoint(held("b"))
    finally:
        a.shutdown()
        b.shutdown()


def test_a_missing_key_fails_its_load_naming_the_keys_that_did_load() -> None:
    view = rows(4)
    tier = make_tier(view)
    try:
        ks = keys(range(3))
        fill(view, np.array([0, 1]), seed=3)
        tier.submit_store(job(1, ks[:2], [0, 1], promotion=False))
        assert finished(tier)[1].success  # type: ignore[attr-defined]
        assert tier.lookup(ks[2], CTX) is LookupResult.MISS
        tier.submit_load(job(2, ks, [1, 2, 3], promotion=True))
        result = finished(tier)[2]
        assert not result.success  # type: ignore[attr-defined]
        assert set(result.successful_keys) == set(ks[:2])  # type: ignore[attr-defined]
    finally:
        tier.shutdown()


def test_a_revoked_lease_fails_the_loads_and_never_writes_the_rows() -> None:
    view = rows(3)
    tier = make_tier(view)
    try:
        ks = keys(range(2))
        fill(view, np.array([0, 1]), seed=5)
        tier.submit_store(job(1, ks, [0, 1], promotion=False))
        assert finished(tier)[1].success  # type: ignore[attr-defined]
        (lease_id,) = held("a")
        revoke(lease_id)
        deadline = time.monotonic() + WAIT_S
        while tier.lookup(ks[0], CTX) is LookupResult.HIT:  # the keepalive thread hears of it
            assert time.monotonic() < deadline, "the tier never saw its lease revoked"
            time.sleep(0.05)
        view.cast("B")[2 * ROW:3 * ROW] = bytes(ROW)
        tier.submit_load(job(2, ks[:1], [2], promotion=True))
        result = finished(tier)[2]
        assert not result.success and list(result.successful_keys) == []  # type: ignore
        assert read(view, 2) == bytes(ROW)
    finally:
        tier.shutdown()


def test_an_unknown_parameter_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="budget"):
        SecondaryTierFactory.create_secondary_tier(
            {**tier_entry(), "budget": 1}, rows(1), MagicMock())
