"""Engines, connection settings and schema upgrades for both dialects.

Owns how poold talks to SQLite and PostgreSQL: PRAGMAs, when the writer's transactions begin
(SQLite's BEGIN IMMEDIATE, PostgreSQL's BEGIN sent with the first statement), pool sizes,
running SQL on the driver's own cursor (`cursor_execute`, `first_statement`), and running
Alembic. Leaves every query to `poold.ledger.queries`.
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
        engine = create_engine(url, pool_pre_ping=True, pool_size=5 if writer else 10,
                               connect_args=_PG_CONNECT_ARGS)
        if writer:
            _defer_postgres_begin(engine)
        return engine
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


# Connection.info key: this connection's transaction has begun for SQLAlchemy, but its BEGIN has
# not been sent yet (PostgreSQL writer engines, see _defer_postgres_begin).
_BEGIN_PENDING = "poold.begin_pending"


def _defer_postgres_begin(engine: Engine) -> None:
    """The writer's transactions send their BEGIN with their first statement, one round trip
    instead of two: each batch the writer runs opens with a read (`first_statement`), and a
    round trip to the server is most of what a short statement costs (a grant's transaction was
    eight of them).

    psycopg would send BEGIN alone, and wait for its answer, before the first statement of a
    transaction; so the driver runs in autocommit mode, and poold sends BEGIN itself:
    `first_statement` sends it in front of the statement, and any other statement (Core, the
    ORM, the driver's cursor through `cursor_execute`) that comes first has a BEGIN of its own
    sent just before it. So nothing a transaction runs runs outside it. psycopg's commit and
    rollback end whatever transaction the server has open, however it began."""

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.autocommit = True

    @event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        connection.info[_BEGIN_PENDING] = True

    @event.listens_for(engine, "before_cursor_execute")
    def begin_first(connection: Connection, cursor: Any, *_: Any) -> None:
        if connection.info.pop(_BEGIN_PENDING, False):
            cursor.execute("BEGIN")

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def on_end(connection: Connection) -> None:
        if not connection.invalidated:  # (an invalidated one's info went with its connection)
            connection.info.pop(_BEGIN_PENDING, None)


def first_statement(conn: Connection, sql: str) -> Any:
    """Run `sql` (no parameters: its values are literals) as the first statement of the
    transaction, and hand back its cursor positioned on its rows. Where the engine defers BEGIN
    (a PostgreSQL writer), the two go to the server as one query: one round trip."""
    if conn.info.pop(_BEGIN_PENDING, False):
        # Several statements in one query: psycopg sends it with the simple query protocol,
        # which it uses for a query given no parameters at all (None, not an empty tuple).
        cursor = cursor_execute(conn, f"BEGIN; {sql}", None)
        cursor.nextset()  # past BEGIN's empty result, to the statement's rows
        return cursor
    return cursor_execute(conn, sql, None)


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
        elif parameters is None:
            cursor.execute(sql)
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
