"""Client sessions: opening, renewing with every lease in them, ending, expiring; reading them.

A session's leases carry its expiry: renewing the session sets `expires_at` of all its active,
still valid leases in one statement, so the reaper, the computed `expired` state and every read
of a lease stay as they are for plain leases.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import ACTIVE, LEASES, SESSIONS
from poold.ledger.queries.hot import HotStatement
from poold.ledger.views import SESSION_COLUMNS, SessionRecord
from poold.models import ClientSession, Lease
from poold.types import SessionState

# --- ORM, the session first -----------------------------------------------------------------


def list_sessions(session: Session, *, tenant: str | None, host_id: str | None,
                  state: SessionState | None, now: datetime, limit: int
                  ) -> Sequence[ClientSession]:
    query = select(ClientSession).order_by(ClientSession.opened_at.desc(),
                                           ClientSession.id).limit(limit)
    if tenant is not None:
        query = query.where(ClientSession.tenant == tenant)
    if host_id is not None:
        query = query.where(ClientSession.host_id == host_id)
    if state is SessionState.ACTIVE:
        query = query.where(ClientSession.state == SessionState.ACTIVE,
                            ClientSession.expires_at > now)
    elif state is SessionState.EXPIRED:
        query = query.where((ClientSession.state == SessionState.EXPIRED)
                            | ((ClientSession.state == SessionState.ACTIVE)
                               & (ClientSession.expires_at <= now)))
    elif state is not None:
        query = query.where(ClientSession.state == state)
    return session.scalars(query).all()


def get_session(session: Session, session_id: str) -> ClientSession | None:
    return session.get(ClientSession, session_id)


def sessions_by_id(session: Session, session_ids: Sequence[str]) -> Sequence[ClientSession]:
    found: list[ClientSession] = []
    for at in range(0, len(session_ids), 500):
        found += session.scalars(select(ClientSession).where(
            ClientSession.id.in_(list(session_ids[at:at + 500])))).all()
    return found


def live_lease_ids(session: Session, session_ids: Sequence[str], now: datetime
                   ) -> dict[str, list[str]]:
    """Session id -> the ids of its active, unexpired leases (one query for all of them)."""
    found: dict[str, list[str]] = {s: [] for s in session_ids}
    if session_ids:
        rows = session.execute(
            select(Lease.session_id, Lease.id)
            .where(Lease.session_id.in_(list(session_ids)), Lease.state == ACTIVE,
                   Lease.expires_at > now)
            .order_by(Lease.granted_at, Lease.id))
        for session_id, lease_id in rows:
            found[str(session_id)].append(lease_id)
    return found


# --- the writer's hot path: Core, built once at import ---------------------------------------

_SELECT_SESSION = select(*(SESSIONS.c[name] for name in SESSION_COLUMNS))
_SESSION_BY_ID = HotStatement(_SELECT_SESSION.where(SESSIONS.c.id == bindparam("sid")))
_INSERT_SESSION = HotStatement(insert(SESSIONS))
_RENEW_SESSION = HotStatement(
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"), SESSIONS.c.state == ACTIVE,
           SESSIONS.c.expires_at > bindparam("now"))
    .values(expires_at=bindparam("new_expires_at"))
)
_RENEW_SESSION_LEASES = HotStatement(
    update(LEASES)
    .where(LEASES.c.session_id == bindparam("sid"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at > bindparam("now"))
    .values(expires_at=bindparam("new_expires_at"), ttl_s=bindparam("new_ttl_s"))
    .returning(LEASES.c.id)
)
_END_SESSION = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"), SESSIONS.c.state == ACTIVE)
    .values(state=bindparam("new_state"), ended_at=bindparam("now"))
)
_ACTIVE_LEASES_OF = (
    select(LEASES.c.id).where(LEASES.c.session_id == bindparam("sid"),
                              LEASES.c.state == ACTIVE)
    .order_by(LEASES.c.granted_at, LEASES.c.id)
)
_EXPIRED_SESSIONS = (
    _SELECT_SESSION
    .where(SESSIONS.c.host_id == bindparam("host_id"), SESSIONS.c.state == ACTIVE,
           SESSIONS.c.expires_at <= bindparam("now"))
    .order_by(SESSIONS.c.expires_at)
    .limit(bindparam("limit"))
)
# Two statements, not coalesce(tenant, ''): a plain comparison is what the (tenant, state) index
# answers, so opening a session reads the tenant's live sessions, not every session.
_LIVE_SESSIONS = (
    select(func.count()).select_from(SESSIONS)
    .where(SESSIONS.c.state == ACTIVE, SESSIONS.c.expires_at > bindparam("now"))
)
_LIVE_SESSIONS_OF_TENANT = _LIVE_SESSIONS.where(SESSIONS.c.tenant == bindparam("tenant"))
_LIVE_SESSIONS_OF_NO_TENANT = _LIVE_SESSIONS.where(SESSIONS.c.tenant.is_(None))


def session_record(conn: Connection, session_id: str) -> SessionRecord | None:
    rows = _SESSION_BY_ID.rows(conn, {"sid": session_id})
    return SessionRecord(*rows[0]) if rows else None


def insert_session(conn: Connection, record: SessionRecord) -> None:
    _INSERT_SESSION.rowcount(conn, record.values())


def renew_session(conn: Connection, session_id: str, now: datetime, expires_at: datetime,
                  ttl_s: int) -> list[str] | None:
    """Extend a session still valid at `now` and every valid lease in it; the ids of those
    leases, or None (nothing written) when the session is not valid."""
    params = {"sid": session_id, "now": now, "new_expires_at": expires_at}
    if _RENEW_SESSION.rowcount(conn, params) != 1:
        return None
    rows = _RENEW_SESSION_LEASES.rows(conn, {**params, "new_ttl_s": ttl_s})
    return sorted(lease_id for lease_id, in rows)


def end_session(conn: Connection, session_id: str, state: SessionState, now: datetime) -> int:
    return conn.execute(_END_SESSION, {"sid": session_id, "new_state": state.value,
                                       "now": now}).rowcount


def active_lease_ids(conn: Connection, session_id: str) -> list[str]:
    """Its leases still `active` in the ledger (valid or past expiry, not yet reaped)."""
    return [i for i, in conn.execute(_ACTIVE_LEASES_OF, {"sid": session_id})]


def expired_sessions(conn: Connection, host_id: str, now: datetime, limit: int
                     ) -> list[SessionRecord]:
    rows = conn.execute(_EXPIRED_SESSIONS, {"host_id": host_id, "now": now, "limit": limit})
    return [SessionRecord(*row) for row in rows]


def live_sessions_of(conn: Connection, tenant: str | None, now: datetime) -> int:
    """Valid sessions of the tenant (None: of no tenant)."""
    if tenant is None:
        return int(conn.execute(_LIVE_SESSIONS_OF_NO_TENANT, {"now": now}).scalar_one())
    return int(conn.execute(_LIVE_SESSIONS_OF_TENANT,
                            {"tenant": tenant, "now": now}).scalar_one())
