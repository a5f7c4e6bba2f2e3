"""Retention: what the ledger forgets, so that it does not grow without end under churn.

Every grant and release leaves a lease row and its events (about 1.4 KB), every keepalive an
event (260 B). Once older than the retention age (by the ledger's clock), this host's ended
leases go with their events and idempotency keys (a key can be used again once its lease is
gone), renewals of any of its leases go, claims it ended that no remaining lease lies in go,
sessions it ended that no remaining lease names go, and the events of this host that name no
lease (devices, claims, hosts, tokens, sessions) go.

What stays is what `fsck` and the audit views need: every live or recent lease with its grant
event and the event of the state it ended in, every live claim. Each call deletes at most
`batch` rows of each kind, in the writer's transaction, so one pass never holds the ledger for
long; the daemon calls it until a pass finds less than a batch.

Owns its statements, as each module of poold.ledger.queries owns its object's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, bindparam, delete, exists, or_, select

from poold.ledger.tx import Tx
from poold.models import Claim, ClientSession, Event, Lease
from poold.types import ClaimState, EventKind, LeaseState, SessionState

PRUNE_BATCH = 1000
_ENDED = [s.value for s in (LeaseState.RELEASED, LeaseState.EXPIRED, LeaseState.REVOKED,
                            LeaseState.LOST)]

_OLD_LEASES = (
    select(Lease.id)
    .where(Lease.host_id == bindparam("host_id"), Lease.state.in_(_ENDED),
           Lease.ended_at < bindparam("before"))
    .order_by(Lease.ended_at)
    .limit(bindparam("batch"))
)
_EVENTS_OF = delete(Event).where(Event.lease_id.in_(bindparam("ids", expanding=True)))
_LEASES_OF = delete(Lease).where(Lease.id.in_(bindparam("ids", expanding=True)))
_OLD_EVENTS = delete(Event).where(Event.id.in_(
    select(Event.id)
    .where(Event.at < bindparam("before"),
           or_(Event.host_id == bindparam("host_id"), Event.host_id.is_(None)),
           or_(Event.lease_id.is_(None), Event.kind == EventKind.LEASE_RENEWED.value))
    .order_by(Event.id)
    .limit(bindparam("batch"))
    .scalar_subquery()
))
_OLD_CLAIMS = delete(Claim).where(Claim.id.in_(
    select(Claim.id)
    .where(Claim.host_id == bindparam("host_id"), Claim.state != ClaimState.ACTIVE.value,
           Claim.ended_at < bindparam("before"),
           ~exists().where(and_(Lease.claim_id == Claim.id)))
    .limit(bindparam("batch"))
    .scalar_subquery()
))


_OLD_SESSIONS = delete(ClientSession).where(ClientSession.id.in_(
    select(ClientSession.id)
    .where(ClientSession.host_id == bindparam("host_id"),
           ClientSession.state != SessionState.ACTIVE.value,
           ClientSession.ended_at < bindparam("before"),
           ~exists().where(and_(Lease.session_id == ClientSession.id)))
    .limit(bindparam("batch"))
    .scalar_subquery()
))


@dataclass(frozen=True, slots=True)
class Pruned:
    leases: int = 0
    events: int = 0
    claims: int = 0
    sessions: int = 0

    @property
    def total(self) -> int:
        return self.leases + self.events + self.claims + self.sessions

    @property
    def full(self) -> bool:
        """A whole batch of something: there may be more."""
        return max(self.leases, self.events, self.claims, self.sessions) >= PRUNE_BATCH

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(self.leases + other.leases, self.events + other.events,
                      self.claims + other.claims, self.sessions + other.sessions)


def prune(tx: Tx, retention_s: float, batch: int = PRUNE_BATCH) -> Pruned:
    """One bounded pass (see the module's docstring); returns how many rows of each it deleted."""
    before = tx.now - timedelta(seconds=retention_s)
    params = {"host_id": tx.host_id, "before": before, "batch": batch}
    ids = [lease_id for lease_id, in tx.conn.execute(_OLD_LEASES, params)]
    events = leases = 0
    if ids:
        events = tx.conn.execute(_EVENTS_OF, {"ids": ids}).rowcount
        leases = tx.conn.execute(_LEASES_OF, {"ids": ids}).rowcount
    events += tx.conn.execute(_OLD_EVENTS, params).rowcount
    claims = tx.conn.execute(_OLD_CLAIMS, params).rowcount
    sessions = tx.conn.execute(_OLD_SESSIONS, params).rowcount  # after the leases in them
    return Pruned(leases=leases, events=events, claims=claims, sessions=sessions)


