"""Events: the audit log (one row per change, appended, never updated) and the PostgreSQL
notifications other processes listen for.

Leaves pruning old events to poold.ledger.retention.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import EVENTS
from poold.ledger.queries.hot import HotStatement
from poold.models import Event
from poold.types import EventKind

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def add_event(session: Session, *, at: datetime, kind: EventKind, actor: str,
              host_id: str | None = None, device_id: int | None = None,
              lease_id: str | None = None, **details: Any) -> None:
    session.add(Event(at=at, kind=kind, actor=actor, host_id=host_id, device_id=device_id,
                      lease_id=lease_id, details=details))


def list_events(session: Session, *, limit: int, after_id: int | None, lease_id: str | None,
                kind: str | None) -> Sequence[Event]:
    query = select(Event).order_by(Event.id.desc()).limit(limit)
    if after_id is not None:
        query = query.where(Event.id > after_id)
    if lease_id is not None:
        query = query.where(Event.lease_id == lease_id)
    if kind is not None:
        query = query.where(Event.kind == kind)
    return session.scalars(query).all()


def events_for_leases(session: Session) -> dict[str, set[str]]:
    rows = session.execute(
        select(Event.lease_id, Event.kind).where(Event.lease_id.is_not(None))
    )
    kinds: dict[str, set[str]] = {}
    for lease_id, kind in rows:
        assert lease_id is not None
        kinds.setdefault(lease_id, set()).add(kind)
    return kinds


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_INSERT_EVENTS = HotStatement(insert(EVENTS))


def insert_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    """Append audit rows (keys: at, kind, actor, host_id, device_id, lease_id, details) in one
    executemany (every command writes some: on the driver's cursor)."""
    _INSERT_EVENTS.many(conn, events)


def notify(conn: Connection, channel: str, payload: str) -> None:
    """PostgreSQL NOTIFY: delivered to every listener when the transaction commits, never if it
    rolls back. SQLite has no listeners: nothing is sent."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_notify(channel, payload)))
