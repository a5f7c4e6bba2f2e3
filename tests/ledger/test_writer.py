"""The group-commit ledger writer: concurrent commands share transactions yet every grant gets its
own extent and generation; a refused command (PooldError) or a crashing one (a bug) fails alone
while the rest of its batch commits; after a crash the in-memory space matches the ledger again;
a caller cancelling its future does not disturb the writer; a caller on an event loop hears a
whole batch in one wake-up of its loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from itertools import pairwise
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, event, text

from poold import errors
from poold.ledger import leases, pools, reads
from poold.ledger import queries as q
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView
from poold.types import LeaseState, MiB
from tests.conftest import LedgerFactory, emulated_spec
from tests.timing import patience, until

T = TypeVar("T")


def grant_command(size: int = 2 * MiB) -> partial[LeaseView]:
    return partial(leases.grant, request=GrantRequest(size=size, actor="test"))


def count_commits(ledger: Ledger) -> list[object]:
    """One entry per transaction the writer commits from now on."""
    commits: list[object] = []
    event.listen(ledger._write_engine, "commit", commits.append)
    return commits


@contextmanager
def writer_held(ledger: Ledger) -> Iterator[None]:
    """Keep the writer busy in a transaction of its own, so that everything submitted inside the
    block waits in the queue and is folded into the next batch."""
    inside, go = threading.Event(), threading.Event()

    def hold(_tx: Tx) -> None:
        inside.set()
        go.wait(30)

    holder = ledger.submit(hold)
    assert inside.wait(30)
    try:
        yield
    finally:
        go.set()
        holder.result(30)


def assert_clean(ledger: Ledger) -> None:
    report = ledger.read(fsck)
    assert report.clean, report.violations


def live_lease_ids(ledger: Ledger) -> set[str]:
    return {x.id for x in ledger.read(lambda s, now: reads.leases(s, now))
            if x.state is LeaseState.ACTIVE}


def test_concurrent_grants_share_transactions_and_never_overlap(
    make_ledger: LedgerFactory,
) -> None:
    ledger = make_ledger([emulated_spec(512 * MiB)])
    commits = count_commits(ledger)
    start = threading.Barrier(8)
    futures: list[Future[LeaseView]] = []

    def client() -> None:
        start.wait()
        mine = [ledger.submit(grant_command()) for _ in range(25)]
        futures.extend(mine)
        for future in mine:
            future.result(60)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    granted = [f.result(0) for f in futures]
    assert len(granted) == 200
    assert len({x.generation for x in granted}) == 200
    extents = sorted((x.offset, x.length) for x in granted)
    assert all(a + n <= b for (a, n), (b, _) in pairwise(extents))
    assert 0 < len(commits) < 200  # group commit: some transaction held several grants
    assert_clean(ledger)


def traced(seen: list[Tx], command: Callable[[Tx], T]) -> Callable[[Tx], T]:
    """The command, noting which transaction (Tx) it ran in."""
    def run(tx: Tx) -> T:
        seen.append(tx)
        return command(tx)
    return run


def test_a_refused_command_fails_alone_in_its_batch(ledger: Ledger) -> None:
    seen: list[Tx] = []
    with writer_held(ledger):
        first = ledger.submit(traced(seen, grant_command()))
        refused = ledger.submit(traced(seen, grant_command(size=0)))
        last = ledger.submit(traced(seen, grant_command()))
    granted = {first.result(30).id, last.result(30).id}
    with pytest.raises(errors.InvalidRequest):
        refused.result(30)
    assert len(seen) == 3 and seen[0] is seen[1] is seen[2]  # one transaction for all three
    assert live_lease_ids(ledger) == granted
    assert_clean(ledger)


def crashing_grant(tx: Tx) -> None:
    """A bug: writes (ledger rows and in-memory space), then raises something not a PooldError."""
    leases.grant(tx, GrantRequest(size=8 * MiB, actor="bug"))
    raise RuntimeError("bug in a command")


def test_a_crashing_command_fails_alone_and_the_space_is_rebuilt(ledger: Ledger) -> None:
    old = ledger.run(grant_command(8 * MiB))
    with writer_held(ledger):
        released = ledger.submit(partial(leases.release, lease_id=old.id, actor="test"))
        before = ledger.submit(grant_command(8 * MiB))
        crash = ledger.submit(crashing_grant)
        after = ledger.submit(grant_command(8 * MiB))
    assert released.result(30).state is LeaseState.RELEASED
    granted = {before.result(30).id, after.result(30).id}
    with pytest.raises(RuntimeError, match="bug in a command"):
        crash.result(30)
    assert live_lease_ids(ledger) == granted
    # The space knows exactly the 16 MiB now leased: the crashed grant's extent was not kept
    # and the release rolled back with its batch was not applied twice.
    for _ in range(24):  # the 48 MiB left, in 2 MiB leases
        ledger.run(grant_command())
    with pytest.raises(errors.NoCapacity):
        ledger.run(grant_command())
    assert len(live_lease_ids(ledger)) == 2 + 24
    assert_clean(ledger)


def data_refused_grant(tx: Tx) -> None:
    """Writes (ledger rows and in-memory space), then sends the database a value it refuses for
    its data (SQLSTATE class 22: an integer out of range), as a command with bad input would."""
    leases.grant(tx, GrantRequest(size=8 * MiB, actor="bad-data"))
    tx.conn.execute(text("SELECT CAST(:big AS INTEGER) + 1"), {"big": 2**40}).all()
    if tx.conn.dialect.name == "sqlite":  # SQLite stores any integer: refuse it as PostgreSQL
        from sqlalchemy.exc import DataError

        raise DataError("SELECT", {}, ValueError("integer out of range"))


def test_a_data_error_fails_its_command_alone_and_keeps_the_connection(
        ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    """Once, a NUL byte in one keepalive's id made the writer drop its connection and replay its
    batch one command at a time: eight such clients cut everyone else's rate by three quarters."""
    commits = count_commits(ledger)
    with writer_held(ledger):
        connection = ledger.writer._conn
        before = ledger.submit(grant_command(8 * MiB))
        bad = ledger.submit(data_refused_grant)
        after = ledger.submit(grant_command(8 * MiB))
    granted = {before.result(30).id, after.result(30).id}
    with pytest.raises(errors.InvalidRequest, match="cannot store this request's data"):
        bad.result(30)
    assert live_lease_ids(ledger) == granted
    assert ledger.writer._conn is connection  # not reconnected
    assert len(commits) == 2  # the holder's batch, then the other two together: no replay
    assert "ledger.batch_failed" not in caplog.text
    for _ in range(24):  # the space holds exactly the 16 MiB leased
        ledger.run(grant_command())
    with pytest.raises(errors.NoCapacity):
        ledger.run(grant_command())
    assert_clean(ledger)


