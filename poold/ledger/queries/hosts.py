"""Hosts: the hosts sharing the ledger, which of them are lost, and what one host holds.

Leaves the heartbeat (poold.ledger.registry changes the host's row as an ORM object) and adopting a
lost host's claims and leases (`claims`, `leases`) to others.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, func, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import CLAIMS, HOLDING, HOSTS, LEASES
from poold.models import Host
from poold.types import ClaimState, HostState

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def get_host(session: Session, host_id: str) -> Host | None:
    return session.get(Host, host_id)


def list_hosts(session: Session) -> Sequence[Host]:
    return session.scalars(select(Host).order_by(Host.id)).all()


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_LOSABLE_HOSTS = (
    select(HOSTS.c.id)
    .where(HOSTS.c.state == HostState.UP.value, HOSTS.c.last_seen_at < bindparam("cutoff"),
           HOSTS.c.id != bindparam("me"))
    .with_for_update(skip_locked=True)
)
_MARK_HOST_LOST = (
    update(HOSTS)
    .where(HOSTS.c.id == bindparam("host_id"), HOSTS.c.state == HostState.UP.value,
           HOSTS.c.last_seen_at < bindparam("cutoff"))
    .values(state=HostState.LOST.value)
)
_OWN_FINGERPRINT_CLAIMS = select(CLAIMS.c.id).where(
    CLAIMS.c.host_id == bindparam("host_id"), CLAIMS.c.state == ClaimState.ACTIVE.value)
_OWN_FINGERPRINT_LEASES = select(func.coalesce(func.sum(LEASES.c.length), 0)).where(
    LEASES.c.host_id == bindparam("host_id"), LEASES.c.state.in_(HOLDING))


def mark_lost_hosts(conn: Connection, cutoff: datetime, me: str) -> list[str]:
    """Hosts other than `me` last seen before `cutoff` (ledger clock) become lost; their ids.
    A host whose row another transaction holds (it is heartbeating now) is skipped."""
    found = [str(h) for h, in conn.execute(_LOSABLE_HOSTS, {"cutoff": cutoff, "me": me})]
    return [h for h in found
            if conn.execute(_MARK_HOST_LOST, {"host_id": h, "cutoff": cutoff}).rowcount]


def own_fingerprint(conn: Connection, host_id: str) -> tuple[frozenset[int], int]:
    """(ids of the host's live claims, bytes its holding leases hold): what its in-memory space
    must agree with, unless another host changed them."""
    claims = frozenset(int(i) for i, in conn.execute(_OWN_FINGERPRINT_CLAIMS,
                                                     {"host_id": host_id}))
    held = int(conn.execute(_OWN_FINGERPRINT_LEASES, {"host_id": host_id}).scalar_one())
    return claims, held
