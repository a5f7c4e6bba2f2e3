"""Elastic leases given back on request: asking their holders, and revoking what is overdue.

An elastic lease is a cache: its holder can drop its coldest blocks and give the lease back. A
grant that finds no room in a pool (and may wait for it) asks holders of elastic leases there to
give back enough bytes, coldest first: by when each holder last reported using the lease, or,
where it reported nothing, by its last renewal (its grant, if never renewed), each by a deadline
`grace_s` away; the holder hears of it in
its session's keepalive answer or on the session's reclaim feed and releases. The reaper revokes
what is still held past its deadline (scrubbed as any revoked lease before anyone else gets it).
Stateless functions run by the ledger writer inside its transaction, as poold.ledger.leases.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from poold.ledger import leases
from poold.ledger import queries as q
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseRecord
from poold.types import EventKind

REAP_BATCH = 500
# The actor of a revocation for not giving back in time: the metrics' reason "elastic".
RECLAIMER = "reclaimer"


@dataclass(frozen=True, slots=True)
class Asked:
    """What asking did: bytes asked now, and bytes already on their way back (asked before and
    still held, or being zeroed)."""

    asked_bytes: int
    pending_bytes: int


def ask(tx: Tx, pool_name: str | None, size: int, actor: str, grace_s: float,
        session_id: str | None = None) -> Asked:
    """Ask holders of elastic leases in the pool for `size` bytes, minus what is on its way back
    already (asked before and still held, or ended and being zeroed), coldest leases first.
    `session_id`: the asking grant's session, whose own leases are never asked (its holder is
    the one waiting: it would give back to itself)."""
    pool = leases.pool_named(tx, pool_name)
    pending = sum(lease.length for lease in q.reclaims.pending(tx.conn, pool.id, tx.now))
    need, asked = size - pending, 0
    if need <= 0:
        return Asked(0, pending)
    by = tx.now + timedelta(seconds=grace_s)
    others = [lease for lease in q.reclaims.askable(tx.conn, pool.id, tx.now)
              if session_id is None or lease.session_id != session_id]
    coldest = sorted(others, key=lambda lease: (_last_used(lease), lease.id))
    for lease in coldest:
        if asked >= need:
            break
        if q.reclaims.ask(tx.conn, lease.id, by):
            asked += lease.length
            tx.event(EventKind.LEASE_RECLAIM_ASKED, actor, host_id=lease.host_id,
                     device_id=lease.device_id, lease_id=lease.id, length=lease.length,
                     by=by.isoformat(), session=lease.session_id, for_bytes=size)
    return Asked(asked, pending)


def _last_used(lease: LeaseRecord) -> datetime:
    """The holder's report, else the lease's last renewal (a TTL before its expiry)."""
    return lease.used_at or lease.expires_at - timedelta(seconds=lease.ttl_s)


def revoke_overdue(tx: Tx, limit: int = REAP_BATCH) -> int:
    """Revoke this host's leases asked back and still held past their deadline."""
    overdue = q.reclaims.overdue(tx.conn, tx.host_id, tx.now, limit)
    for lease in overdue:
        leases.revoke(tx, lease.id, RECLAIMER)
    return len(overdue)


def asked_bytes_of(tx: Tx, session_id: str) -> int:
    """Bytes of the session's live leases asked back and not given back yet: what closing it
    now gives back."""
    return sum(ask.length for ask in q.reclaims.asked_in_session(tx.conn, session_id))


def report_use(tx: Tx, session_id: str, idle_s: dict[str, float]) -> None:
    """The holder's word on how long each lease of its session has gone unused."""
    used = {lease_id: tx.now - timedelta(seconds=max(0.0, idle)) for lease_id, idle in
            idle_s.items()}
    q.reclaims.report_use(tx.conn, session_id, used)
