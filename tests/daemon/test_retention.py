"""Retention on both databases, with a ledger clock the test moves: under steady churn (grants,
renewals, releases, scrubs, claims given back) the ledger's row count stays bounded by what the
retention window holds, instead of growing with every operation, and fsck, the audit log and
idempotency keys keep working on what remains."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import func, select

from poold.config import Settings
from poold.daemon import Daemon
from poold.ledger import leases, reads, sessions
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.models import Claim, ClientSession, Event, Lease
from poold.types import EventKind, MiB

RETENTION_S = 3600.0
ROUND_S = 600.0  # the clock's step per round: six rounds fit in the retention window
ROUNDS = 24
PER_ROUND = 4


@pytest.fixture
def daemon(tmp_path: Path, ledger_url: str) -> Iterator[Daemon]:
    daemon = Daemon(Settings(
        state_dir=tmp_path / "state", database_url=ledger_url, host_id="prune-host",
        emulate_size=64 * MiB, discover_dax=False, watch_udev=False, runtime_dir=tmp_path,
        retention_s=RETENTION_S, claim_slice=16 * MiB, claim_idle_s=60),
        clock=ManualClock())
    yield daemon
    daemon.close()


def clock(daemon: Daemon) -> ManualClock:
    assert isinstance(daemon.ledger.clock, ManualClock)
    return daemon.ledger.clock


def rows(daemon: Daemon) -> dict[str, int]:
    def count(session: object, _now: object) -> dict[str, int]:
        return {model.__tablename__: session.scalar(select(func.count()).select_from(model))  # type: ignore[attr-defined]
                for model in (Lease, Event, Claim, ClientSession)}
    return daemon.ledger.read(count)


def churn_round(daemon: Daemon, n: int) -> None:
    """Grant, renew twice and release PER_ROUND leases (one with an idempotency key, one in a
    session that is closed instead), scrub them, and give idle claims back, as a daemon's
    clients and tick would."""
    session = daemon.ledger.run(partial(sessions.open_session, request=sessions.OpenRequest(
        actor="test", ttl_s=900, tenant="team-a")))
    ids = [daemon.ledger.run(partial(leases.grant, request=GrantRequest(
        size=2 * MiB, actor="test", ttl_s=None if i == 1 else 900, tenant="team-a",
        session_id=session.id if i == 1 else None,
        idempotency_key=f"round-{n}" if i == 0 else None))).id for i in range(PER_ROUND)]
    for _ in range(2):
        for lease_id in ids:
            daemon.ledger.run(partial(leases.keepalive, lease_id=lease_id, ttl_s=None,
                                      actor="test"))
    daemon.ledger.run(partial(sessions.close, session_id=session.id, actor="test"))
    for lease_id in ids:
        daemon.ledger.run(partial(leases.release, lease_id=lease_id, actor="test"))
    daemon.scrubber.run_once()
    clock(daemon).advance(ROUND_S / 2)
    daemon.tick()  # idle claims (claim_idle_s) go back
    clock(daemon).advance(ROUND_S / 2)
    daemon.tick()


def test_the_ledger_stays_bounded_under_steady_churn(daemon: Daemon) -> None:
    seen = []
    pruned = dict.fromkeys(("leases", "events", "claims", "sessions"), 0)
    for n in range(ROUNDS):
        churn_round(daemon, n)
        before = rows(daemon)
        daemon.prune()
        seen.append(rows(daemon))
        for table in pruned:
            pruned[table] += before[table] - seen[-1][table]
    # Written in all: PER_ROUND leases and about 5 * PER_ROUND events per round. Kept: what the
    # last RETENTION_S holds, the same at the end as halfway through.
    window = int(RETENTION_S / ROUND_S) + 1
    steady = seen[ROUNDS // 2:]
    assert max(r["leases"] for r in steady) <= PER_ROUND * window, seen
    assert max(r["events"] for r in steady) <= 8 * PER_ROUND * window
    assert max(r["claims"] for r in steady) <= 2 * window
    assert max(r["sessions"] for r in steady) <= window
    assert seen[-1]["sessions"] == seen[ROUNDS // 2]["sessions"]
    assert seen[-1]["leases"] == seen[ROUNDS // 2]["leases"]
    assert abs(seen[-1]["events"] - seen[ROUNDS // 2]["events"]) <= PER_ROUND
    assert pruned["leases"] == PER_ROUND * ROUNDS - seen[-1]["leases"]
    assert pruned["sessions"] == ROUNDS - seen[-1]["sessions"]
    assert all(pruned.values()), pruned
    # The metric counts every row deleted, of each table (a lease's events with it).
    assert {table: daemon.metrics.registry.get_sample_value(
        "poold_pruned_rows_total", {"table": table}) for table in pruned} == pruned
    report = daemon.ledger.read(fsck)
    assert report.clean, report.violations
    # The audit log of what is kept: newest first, whole.
    kept = daemon.ledger.read(lambda s, now: reads.events(s, limit=10_000))
    assert kept and kept[0].id > kept[-1].id
    lease_ids = {e.lease_id for e in kept if e.kind == EventKind.LEASE_GRANTED}
    assert len(lease_ids) == seen[-1]["leases"]


def test_a_pruned_idempotency_key_can_be_used_again(daemon: Daemon) -> None:
    def grant_with_key() -> str:
        return daemon.ledger.run(partial(leases.grant, request=GrantRequest(
            size=2 * MiB, actor="test", ttl_s=60, tenant="team-a",
            idempotency_key="k1"))).id

    first = grant_with_key()
    assert grant_with_key() == first  # a replay while the lease is kept
    daemon.ledger.run(partial(leases.release, lease_id=first, actor="test"))
    daemon.scrubber.run_once()
    clock(daemon).advance(RETENTION_S / 2)
    daemon.prune()
    assert grant_with_key() == first  # ended, but within retention: still a replay
    clock(daemon).advance(RETENTION_S)
    daemon.prune()
    again = grant_with_key()
    assert again != first  # the key went with its lease
    assert daemon.ledger.read(fsck).clean
