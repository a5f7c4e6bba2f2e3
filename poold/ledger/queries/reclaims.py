"""Elastic leases: which to ask back, marking them asked, which are overdue, what a session owes.

Reads for the API first (ORM, session first), then the writer's statements (Core, built once,
connection first): asks run for a grant waiting for room, revocations in the reaper's tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import ACTIVE, LEASES, SELECT_LEASE
from poold.ledger.queries.hot import HotStatement
from poold.ledger.views import LeaseRecord, ReclaimAsk
from poold.models import Lease
from poold.types import LeaseState

# --- ORM, the session first -----------------------------------------------------------------


def asks_by_session(session: Session, session_ids: Sequence[str]) -> dict[str, list[ReclaimAsk]]:
    """Session id -> its live leases asked back, soonest deadline first (one query)."""
    found: dict[str, list[ReclaimAsk]] = {s: [] for s in session_ids}
    if session_ids:
        rows = session.execute(
            select(Lease.session_id, Lease.id, Lease.length, Lease.reclaim_by)
            .where(Lease.session_id.in_(list(session_ids)), Lease.state == ACTIVE,
                   Lease.reclaim_by.is_not(None))
            .order_by(Lease.reclaim_by, Lease.id))
        for session_id, lease_id, length, by in rows:
            assert by is not None  # the WHERE clause
            found[str(session_id)].append(ReclaimAsk(lease_id, length, by))
    return found


# --- the writer's hot path: Core, built once at import ---------------------------------------


# Bytes on their way back: leases asked back and still held, and ended leases being zeroed.
_PENDING = SELECT_LEASE.where(
    LEASES.c.pool_id == bindparam("pool_id"),
    or_(and_(LEASES.c.state == ACTIVE, LEASES.c.expires_at > bindparam("now"),
             LEASES.c.reclaim_by.is_not(None)),
        LEASES.c.state == LeaseState.SCRUBBING.value))
_ASKABLE = SELECT_LEASE.where(
    LEASES.c.pool_id == bindparam("pool_id"), LEASES.c.elastic.is_(True),
    LEASES.c.state == ACTIVE, LEASES.c.expires_at > bindparam("now"),
    LEASES.c.reclaim_by.is_(None))
_ASK = (
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == ACTIVE,
           LEASES.c.elastic.is_(True), LEASES.c.reclaim_by.is_(None))
    .values(reclaim_by=bindparam("by"))
)
_OVERDUE = (
    SELECT_LEASE
    .where(LEASES.c.host_id == bindparam("host_id"), LEASES.c.state == ACTIVE,
           LEASES.c.reclaim_by <= bindparam("now"))
    .order_by(LEASES.c.reclaim_by)
    .limit(bindparam("limit"))
)
_ASKED_IN_SESSION = HotStatement(
    select(LEASES.c.id, LEASES.c.length, LEASES.c.reclaim_by)
    .where(LEASES.c.session_id == bindparam("session_id"), LEASES.c.state == ACTIVE,
           LEASES.c.reclaim_by.is_not(None))
    .order_by(LEASES.c.reclaim_by, LEASES.c.id)
)
_REPORT_USE = HotStatement(
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.session_id == bindparam("sid"),
           LEASES.c.state == ACTIVE)
    .values(used_at=bindparam("at"))
)


def pending(conn: Connection, pool_id: int, now: datetime) -> list[LeaseRecord]:
    """Leases of the pool whose bytes are on their way back (asked back, or being zeroed)."""
    return [LeaseRecord(*row) for row in conn.execute(_PENDING, {"pool_id": pool_id, "now": now})]


def askable(conn: Connection, pool_id: int, now: datetime) -> list[LeaseRecord]:
    """Live elastic leases of the pool not asked yet, in no order (the caller ranks them)."""
    return [LeaseRecord(*row) for row in conn.execute(_ASKABLE, {"pool_id": pool_id, "now": now})]


def ask(conn: Connection, lease_id: str, by: datetime) -> bool:
    """Mark a live elastic lease asked back, to be given back by `by`; False if it was not
    (ended, or asked already, meanwhile)."""
    return conn.execute(_ASK, {"lease_id": lease_id, "by": by}).rowcount == 1


def overdue(conn: Connection, host_id: str, now: datetime, limit: int) -> list[LeaseRecord]:
    """This host's live leases asked back whose deadline passed."""
    rows = conn.execute(_OVERDUE, {"host_id": host_id, "now": now, "limit": limit})
    return [LeaseRecord(*row) for row in rows]


def asked_in_session(conn: Connection, session_id: str) -> list[ReclaimAsk]:
    """The session's live leases asked back, soonest deadline first."""
    return [ReclaimAsk(row[0], row[1], row[2])
            for row in _ASKED_IN_SESSION.rows(conn, {"session_id": session_id})]


def report_use(conn: Connection, session_id: str, used: dict[str, datetime]) -> None:
    """When the holder last used each of its leases (those of other sessions are ignored)."""
    _REPORT_USE.many(conn, [{"lease_id": lease_id, "sid": session_id, "at": at}
                            for lease_id, at in used.items()])
