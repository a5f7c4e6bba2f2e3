"""The scrubber's two kinds of pass: after ends that need no scrub it drops their memfds and
reads nothing from the ledger (the API's GIL under churn); everything else, at start, when
nothing woke it, and at least every `full_every_s` whatever the churn, is a full pass."""

from __future__ import annotations

import errno
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from api.metrics import Metrics
from poold.daemon.fdstore import NoStore
from poold.daemon.leasemem import LeaseMemory
from poold.daemon.nodemem import NodeAllocator
from poold.daemon.scrub import Scrubber
from poold.ledger import leases, pools, reads, registry
from poold.ledger import queries as q
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView
from poold.types import LeaseState, MiB
from tests.conftest import LedgerFactory, emulated_spec


class Reads:
    """Counts the scrubber's reads of the ledger (the seam: the real ledger answers them)."""

    def __init__(self, ledger: Ledger) -> None:
        self.count = 0
        self._read = ledger.read

    def __call__(self, query: Callable[..., Any]) -> Any:
        self.count += 1
        return self._read(query)


class Setup:
    def __init__(self, ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
                 full_every_s: float = 5.0) -> None:
        self.ledger = ledger
        self.now = 0.0
        self.memory = LeaseMemory(NoStore(), NodeAllocator(Path("/nonexistent")),
                                  huge_pages=False)
        self.reads = Reads(ledger)
        monkeypatch.setattr(ledger, "read", self.reads)
        self.scrubber = Scrubber(ledger, Metrics(), self.memory, full_every_s=full_every_s,
                                 clock=lambda: self.now)
        ledger.writer.on_leases_ended = self.scrubber.note_ended

    def grant(self) -> LeaseView:
        request = GrantRequest(size=4 * MiB, actor="test", ttl_s=60)
        lease = self.ledger.run(partial(leases.grant, request=request))
        self.memory.create(lease.id, lease.length)
        return lease

    def release(self, lease: LeaseView) -> LeaseState:
        return self.ledger.run(partial(leases.release, lease_id=lease.id, actor="test")).state


@pytest.fixture
def unscrubbed(make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> Setup:
    return Setup(make_ledger([emulated_spec(64 * MiB)]), monkeypatch)


def test_a_pass_after_ends_without_scrub_drops_their_memfds_and_reads_nothing(
    unscrubbed: Setup,
) -> None:
    s = unscrubbed
    kept, ended = s.grant(), s.grant()
    assert s.scrubber.run_once() == 0  # the first pass is a full one
    full = s.reads.count
    assert full > 0 and s.memory.holds(kept.id) and s.memory.holds(ended.id)
    assert s.release(ended) is LeaseState.RELEASED
    s.now += 1.0
    assert s.scrubber.run_once() == 0
    assert s.reads.count == full
    assert not s.memory.holds(ended.id)
    assert s.memory.holds(kept.id)


def test_with_nothing_told_a_pass_is_a_full_one(unscrubbed: Setup) -> None:
    """A pass nobody woke (the reaper interval's): it sweeps what another daemon ended."""
    s = unscrubbed
    lease = s.grant()
    s.scrubber.run_once()
    s.ledger.writer.on_leases_ended = None  # ended elsewhere: nobody tells this scrubber
    s.release(lease)
    s.now += 1.0
    before = s.reads.count
    s.scrubber.run_once()
    assert s.reads.count > before
    assert not s.memory.holds(lease.id)


def test_a_full_pass_comes_every_full_every_s_whatever_the_churn(unscrubbed: Setup) -> None:
    s = unscrubbed
    silent, churn = s.grant(), [s.grant() for _ in range(4)]
    s.scrubber.run_once()
    s.ledger.writer.on_leases_ended = None
    s.release(silent)  # another daemon's end: only a full pass finds it
    s.ledger.writer.on_leases_ended = s.scrubber.note_ended
    for i, lease in enumerate(churn[:2]):
        s.release(lease)
        s.now = 2.0 * (i + 1)  # 2 s, 4 s: within 5 s of the full pass at 0
        s.scrubber.run_once()
        assert s.memory.holds(silent.id), f"pass {i} was a full one"
    s.release(churn[2])
    s.now = 5.0
    s.scrubber.run_once()
    assert not s.memory.holds(silent.id)
    assert not any(s.memory.holds(x.id) for x in churn[:3])
    assert s.memory.holds(churn[3].id)


def test_the_first_pass_is_a_full_one_whatever_it_was_told(unscrubbed: Setup) -> None:
    """What ended before the daemon started (its memfds recovered) is found at start."""
    s = unscrubbed
    before_start, told = s.grant(), s.grant()
    s.ledger.writer.on_leases_ended = None
    s.release(before_start)
    s.ledger.writer.on_leases_ended = s.scrubber.note_ended
    s.release(told)
    s.scrubber.run_once()
    assert not s.memory.holds(before_start.id) and not s.memory.holds(told.id)


def test_an_end_that_waits_for_its_scrub_gets_a_full_pass(
    make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Setup(make_ledger([emulated_spec(64 * MiB)], scrub=True), monkeypatch)
    lease = s.grant()
    s.scrubber.run_once()
    assert s.release(lease) is LeaseState.SCRUBBING
    s.now += 1.0
    assert s.scrubber.run_once() == 1
    assert s.ledger.read(lambda session, now: reads.lease(session, lease.id, now)).state \
        is LeaseState.RELEASED
    assert not s.memory.holds(lease.id)


def _cold_pool_beside(tx: Tx) -> None:
    """A second pool, `cold`, that does not scrub, on a device of its own (emu1)."""
    cold, _ = pools.seed(tx, pools.PoolPolicy(name="cold", claim_slice=0, default_ttl_s=60,
                                              max_ttl_s=3600, scrub_on_release=False))
    default = q.pools.get_pool_by_name(tx.session, "default")
    assert default is not None
    registry.reconcile_devices(tx, [emulated_spec(64 * MiB), emulated_spec(64 * MiB, "emu1")],
                               lambda spec: cold if spec.devname == "emu1" else default)


def test_a_scrub_left_unfinished_is_tried_again_by_the_next_pass(
    make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full pass that could not finish a scrub (its memory refused to go) makes the next pass
    a full one too, even when that pass is told only of ends that need no scrub."""
    s = Setup(make_ledger([emulated_spec(64 * MiB)], scrub=True), monkeypatch)
    s.ledger.run(_cold_pool_beside)
    s.scrubber.run_once()
    scrubbed = s.grant()
    assert s.release(scrubbed) is LeaseState.SCRUBBING
    drop = s.memory.drop
    failing = [scrubbed.id]

    def refuses_once(lease_id: str) -> bool:
        if lease_id in failing:
            failing.remove(lease_id)
            raise OSError(errno.EIO, "the device refused")
        return drop(lease_id)

    monkeypatch.setattr(s.memory, "drop", refuses_once)
    s.now += 1.0
    assert s.scrubber.run_once() == 0  # tried, failed: left for the next pass
    request = GrantRequest(size=4 * MiB, actor="test", ttl_s=60, pool="cold")
    cold = s.ledger.run(partial(leases.grant, request=request))
    s.memory.create(cold.id, cold.length)
    assert s.release(cold) is LeaseState.RELEASED
    s.now += 1.0
    assert s.scrubber.run_once() == 1
    assert s.ledger.read(lambda session, now: reads.lease(session, scrubbed.id, now)).state \
        is LeaseState.RELEASED
    assert not s.memory.holds(cold.id) and not s.memory.holds(scrubbed.id)
