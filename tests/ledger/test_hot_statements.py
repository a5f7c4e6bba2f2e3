"""HotStatement (the writer's statements on the driver's cursor) against both real databases:
what it writes and reads back is what Core's execute writes and reads (timestamps, JSON, the
statement's own literals), it is part of SQLAlchemy's transaction, and a driver error is the
error Core would raise, so the writer's handling of refused data and lost connections holds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, Engine, bindparam, event, insert, select, text, update
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from poold import db
from poold.ledger.queries._tables import COUNTERS, EVENTS
from poold.ledger.queries.hot import HotStatement
from tests.conftest import migrated_writer_engine

AT = datetime(2026, 12, 4, 13, 14, 15, 161718, tzinfo=UTC)
EVENT = {"at": AT, "kind": "lease.granted", "actor": "tenant:a", "host_id": "h1",
         "device_id": None, "lease_id": "ab" * 16, "details": {"size": 2097152, "tags": ["x"]}}
INSERT_EVENTS = HotStatement(insert(EVENTS))
NEXT = HotStatement(update(COUNTERS).where(COUNTERS.c.name == "generation")
                    .values(value=COUNTERS.c.value + bindparam("count"))
                    .returning(COUNTERS.c.value))
BUMP = HotStatement(update(COUNTERS).where(COUNTERS.c.name == "generation")
                    .values(value=COUNTERS.c.value + bindparam("count")))
# A literal of the statement's own ("lease.granted") beside a parameter of the caller's.
GRANTED_AT = HotStatement(select(EVENTS.c.at, EVENTS.c.details)
                          .where(EVENTS.c.kind == "lease.granted",
                                 EVENTS.c.lease_id == bindparam("lease_id")))


@pytest.fixture
def engine(ledger_url: str) -> Iterator[Engine]:
    with migrated_writer_engine(ledger_url) as engine:
        yield engine


def events(conn: Connection) -> list[tuple[object, ...]]:
    """Read through Core, in a transaction of its own."""
    with conn.begin():
        return [tuple(r) for r in conn.execute(
            select(EVENTS.c.at, EVENTS.c.kind, EVENTS.c.actor, EVENTS.c.host_id,
                   EVENTS.c.device_id, EVENTS.c.lease_id, EVENTS.c.details
                   ).order_by(EVENTS.c.id))]


def test_it_writes_and_reads_what_core_does(engine: Engine) -> None:
    with engine.connect() as conn:
        with conn.begin():
            conn.execute(insert(EVENTS), [EVENT])
            INSERT_EVENTS.many(conn, [EVENT, {**EVENT, "lease_id": "cd" * 16, "details": {}}])
        core, hot, other = events(conn)
        assert hot == core  # the tz-aware timestamp and the JSON come back the same
        assert hot[0] == AT and hot[-1] == {"size": 2097152, "tags": ["x"]}
        assert other[5:] == ("cd" * 16, {})
        with conn.begin():
            assert GRANTED_AT.rows(conn, {"lease_id": "cd" * 16}) == [(AT, {})]
            assert GRANTED_AT.rows(conn, {"lease_id": "ef" * 16}) == []
            with pytest.raises(KeyError):  # the caller's parameter is required
                GRANTED_AT.rows(conn, {})


def test_returning_and_rowcount(engine: Engine) -> None:
    with engine.connect() as conn, conn.begin():
        start = conn.execute(select(COUNTERS.c.value).where(COUNTERS.c.name == "generation")
                             ).scalar_one()
        assert NEXT.rows(conn, {"count": 3}) == [(start + 3,)]
        assert NEXT.rowcount(conn, {"count": 1}) == 1  # RETURNING or not, the rows it changed
        assert BUMP.rowcount(conn, {"count": 1}) == 1
        assert NEXT.rows(conn, {"count": 1}) == [(start + 6,)]


def test_it_is_part_of_the_transaction(engine: Engine) -> None:
    with engine.connect() as conn:
        with pytest.raises(RuntimeError), conn.begin():
            INSERT_EVENTS.many(conn, [EVENT])
            raise RuntimeError("the command failed: its transaction rolls back")
        assert events(conn) == []


def test_a_driver_error_is_the_one_core_raises(engine: Engine, ledger_url: str) -> None:
    with engine.connect() as conn:
        with pytest.raises(IntegrityError) as refused, conn.begin():
            INSERT_EVENTS.many(conn, [{**EVENT, "kind": None}])  # NOT NULL
        assert refused.value.orig is not None
        if not db.is_sqlite(ledger_url):  # SQLite does not hold a String to its length
            with pytest.raises(DataError), conn.begin():  # what the writer refuses alone
                INSERT_EVENTS.many(conn, [{**EVENT, "kind": "k" * 33}])
        with conn.begin():  # the connection is sound afterwards
            INSERT_EVENTS.many(conn, [EVENT])
        assert len(events(conn)) == 1


def test_a_dropped_connection_is_invalidated(engine: Engine, ledger_url: str) -> None:
    if db.is_sqlite(ledger_url):
        pytest.skip("a SQLite file has no server to drop the connection")
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.commit()
        with engine.connect() as other, other.begin():
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(OperationalError) as dropped, conn.begin():
            INSERT_EVENTS.many(conn, [EVENT])
        assert dropped.value.connection_invalidated and conn.invalidated


def test_listeners_of_cores_cursor_events_see_it(engine: Engine) -> None:
    """What watches Core's statements (tracing, bench/ledger_scale.py's read counter) sees
    these too: before and after each, with the SQL and parameters the driver ran, and what a
    before-listener returns (retval) is what runs."""
    seen: list[tuple[str, str, object]] = []

    def before(_conn: Connection, _cursor: object, sql: str, parameters: object,
               _context: object, many: bool) -> tuple[str, object]:
        seen.append(("before", sql, parameters))
        return sql + " /* traced */", parameters  # a tracer's comment: what runs has it

    def after(_conn: Connection, _cursor: object, sql: str, parameters: object,
              _context: object, many: bool) -> None:
        seen.append(("after", sql, parameters))

    event.listen(engine, "before_cursor_execute", before, retval=True)
    event.listen(engine, "after_cursor_execute", after)
    try:
        with engine.connect() as conn, conn.begin():
            seen.clear()  # the transaction's own BEGIN, also on the cursor
            assert NEXT.rows(conn, {"count": 1})
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
    assert [(when, "UPDATE counters" in sql) for when, sql, _ in seen] == [
        ("before", True), ("after", True)]
    assert seen[1][1] == seen[0][1] + " /* traced */"
    assert seen[0][2] == seen[1][2]
