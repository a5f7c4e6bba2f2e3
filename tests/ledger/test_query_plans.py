"""On SQLite, the writer's lookups of one object's leases search by that object's index, and
the overlap guard on a new lease reads one neighbour, not the device's every lease.

SQLite plans from the schema alone (poold never runs ANALYZE), so an index that constrains
fewer columns than (state, expires_at) loses to it, and the lookup reads every valid lease in
the ledger; an expression index is used only for the very expression in the index. Each
statement is caught as the ledger's own query function sends it, and planned by SQLite itself.
(tests/ledger/test_ledger_scale.py shows the cost on a grown ledger.)"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, insert

from bench.ledger_scale import sqlite_steps
from poold import db
from poold.ledger import queries as q
from poold.ledger.queries._tables import HOSTS, SESSIONS

NOW = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Connection]:
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    db.upgrade(url)
    engine = db.make_engine(url, writer=True)
    with engine.connect() as connection, connection.begin():
        yield connection
    engine.dispose()


def open_session(conn: Connection, session_id: str) -> None:
    """A host and a valid session of it, for a keepalive to renew."""
    conn.execute(insert(HOSTS).values(id="host-a", name="host-a", state="up",
                                      registered_at=NOW, last_seen_at=NOW))
    conn.execute(insert(SESSIONS).values(
        id=session_id, host_id="host-a", tenant=None, ttl_s=60, opened_at=NOW,
        expires_at=NOW + timedelta(seconds=60), ended_at=None, state="active", labels={}))


def renew(conn: Connection) -> Any:
    open_session(conn, "s" * 32)
    return q.sessions.renew_session(conn, "s" * 32, NOW, NOW + timedelta(seconds=60), 60)


def plans(conn: Connection, run: Callable[[Connection], Any]) -> list[str]:
    """SQLite's plan (its lines joined) for each statement `run` sends."""
    sent: list[tuple[str, Any]] = []  # (what the setup in `run` inserts is planned too)

    def catch(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        sent.append((sql, parameters))
    event.listen(conn, "before_cursor_execute", catch)
    try:
        run(conn)
    finally:
        event.remove(conn, "before_cursor_execute", catch)
    raw = conn.connection.dbapi_connection
    assert raw is not None and sent
    return [" | ".join(row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", parameters))
            for sql, parameters in sent]


@pytest.mark.parametrize(("name", "run", "index"), [
    ("a session keepalive's leases", renew, "ix_leases_session_id_state_expires_at"),
    ("a tenant's usage against its quota",
     lambda c: q.tenants.tenant_usage(c, "acme", NOW), "ix_leases_tenant_state_expires_at"),
    ("a tenant's usage in a pool", lambda c: q.tenants.pool_usage(c, "acme", 1, NOW),
     "ix_leases_tenant_state_expires_at"),
    ("a lease by its idempotency key, an admin's",
     lambda c: q.leases.lease_record_by_key(c, "host-a", None, "key-1"),
     "uq_leases_host_tenant_idempotency_key"),
    ("a lease by its idempotency key, a tenant's",
     lambda c: q.leases.lease_record_by_key(c, "host-a", "acme", "key-1"),
     "uq_leases_host_tenant_idempotency_key"),
])
def test_lookup_searches_by_its_key(conn: Connection, name: str,
                                    run: Callable[[Connection], Any], index: str) -> None:
    leases = [plan for plan in plans(conn, run) if " leases " in f" {plan} "]
    assert leases, f"{name}: no statement on leases was sent"
    assert all(f"INDEX {index} " in plan for plan in leases), f"{name}: {leases}"


def instructions_of_one_more_lease(tmp_path: Path, live: int) -> int:
    """SQLite VM instructions of inserting one lease (its overlap trigger included) onto a
    device already holding `live` leases, below the new one."""
    url = f"sqlite:///{tmp_path}/guard-{live}.sqlite3"
    db.upgrade(url)
    raw = sqlite3.connect(f"{tmp_path}/guard-{live}.sqlite3")
    raw.execute("INSERT INTO hosts (id, name, state, registered_at, last_seen_at) "
                "VALUES ('h', 'h', 'up', '2026-12-07', '2026-12-07')")
    raw.execute("INSERT INTO pools (id, name, claim_slice, default_ttl_s, max_ttl_s, "
                "scrub_on_release, created_at) VALUES (1, 'p', 0, 60, 60, 0, '2026-12-07')")
    raw.execute("INSERT INTO devices (id, uid, host_id, pool_id, kind, devname, chardev, size, "
                "align, state, created_at, updated_at, pool_assigned) VALUES (1, 'u', 'h', 1, "
                "'emulated', 'emu', '/nonexistent', 1 << 50, 1, 'online', '2026-12-07', "
                "'2026-12-07', 0)")
    raw.execute("INSERT INTO claims (id, device_id, host_id, \"offset\", length, state, "
                "created_at) VALUES (1, 1, 'h', 0, 1 << 50, 'active', '2026-12-07')")
    insert_lease = (
        "INSERT INTO leases (id, pool_id, device_id, claim_id, host_id, \"offset\", length, "
        "generation, ttl_s, granted_at, expires_at, state, labels, scrubbed_bytes, elastic) "
        "VALUES (?, 1, 1, 1, 'h', ?, 1, 1, 60, '2026-12-07', '2026-12-08', 'active', '{}', 0, 0)")
    raw.executemany(insert_lease, [(f"l{n}", n) for n in range(live)])
    steps = sqlite_steps(raw, insert_lease, ("new", live))
    raw.rollback()
    raw.close()
    return steps


def test_overlap_guard_reads_a_neighbour_not_the_device(tmp_path: Path) -> None:
    """A grant's insert costs the same with 10 or 5,000 live leases on its device (0003's
    trigger read all of them: about 10 instructions each)."""
    few, many = (instructions_of_one_more_lease(tmp_path, n) for n in (10, 5000))
    assert many <= few + 200, f"instructions with 10 live leases: {few}; with 5,000: {many}"