def test_a_cancelled_future_does_not_break_the_writer(ledger: Ledger) -> None:
    with writer_held(ledger):
        abandoned = ledger.submit(grant_command())
        assert abandoned.cancel()
        kept = ledger.submit(grant_command())
    assert kept.result(30).state is LeaseState.ACTIVE
    assert abandoned.cancelled()
    assert ledger.run(grant_command()).state is LeaseState.ACTIVE
    # A caller that gave up before its turn is not acted for: no lease nobody holds.
    assert len(live_lease_ids(ledger)) == 2
    assert_clean(ledger)


def test_commands_after_stop_fail_at_once_and_queued_ones_finish(ledger: Ledger) -> None:
    with writer_held(ledger):
        queued = ledger.submit(grant_command())
        stopper = threading.Thread(target=ledger.writer.stop)
        stopper.start()
        deadline = time.monotonic() + 30
        while ledger.writer._accepting and time.monotonic() < deadline:
            time.sleep(0.001)
        late = ledger.submit(grant_command())
        with pytest.raises(errors.LedgerUnavailable):
            late.result(1)
    stopper.join(30)
    assert queued.result(30).state is LeaseState.ACTIVE


def test_a_misfiled_lease_does_not_stop_the_writer_nor_get_overwritten(
    make_ledger: LedgerFactory,
) -> None:
    first = make_ledger([emulated_spec(8 * MiB)], claim_slice=4 * MiB)
    kept = first.run(grant_command(2 * MiB))
    first.run(grant_command(4 * MiB))  # a second claim, [4, 8) MiB
    first.close()
    # Corrupt: point the first lease at the second claim, which does not hold its bytes.
    engine = create_engine(first.url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE leases SET claim_id = (SELECT MAX(id) FROM claims) "
                          "WHERE id = :id"), {"id": kept.id})
    engine.dispose()
    second = make_ledger([emulated_spec(8 * MiB)], claim_slice=4 * MiB)
    fresh = second.run(grant_command(2 * MiB))  # the writer still works...
    assert fresh.offset == 2 * MiB  # ...and does not hand out the misfiled lease's bytes
    with pytest.raises(errors.NoCapacity):
        second.run(grant_command(2 * MiB))
    assert any("claim" in v for v in second.read(fsck).violations)


