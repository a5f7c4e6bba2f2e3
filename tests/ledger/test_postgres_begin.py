"""On PostgreSQL the writer sends each transaction's BEGIN with its first statement (poold.db):
nothing a transaction runs may escape it, whichever way its first statement is sent, and a
grant or a release costs the round trips counted here, against the real server (the libpq
protocol trace of the writer's own connection)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, func, insert, select
from sqlalchemy.orm import Session

from poold import db
from poold.ledger import leases
from poold.ledger.clock import DatabaseClock
from poold.ledger.leases import GrantRequest
from poold.ledger.queries._tables import EVENTS
from poold.ledger.queries.hot import HotStatement
from poold.models import Event
from poold.types import MiB
from tests.conftest import LedgerFactory, migrated_writer_engine

AT = datetime(2026, 12, 7, 16, 0, tzinfo=UTC)
ROW = {"at": AT, "kind": "lease.granted", "actor": "test", "host_id": None,
       "device_id": None, "lease_id": None, "details": {}}


@pytest.fixture
def clock() -> DatabaseClock:
    """The daemon's own clock (make_ledger's default is a manual one): on PostgreSQL it reads
    the server's, which is one of the round trips counted."""
    return DatabaseClock()


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    with migrated_writer_engine(pg_url) as engine:
        yield engine


def _core(conn: Connection) -> None:
    conn.execute(insert(EVENTS), [ROW])


def _cursor(conn: Connection) -> None:
    HotStatement(insert(EVENTS)).rowcount(conn, ROW)


def _orm(conn: Connection) -> None:
    with Session(bind=conn) as session:  # joins the connection's transaction
        session.add(Event(**ROW))
        session.flush()


def _first(conn: Connection) -> None:
    db.first_statement(conn, "INSERT INTO events (at, kind, actor, details) VALUES "
                             "(now(), 'lease.granted', 'test', '{}') RETURNING id").close()


FIRST_STATEMENTS: dict[str, Callable[[Connection], None]] = {
    "core": _core, "driver cursor": _cursor, "orm": _orm, "first_statement": _first}


def _events(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(EVENTS)).scalar_one())


@pytest.mark.parametrize("first", list(FIRST_STATEMENTS))
def test_the_first_statement_of_a_transaction_runs_inside_it(engine: Engine, first: str) -> None:
    with engine.connect() as conn:
        with conn.begin() as transaction:
            FIRST_STATEMENTS[first](conn)
            _core(conn)  # and what follows it
            assert _events(engine) == 0  # another connection sees none of it yet
            transaction.rollback()
        assert _events(engine) == 0  # nothing was committed on its own
        with conn.begin():
            FIRST_STATEMENTS[first](conn)
        assert _events(engine) == 1


def test_a_transaction_that_ran_nothing_leaves_none_begun(engine: Engine) -> None:
    with engine.connect() as conn:
        with conn.begin():
            pass  # no statement: its BEGIN was never sent
        with conn.begin() as transaction:
            _core(conn)
            transaction.rollback()
        assert _events(engine) == 0


def _round_trips(trace: str) -> int:
    """Each exchange with the server ends with its ReadyForQuery."""
    return sum(1 for line in trace.splitlines() if "\tReadyForQuery" in line)


def _traced(make_ledger: LedgerFactory, commands: list[Callable[[Any], Any]]) -> list[int]:
    """The round trips of the writer's connection for each command, run in a batch of its own."""
    from psycopg import pq

    ledger = make_ledger()
    begun: list[Any] = []
    event.listen(ledger._write_engine, "begin",
                 lambda conn: begun.append(conn.connection.dbapi_connection.pgconn))
    counts = []
    for command in commands:
        begun.clear()
        ledger.run(lambda _tx: None)  # the writer keeps its connection across batches: this one
        (pgconn,) = set(begun)
        with tempfile.TemporaryFile() as out:
            pgconn.trace(out.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                ledger.run(command)
            finally:
                pgconn.untrace()
            out.seek(0)
            counts.append(_round_trips(out.read().decode()))
    return counts


def test_a_grant_takes_five_round_trips_and_a_release_four(
        make_ledger: LedgerFactory, ledger_url: str) -> None:
    """BEGIN with the batch's first read (catalog version and server clock), the claim's check,
    the lease's insert drawing its fencing token, the events, COMMIT: five for a grant; a
    release has no claim to check. (Before: BEGIN, the clock, the catalog and the token each
    took one of their own: eight and six.)"""
    if db.is_sqlite(ledger_url):
        pytest.skip("a SQLite ledger has no server to talk to")
    granted: list[str] = []

    def grant(tx: Any) -> None:
        granted.append(leases.grant(tx, GrantRequest(size=2 * MiB, actor="test")).id)

    def release(tx: Any) -> None:
        leases.release(tx, granted.pop(), actor="test")

    # The first grant reads the catalog (pools, devices, quotas) the bootstrap changed.
    assert _traced(make_ledger, [grant, release, grant, release])[2:] == [5, 4]
