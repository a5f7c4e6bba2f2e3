"""Engines, connection settings and schema upgrades for both dialects.

Owns how poold talks to SQLite and PostgreSQL: PRAGMAs, the writer's BEGIN IMMEDIATE, pool sizes,
running SQL on the driver's own cursor (`cursor_execute`), and running Alembic. Leaves every
query to `poold.ledger.queries`.
"""

from __future__ import annotations

import sqlite3
from importlib.resources import files
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


_PG_CONNECT_ARGS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 4,
                    "keepalives_interval": 2, "keepalives_count": 3}


def make_engine(url: str, *, writer: bool, synchronous: str = "FULL") -> Engine:
    """An engine for the ledger.

    The writer engine takes SQLite's write lock at BEGIN (BEGIN IMMEDIATE) so a transaction never
    fails half-way on lock upgrade; readers begin deferred and read a WAL snapshot.
    """
    if not is_sqlite(url):
        # Fail fast when the server is unreachable (a partition, a restart) instead of hanging
        # a request or the writer: 5 s to connect, and TCP keepalive finds a dead peer in ~10 s.
        return create_engine(url, pool_pre_ping=True, pool_size=5 if writer else 10,
                             connect_args=_PG_CONNECT_ARGS)
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    _configure_sqlite(engine, writer=writer, synchronous=synchronous)
    return engine


def _configure_sqlite(engine: Engine, *, writer: bool, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's begin event, not pysqlite, decide when transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL: readers never block the writer and a crash loses no committed transaction.
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: fsync at every commit, so an acknowledged grant survives power loss.
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        # The schema's foreign keys are part of the invariants; SQLite ignores them by default.
        cursor.execute("PRAGMA foreign_keys=ON")
        # Wait for a competing writer (poold fsck, a second daemon) instead of failing at once.
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        # Every transaction runs it: on the cursor (about half of exec_driver_sql's cost).
        cursor_execute(connection, "BEGIN IMMEDIATE" if writer else "BEGIN").close()


def cursor_execute(conn: Connection, sql: str, parameters: Any = (), *,
                   many: bool = False) -> Any:
    """Run SQL on the driver's cursor of `conn` (in its transaction) and hand the cursor back
    (the caller reads and closes it): what Core's execute costs over the driver's own is most
    of a short statement's cost. A driver error is raised as Core's execute would raise it
    (DBAPIError.instance: IntegrityError, DataError, OperationalError, ... with `.orig`), and a
    connection the server dropped is invalidated, never handed back to the pool."""
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    dialect = conn.dialect
    error_class = dialect.loaded_dbapi.Error
    # Listeners of Core's cursor events (tracing, bench/ledger_scale.py's read counter) see
    # these statements as they see Core's, without an execution context (Core gives its own
    # special-case executions none either).
    observed = conn._has_events or conn.engine._has_events
    try:
        if observed:
            for fn in conn.dispatch.before_cursor_execute:
                sql, parameters = fn(conn, cursor, sql, parameters, None, many)
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        if observed:
            conn.dispatch.after_cursor_execute(conn, cursor, sql, parameters, None, many)
    except error_class as exc:
        cursor.close()
        dropped = dialect.is_disconnect(exc, dbapi_connection, None)
        if dropped:
            conn.invalidate(exc)
        raise DBAPIError.instance(sql, parameters, exc, error_class,
                                  connection_invalidated=dropped, dialect=dialect) from exc
    return cursor


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    # '%' is interpolation syntax in Alembic's ini parser.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)