def test_two_hosts_creating_one_row_at_once_both_succeed(make_ledger: LedgerFactory) -> None:
    """Hosts starting together on one ledger each create the pools (and shared devices) they
    configure: on PostgreSQL both read "absent" and insert, and the later insert waits for the
    first and then violates the unique index. The writer reruns it, and it finds the row."""
    a, b = make_ledger(host_id="host-a"), make_ledger(host_id="host-b")
    policy = pools.PoolPolicy(name="racing", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    inside, go = threading.Event(), threading.Event()
    backends: list[int] = []  # host-b's PostgreSQL backend, each time its command runs

    def create_then_wait(tx: Tx) -> int:
        pool = pools.seed(tx, policy)[0]
        inside.set()
        assert go.wait(patience())  # commit only once the other host is inserting too
        return pool.id

    def create(tx: Tx) -> int:
        if tx.conn.dialect.name == "postgresql":
            backends.append(tx.conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        return pools.seed(tx, policy)[0].id

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(a.run, create_then_wait)
        assert inside.wait(patience())
        second = pool.submit(b.run, create)
        if a.url.startswith("postgresql"):
            # host-b read "absent" and is inserting: its backend waits on host-a's row lock.
            until("host-b's insert waits on host-a's", lambda: backends and waits_on_a_lock(
                a.url, backends[0]), patience())
        # (On SQLite host-b's transaction cannot begin before host-a's ends: no race to set up.)
        go.set()
        assert first.result(patience()) == second.result(patience())
    if a.url.startswith("postgresql"):
        assert len(backends) == 2  # host-b's insert failed on host-a's row, and ran again
    created = [e for e in a.read(lambda s, _now: reads.events(s, limit=100))
               if e.kind == "pool.created" and e.details.get("pool") == "racing"]
    assert len(created) == 1


def waits_on_a_lock(url: str, backend: int) -> bool:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            waiting = conn.execute(text("SELECT wait_event_type FROM pg_stat_activity "
                                        "WHERE pid = :pid"), {"pid": backend}).scalar()
    finally:
        engine.dispose()
    return waiting == "Lock"


def test_the_writer_says_when_a_committed_transaction_ended_leases(
    make_ledger: LedgerFactory,
) -> None:
    """What wakes the daemon's scrubber: told after the commit of each transaction that ended
    a lease (released, revoked, expired), once whatever their number, with each lease and
    whether it waits for its scrub; not for grants, nor for a transaction rolled back."""
    ledger = make_ledger([emulated_spec(512 * MiB)])
    told: list[tuple[dict[str, bool], bool]] = []

    def tell(ended: dict[str, bool]) -> None:  # in the writer's thread, after the commit
        told.append((dict(ended), ledger.read(
            lambda s, now: reads.lease(s, first.id, now)).state is not LeaseState.ACTIVE))

    ledger.writer.on_leases_ended = tell
    first, second = ledger.run(grant_command()), ledger.run(grant_command())
    assert told == []
    with writer_held(ledger):  # both releases in one transaction
        ends = [ledger.submit(partial(leases.release, lease_id=x.id, actor="test"))
                for x in (first, second)]
    assert [f.result(30).state for f in ends] == [LeaseState.RELEASED] * 2
    assert told == [({first.id: False, second.id: False}, True)]
    third = ledger.run(grant_command())
    ledger.run(partial(leases.revoke, lease_id=third.id, actor="admin"))
    assert told[1:] == [({third.id: False}, True)]

    def ends_then_fails(tx: Tx) -> None:
        leases.release(tx, fourth.id, "test")
        raise RuntimeError("a bug after the release: the transaction is rolled back")

    fourth = ledger.run(grant_command())
    with pytest.raises(RuntimeError):
        ledger.run(ends_then_fails)
    assert len(told) == 2
    assert ledger.read(lambda s, now: reads.lease(s, fourth.id, now)).state is LeaseState.ACTIVE


def test_the_writer_says_which_ended_leases_wait_for_their_scrub(
    make_ledger: LedgerFactory,
) -> None:
    """In a pool that scrubs, an ended lease is told as waiting for its scrub (the scrubber's
    full pass zeroes it); the scrub's own end is no lease ending."""
    ledger = make_ledger([emulated_spec(512 * MiB)], scrub=True)
    told: list[dict[str, bool]] = []
    ledger.writer.on_leases_ended = lambda ended: told.append(dict(ended))
    lease = ledger.run(grant_command())
    assert ledger.run(partial(leases.release, lease_id=lease.id,
                              actor="test")).state is LeaseState.SCRUBBING
    assert told == [{lease.id: True}]
    ledger.run(lambda tx: leases.finish_scrub(tx, lease.id))
    assert told == [{lease.id: True}]


def test_a_failing_leases_ended_callback_fails_nothing_committed(
    make_ledger: LedgerFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    """The callback runs after the commit: if it raises, the release stands, is answered once as
    released, and is not replayed (a replay would run committed commands a second time)."""
    ledger = make_ledger([emulated_spec(512 * MiB)])
    calls: list[str] = []

    def broken(_ended: dict[str, bool]) -> None:
        calls.append("told")
        raise RuntimeError("the scrubber's wake failed")

    ledger.writer.on_leases_ended = broken
    lease = ledger.run(grant_command())
    with caplog.at_level(logging.ERROR, logger="poold.ledger.writer"):
        ended = ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    assert ended.state is LeaseState.RELEASED
    assert calls == ["told"]
    assert [r.getMessage() for r in caplog.records] == ["ledger.on_leases_ended_failed"]
    released = ledger.read(lambda s, now: reads.events(s, lease_id=lease.id,
                                                       kind="lease.released"))
    assert len(released) == 1
    assert ledger.run(grant_command()).state is LeaseState.ACTIVE  # the writer goes on


def test_the_catalog_is_read_again_only_after_a_command_that_may_have_changed_it(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path's cached catalog (pools, devices): a command that went through the ORM
    session (an admin's, which may change pools) drops it once; the grants after it, on Core
    alone, keep the one read again."""
    reads_: list[str] = []
    catalog = q.pools.catalog
    monkeypatch.setattr(q.pools, "catalog", lambda conn, host_id: (
        reads_.append(host_id), catalog(conn, host_id))[1])
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)

    def batch(tx: Tx) -> None:
        for command in (partial(pools.create_pool, policy=policy, actor="test"),
                        *[partial(leases.grant, request=GrantRequest(size=MiB, actor="test"))
                          for _ in range(3)]):
            command(tx)
            tx.command_done()  # as the writer does after each command of a batch

    ledger.run(batch)
    assert len(reads_) == 1


def test_the_catalog_outlives_transactions_until_an_admin_changes_pools(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer keeps its catalog from one transaction to the next while the ledger's
    catalog version stands; an admin's pool edit (through any daemon) moves it on."""
    grant = partial(leases.grant, request=GrantRequest(size=MiB, actor="test"))
    ledger.run(grant)  # the catalog read once, whenever that was
    reads_: list[str] = []
    catalog = q.pools.catalog
    monkeypatch.setattr(q.pools, "catalog", lambda conn, host_id: (
        reads_.append(host_id), catalog(conn, host_id))[1])
    for _ in range(3):
        ledger.run(grant)
    assert reads_ == []
    ledger.run(partial(pools.edit_pool, name="default", changes={"default_ttl_s": 61},
                       actor="admin:a"))
    reads_.clear()
    for _ in range(3):
        ledger.run(grant)
    assert len(reads_) == 1


class CountedWakeups:
    """Counts call_soon_threadsafe on a loop: each one is a wake-up (a self-pipe write) of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = self._counted  # type: ignore[method-assign,assignment]

    def _counted(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self._real(*args, **kwargs)


def test_a_loop_hears_a_whole_batch_in_one_wakeup_and_each_caller_its_own_result(
        ledger: Ledger) -> None:
    async def main() -> tuple[list[LeaseView | BaseException], int]:
        wakeups = CountedWakeups(asyncio.get_running_loop())
        with writer_held(ledger):
            calls = [ledger.call(grant_command()) for _ in range(6)]
            calls.insert(3, ledger.call(grant_command(size=0)))  # refused, alone
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        return outcomes, wakeups.count

    outcomes, wakeups = asyncio.run(main())
    refused = outcomes.pop(3)
    assert isinstance(refused, errors.InvalidRequest)
    assert all(isinstance(x, LeaseView) and x.state is LeaseState.ACTIVE for x in outcomes)
    assert live_lease_ids(ledger) == {x.id for x in outcomes if isinstance(x, LeaseView)}
    assert wakeups == 1  # seven callers, one batch, one hand-over


def test_a_call_cancelled_before_its_turn_is_not_run(ledger: Ledger) -> None:
    async def main() -> LeaseView:
        with writer_held(ledger):
            abandoned = asyncio.ensure_future(ledger.call(grant_command()))
            kept = ledger.call(grant_command())
            abandoned.cancel()
            await asyncio.sleep(0)  # the cancellation lands before the writer takes the batch
        assert abandoned.cancelled()
        return await kept

    kept = asyncio.run(main())
    assert live_lease_ids(ledger) == {kept.id}  # nobody holds a lease for the one that left
    assert_clean(ledger)


def test_a_call_after_stop_fails_at_once_and_one_queued_before_finishes(ledger: Ledger) -> None:
    async def main() -> tuple[LeaseView, LeaseView | BaseException]:
        with writer_held(ledger):
            queued = ledger.call(grant_command())
            stopper = threading.Thread(target=ledger.writer.stop)
            stopper.start()
            until("the writer refuses new work", lambda: not ledger.writer._accepting,
                  patience(1))
            late = ledger.call(grant_command())
            refusal = await asyncio.gather(late, return_exceptions=True)
        stopper.join(30)
        return await queued, refusal[0]

    granted, refusal = asyncio.run(main())
    assert granted.state is LeaseState.ACTIVE
    assert isinstance(refusal, errors.LedgerUnavailable)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_writer_that_dies_still_answers_the_calls_of_its_last_batch(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Results wait in the writer's outbox until the batch ends: a writer dying after a batch
    committed must still hand them over, not leave their callers waiting forever."""
    def dying_deliver_once(real: Callable[[], None]) -> Callable[[], None]:
        state = {"died": False}

        def deliver() -> None:
            if not state["died"]:
                state["died"] = True
                raise SystemExit("the writer thread dies between commit and hand-over")
            real()
        return deliver

    async def main() -> LeaseView:
        monkeypatch.setattr(ledger.writer, "_deliver", dying_deliver_once(ledger.writer._deliver))
        return await asyncio.wait_for(ledger.call(grant_command()), patience(30))

    assert asyncio.run(main()).state is LeaseState.ACTIVE


def test_the_writers_counters_say_how_many_commands_each_batch_ran(ledger: Ledger) -> None:
    stats = ledger.writer.stats
    with writer_held(ledger):
        before = (stats.batches, stats.commands, stats.busy_s)
        held_for = time.monotonic()
        futures = [ledger.submit(grant_command()) for _ in range(5)]
        futures.append(ledger.submit(grant_command(size=0)))  # refused: still a command run
        time.sleep(0.05)  # the holding batch is busy all along: its time counts
        held_for = time.monotonic() - held_for
    for future in futures[:5]:
        future.result(30)
    with pytest.raises(errors.InvalidRequest):
        futures[5].result(30)
    # The holding batch ended as the block did; the six queued meanwhile ran as one.
    until("the queued batch was counted", lambda: stats.batches == before[0] + 2, patience(1))
    assert stats.commands == before[1] + 1 + 6
    assert stats.busy_s - before[2] >= held_for
