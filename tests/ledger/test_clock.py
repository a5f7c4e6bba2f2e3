"""Expiry and liveness follow the ledger's clock, not a host's: on PostgreSQL, hosts whose own
clocks are an hour ahead and an hour behind (injected into DatabaseClock) grant, renew, expire
and judge each other's silence by the server's clock. On SQLite the host clock is the ledger's,
so the same skew shows: that is what makes the PostgreSQL half a real check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from poold import db
from poold.daemon import reaper
from poold.ledger import leases, reads
from poold.ledger.clock import DatabaseClock
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.liveness import Liveness
from poold.ledger.views import HostView, LeaseView
from poold.types import LeaseState, MiB
from tests.conftest import bootstrap
from tests.ledger.test_sharing import SHARED
from tests.timing import patience, until

HOUR = timedelta(hours=1)
CLOCKS_APART = timedelta(seconds=5)  # the PostgreSQL server's clock and this machine's
TTL, GRACE = 2.0, 1.0  # another host is lost after 3 s of silence by the ledger clock
# Where no host is meant to fall silent: a loaded machine may take seconds between two steps of
# a test, and a host that misses its own 3 s would fence itself and fail the test for nothing.
PATIENT = (600.0, 60.0)


def skewed(offset: timedelta) -> Callable[[], datetime]:
    return lambda: datetime.now(UTC) + offset


@pytest.fixture
def hosts(pg_url: str) -> Iterator[Callable[..., Ledger]]:
    db.upgrade(pg_url)
    opened: list[Ledger] = []

    def make(host_id: str, offset: timedelta,
             liveness: tuple[float, float] = (TTL, GRACE)) -> Ledger:
        ledger = Ledger(pg_url, host_id=host_id, default_pool="default",
                        clock=DatabaseClock(host_clock=skewed(offset)),
                        liveness=Liveness(*liveness))
        ledger.start()
        opened.append(ledger)
        ledger.run(partial(bootstrap, specs=[SHARED], claim_slice=16 * MiB))
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


def server_now(url: str) -> datetime:
    engine = create_engine(url)
    try:
        with Session(engine) as session:
            value = session.execute(select(func.clock_timestamp())).scalar_one()
    finally:
        engine.dispose()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def grant(ledger: Ledger, ttl_s: int) -> LeaseView:
    return ledger.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                                  ttl_s=ttl_s)))


def state(ledger: Ledger, lease_id: str) -> LeaseView:
    return ledger.read(lambda s, now: reads.lease(s, lease_id, now))


def host_views(ledger: Ledger) -> dict[str, HostView]:
    return {h.id: h for h in ledger.read(reads.hosts)}


def host_states(ledger: Ledger) -> dict[str, str]:
    return {h.id: h.state for h in host_views(ledger).values()}


def tick(ledger: Ledger) -> None:
    reaper.tick(ledger, ledger.host_id, claim_idle_s=30.0)


def test_the_host_clock_is_the_ledger_clock_only_on_sqlite(tmp_path: Path, pg_url: str
                                                           ) -> None:
    clock = DatabaseClock(host_clock=skewed(HOUR))
    sqlite = create_engine(f"sqlite:///{tmp_path}/clock.sqlite3")
    postgres = create_engine(pg_url)
    try:
        with Session(sqlite) as session:
            before = datetime.now(UTC)
            read = clock.now(session)
            assert before + HOUR <= read <= datetime.now(UTC) + HOUR  # the skewed host clock
        with Session(postgres) as session:
            # The server's clock, read between our two readings (the server is on this machine,
            # or one kept in time with it): an hour off would show.
            before = datetime.now(UTC)
            read = clock.now(session)
            assert before - CLOCKS_APART <= read <= datetime.now(UTC) + CLOCKS_APART
    finally:
        sqlite.dispose()
        postgres.dispose()


def test_skewed_hosts_grant_renew_and_expire_by_the_database_clock(
        hosts: Callable[..., Ledger], pg_url: str) -> None:
    ahead, behind = hosts("ahead", HOUR, PATIENT), hosts("behind", -HOUR, PATIENT)
    before = server_now(pg_url)
    lease = grant(behind, ttl_s=30)
    after = server_now(pg_url)
    # Granted and due by the server's clock: an hour off either way would show.
    assert before <= lease.granted_at <= after
    assert lease.expires_at == lease.granted_at + timedelta(seconds=30)
    # The host an hour ahead reads it live and does not expire it when it ticks.
    tick(ahead)
    assert state(ahead, lease.id).state is LeaseState.ACTIVE
    # Renewed by the host an hour behind: extended from the server's now, not into the past.
    before = server_now(pg_url)
    renewed = behind.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=5, actor="t"))
    after = server_now(pg_url)
    assert before + timedelta(seconds=5) <= renewed.expires_at <= after + timedelta(seconds=5)
    # A short lease does expire, a second later by the server: the host an hour behind reaps
    # it (its own clock says it has an hour to go), and the one ahead sees it ended.
    short = grant(behind, ttl_s=1)
    assert short.expires_at == short.granted_at + timedelta(seconds=1)
    until("the server's clock passes the short lease's expiry",
          lambda: server_now(pg_url) > short.expires_at, patience(1))
    before = server_now(pg_url)
    tick(behind)
    after = server_now(pg_url)
    ended = state(ahead, short.id)
    assert ended.state is LeaseState.EXPIRED and ended.ended_at is not None
    assert before <= ended.ended_at <= after  # ended at the server's now, by that tick


def test_skewed_hosts_judge_silence_by_the_database_clock(
        hosts: Callable[..., Ledger]) -> None:
    ahead, behind = hosts("ahead", HOUR), hosts("behind", -HOUR)
    held = grant(behind, ttl_s=600)
    # By its own clock the host an hour ahead would find the other an hour silent; the host an
    # hour behind would write heartbeats that look an hour old. By the server's clock they are
    # seconds apart, and neither is lost.
    for _ in range(3):
        tick(behind)
        tick(ahead)
    assert host_states(ahead) == {"ahead": "up", "behind": "up"}
    assert state(ahead, held.id).state is LeaseState.ACTIVE
    # The host ahead goes silent. After ttl + grace by the server's clock, not the hour more
    # that its own clock would wait, the host an hour behind declares it lost.
    last_beat = host_views(behind)["ahead"].last_seen_at

    def lost_after_ticking() -> bool:
        tick(behind)
        return host_states(behind)["ahead"] == "lost"
    until("the silent host is declared lost", lost_after_ticking, patience(TTL, GRACE),
          interval_s=0.2)
    assert host_states(behind) == {"ahead": "lost", "behind": "up"}
    assert state(behind, held.id).state is LeaseState.ACTIVE
    # Judged on the ledger's own timestamps: its silence when declared lost was at least
    # ttl + grace (not less, whenever the test's loop ran), and nowhere near the hour more.
    assert host_views(behind)["ahead"].last_seen_at == last_beat  # it stayed silent
    (declared,) = [e for e in behind.read(lambda s, _now: reads.events(s, kind="host.lost"))
                   if e.host == "ahead"]
    silence = (declared.at - last_beat).total_seconds()
    assert TTL + GRACE <= silence < patience(TTL, GRACE), silence
