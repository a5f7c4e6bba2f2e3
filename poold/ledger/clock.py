"""The ledger's clock: every expiry is judged by it, never by a client's or a host's clock.

On PostgreSQL that is the database server's clock (shared by every host), read in the command's
own transaction: a host whose clock is wrong still grants, expires and judges other hosts' silence
by the server's. A SQLite ledger lives on this host, so the host clock is the ledger's clock.
Tests inject `ManualClock` at this seam, or a skewed host clock into `DatabaseClock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import Connection, func, select
from sqlalchemy.orm import Session

# What the clock reads the database through: a read's session, or the writer's connection.
Db = Session | Connection


class LedgerClock(Protocol):
    def now(self, db: Db, server_now: datetime | None = None) -> datetime:
        """`server_now`: the database server's clock, already read in this transaction (the
        writer reads it with its first statement); a clock that reads the server takes it
        instead of asking again."""


def host_now() -> datetime:
    return datetime.now(UTC)


class DatabaseClock:
    """`host_clock`: this host's wall clock, the ledger's clock only where the ledger is SQLite
    on this host (injectable, so a test can skew it and see PostgreSQL ignore it)."""

    def __init__(self, host_clock: Callable[[], datetime] = host_now) -> None:
        self._host_clock = host_clock

    def now(self, db: Db, server_now: datetime | None = None) -> datetime:
        bind = db.get_bind() if isinstance(db, Session) else db
        if bind.dialect.name == "postgresql":
            value = server_now if server_now is not None else db.execute(
                _CLOCK_SELECT).scalar_one()
            assert isinstance(value, datetime)
            return value.astimezone(UTC)
        return self._host_clock()


_CLOCK_SELECT = select(func.clock_timestamp())


class ManualClock:
    """A clock that moves only when told to; for tests of expiry."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self, db: Db | None = None, server_now: datetime | None = None) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)
