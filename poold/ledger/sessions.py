"""Client sessions: open, keep alive, close, revoke, expire.

A session is what etcd calls a lease: a TTL that many leases hang on. Leases granted under it
(poold.ledger.leases.grant with `session_id`) take its expiry, one keepalive of the session
renews all of them (leases.renew_session), and ending the session ends them: closing releases
them, revoking revokes them, expiry expires them (they expire at the same instant, so the lease
reaper finalises them as any other). Stateless functions run by the ledger writer in its
transaction, as poold.ledger.leases.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta

from poold.errors import HostFenced, InvalidRequest, QuotaExceeded, UnknownSession
from poold.ledger import leases, reclaims
from poold.ledger import queries as q
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView, SessionRecord, SessionView
from poold.types import EventKind, SessionState, is_lease_id, is_text

# Live sessions one tenant may hold (admins' and agents' share one count): a client opening
# sessions in a loop is refused with a clear error instead of filling the ledger.
MAX_LIVE_SESSIONS = 1024
MAX_SESSION_TTL_S = 86_400
REAP_BATCH = 500


@dataclass(frozen=True, slots=True)
class OpenRequest:
    actor: str
    ttl_s: int = 30
    tenant: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def open_session(tx: Tx, request: OpenRequest) -> SessionView:
    bad = next((t for t in (request.tenant, *request.labels, *request.labels.values())
                if t is not None and not is_text(t)), None)
    if bad is not None:
        raise InvalidRequest(f"control characters in {bad[:64]!r}")
    if not 0 < request.ttl_s <= MAX_SESSION_TTL_S:
        raise InvalidRequest(f"ttl_s must be between 1 and {MAX_SESSION_TTL_S}, "
                             f"got {request.ttl_s}")
    if tx.fenced:
        raise HostFenced(f"host {tx.host_id} lost the ledger for longer than its host_ttl: "
                         "it opens nothing until its heartbeat is back")
    live = q.sessions.live_sessions_of(tx.conn, request.tenant, tx.now)
    if live >= MAX_LIVE_SESSIONS:
        who = f"tenant {request.tenant!r}" if request.tenant else "the operators"
        raise QuotaExceeded(f"{who} hold(s) {live} live sessions, the most one may hold: "
                            "close some first")
    record = SessionRecord(
        id=uuid.uuid4().hex, host_id=tx.host_id, tenant=request.tenant, ttl_s=request.ttl_s,
        opened_at=tx.now, expires_at=tx.now + timedelta(seconds=request.ttl_s), ended_at=None,
        state=SessionState.ACTIVE.value, labels=dict(request.labels))
    q.sessions.insert_session(tx.conn, record)
    tx.event(EventKind.SESSION_OPENED, request.actor, host_id=tx.host_id, session=record.id,
             tenant=request.tenant, ttl_s=request.ttl_s)
    return SessionView.build(record, [], tx.now)


def keepalive(tx: Tx, session_id: str, actor: str, tenant_only: str | None = None,
              idle_s: dict[str, float] | None = None) -> SessionView:
    """Renew the session and every lease in it; the answer names the leases still live, so a
    holder learns in one round trip which of its leases ended (revoked, lost), and those the
    daemon asked back. `idle_s`: the holder's word on how long each lease went unused (the
    coldest elastic leases are asked back first)."""
    session = _session(tx, session_id, tenant_only)
    expires_at, renewed = leases.renew_session(tx, session, actor)
    if idle_s:
        reclaims.report_use(tx, session.id, idle_s)
    return SessionView.build(replace(session, expires_at=expires_at), renewed, tx.now,
                             q.reclaims.asked_in_session(tx.conn, session.id))


def close(tx: Tx, session_id: str, actor: str, tenant_only: str | None = None) -> SessionView:
    """The holder is done: its leases are released. Idempotent, as releasing a lease is."""
    session = _session(tx, session_id, tenant_only)
    return _end(tx, session, SessionState.CLOSED, EventKind.SESSION_CLOSED, actor,
                lambda lease_id: leases.release(tx, lease_id, actor))


def revoke(tx: Tx, session_id: str, actor: str) -> SessionView:
    """An administrator ends a session and its leases; the holder learns at keepalive."""
    session = _session(tx, session_id)
    return _end(tx, session, SessionState.REVOKED, EventKind.SESSION_REVOKED, actor,
                lambda lease_id: leases.revoke(tx, lease_id, actor))


def reap(tx: Tx, limit: int = REAP_BATCH) -> int:
    """Finalise this host's sessions past expires_at, with what leases.reap has not finalised
    of theirs yet (they expired at the same instant). Returns how many sessions."""
    expired = q.sessions.expired_sessions(tx.conn, tx.host_id, tx.now, limit)
    for session in expired:
        _finalise_expired(tx, session)
    return len(expired)


def _end(tx: Tx, session: SessionRecord, state: SessionState, kind: EventKind, actor: str,
         end_lease: Callable[[str], LeaseView]) -> SessionView:
    if session.state != SessionState.ACTIVE:
        return SessionView.build(session, [], tx.now)
    if session.host_id != tx.host_id:
        raise InvalidRequest(f"session {session.id} belongs to host {session.host_id}; "
                             "end it there")
    if session.expires_at <= tx.now:  # past its expiry: it ends as expired, as a lease would
        _finalise_expired(tx, session)
        state = SessionState.EXPIRED
    else:
        _end_with_leases(tx, session, state, kind, actor, end_lease)
    return SessionView.build(replace(session, state=state.value, ended_at=tx.now), [], tx.now)


def _finalise_expired(tx: Tx, session: SessionRecord) -> None:
    """Its leases share its expiry: releasing one past it finalises it as expired."""
    _end_with_leases(tx, session, SessionState.EXPIRED, EventKind.SESSION_EXPIRED, "reaper",
                     lambda lease_id: leases.release(tx, lease_id, "reaper"))


def _end_with_leases(tx: Tx, session: SessionRecord, state: SessionState, kind: EventKind,
                     actor: str, end_lease: Callable[[str], LeaseView]) -> None:
    """End the session if it is still active in the ledger, then each lease still active in
    it, and audit the session's end with how many leases it took along."""
    if not q.sessions.end_session(tx.conn, session.id, state, tx.now):
        return
    ended = q.sessions.active_lease_ids(tx.conn, session.id)
    for lease_id in ended:
        end_lease(lease_id)
    tx.event(kind, actor, host_id=session.host_id, session=session.id, leases=len(ended))


def _session(tx: Tx, session_id: str, tenant_only: str | None = None) -> SessionRecord:
    """`tenant_only`: the caller is that tenant; another tenant's session does not exist."""
    if not is_lease_id(session_id):
        raise UnknownSession(f"no session {session_id[:64]!r}")
    session = q.sessions.session_record(tx.conn, session_id)
    if session is None or (tenant_only is not None and session.tenant != tenant_only):
        raise UnknownSession(f"no session {session_id!r}")
    return session
