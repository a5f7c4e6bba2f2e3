"""Leases: reading them, and their changes on the writer's hot path: grant, keepalive, release,
revoke, expiry, loss, and what sharing a device with other hosts does to them.

Leaves zeroing an ended lease's bytes to `scrubs`, its fencing token to `counters`, the claim it
lies in to `claims`, a tenant's totals to `tenants`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Connection,
    CursorResult,
    String,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import (
    ACTIVE,
    ENDED,
    HOLDING,
    LEASES,
    SELECT_LEASE,
    SHARED_DEVICE_IDS,
)
from poold.ledger.queries.counters import GENERATION_SEQUENCE, next_generation
from poold.ledger.queries.hot import HotStatement
from poold.ledger.views import LEASE_COLUMNS, LeaseRecord
from poold.models import Lease
from poold.types import HOLDING_STATES, Extent, LeaseState

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def get_lease(session: Session, lease_id: str) -> Lease | None:
    return session.get(Lease, lease_id)


def live_leases(session: Session, *, host_id: str | None = None) -> Sequence[Lease]:
    """Leases that hold their extent: active, and scrubbing ones."""
    query = select(Lease).where(Lease.state.in_(HOLDING_STATES))
    if host_id is not None:
        query = query.where(Lease.host_id == host_id)
    return session.scalars(query.order_by(Lease.device_id, Lease.offset)).all()


def holding_among(session: Session, lease_ids: Collection[str], now: datetime) -> set[str]:
    """Which of these leases hold their extent at `now`: scrubbing, or active and not yet past
    their expiry (what their computed state says). One query per 500 ids, not one per lease."""
    ids, held = list(lease_ids), set[str]()
    for at in range(0, len(ids), 500):
        query = select(Lease.id).where(
            Lease.id.in_(ids[at:at + 500]), Lease.state.in_(HOLDING_STATES),
            (Lease.state != LeaseState.ACTIVE) | (Lease.expires_at > now))
        held.update(session.scalars(query))
    return held


def list_leases(
    session: Session, *, state: LeaseState | None, pool_id: int | None, now: datetime,
    limit: int, tenant: str | None = None, host_id: str | None = None,
) -> Sequence[Lease]:
    query = select(Lease).order_by(Lease.granted_at.desc(), Lease.id).limit(limit)
    if pool_id is not None:
        query = query.where(Lease.pool_id == pool_id)
    if tenant is not None:
        query = query.where(Lease.tenant == tenant)
    if host_id is not None:
        query = query.where(Lease.host_id == host_id)
    if state is LeaseState.ACTIVE:
        query = query.where(Lease.state == LeaseState.ACTIVE, Lease.expires_at > now)
    elif state is LeaseState.EXPIRED:
        query = query.where(
            (Lease.state == LeaseState.EXPIRED)
            | ((Lease.state == LeaseState.ACTIVE) & (Lease.expires_at <= now))
        )
    elif state is not None:
        query = query.where(Lease.state == state)
    return session.scalars(query).all()


def all_leases(session: Session) -> Sequence[Lease]:
    return session.scalars(select(Lease).order_by(Lease.device_id, Lease.offset)).all()


def live_leases_on_device(session: Session, device_id: int) -> Sequence[Lease]:
    """Leases that hold an extent of the device: active, and scrubbing ones."""
    return session.scalars(
        select(Lease).where(Lease.device_id == device_id, Lease.state.in_(HOLDING_STATES))
    ).all()


def holding_leases_on_device(session: Session, device_id: int) -> Sequence[Lease]:
    """Leases whose bytes on the device are not free yet: live, or ended but not yet final."""
    return session.scalars(
        select(Lease).where(Lease.device_id == device_id, Lease.state.not_in(ENDED))
    ).all()


def lose_lease(session: Session, lease_id: str, now: datetime) -> int:
    """The memory under an active lease is gone (device vanished or changed mode): 0 rows when
    the lease had already ended."""
    result = session.execute(
        update(Lease)
        .where(Lease.id == lease_id, Lease.state.in_(HOLDING_STATES))
        .values(state=LeaseState.LOST, ended_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


# --- the writer's hot path: Core, built once at import (building costs more than running) ----


_LEASE_BY_ID = HotStatement(SELECT_LEASE.where(LEASES.c.id == bindparam("lease_id")))
# The '' is written into the SQL, not bound: SQLite uses the unique index on (host_id,
# coalesce(tenant, ''), idempotency_key) only for that exact expression (a bound '' is another
# expression to it), and otherwise reads every lease the host ever held.
_NO_TENANT = literal_column("''", type_=String)
_LEASE_BY_KEY = HotStatement(SELECT_LEASE.where(
    LEASES.c.host_id == bindparam("host_id"), LEASES.c.idempotency_key == bindparam("key"),
    func.coalesce(LEASES.c.tenant, _NO_TENANT)
    == func.coalesce(bindparam("tenant", type_=String), _NO_TENANT)))
_EXPIRED_LEASES = (
    SELECT_LEASE
    .where(LEASES.c.host_id == bindparam("host_id"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at <= bindparam("now"))
    .order_by(LEASES.c.expires_at)
    .limit(bindparam("limit"))
)
_INSERT_LEASE = HotStatement(insert(LEASES))
_INSERT_LEASE_DRAWING_GENERATION = HotStatement(
    insert(LEASES).values(generation=func.nextval(GENERATION_SEQUENCE))
    .returning(LEASES.c.generation)
)
_RENEW_LEASE = HotStatement(
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at > bindparam("now"))
    .values(expires_at=bindparam("new_expires_at"), ttl_s=bindparam("new_ttl_s"))
)
_EXPIRE_LEASE = HotStatement(
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at <= bindparam("now"))
    .values(state=LeaseState.EXPIRED.value, ended_at=bindparam("now"))
)
_END_OWN_LEASE = HotStatement(
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.host_id == bindparam("owner"),
           LEASES.c.state == ACTIVE, LEASES.c.expires_at > bindparam("now"))
    .values(state=bindparam("new_state"), ended_at=bindparam("now"))
    .returning(*(LEASES.c[name] for name in LEASE_COLUMNS))
)

# Sharing devices between hosts (poold.ledger.sharing; its locks are described in `claims`).
_HOLDING_IN_RANGE = (
    select(LEASES.c.id, LEASES.c.claim_id, LEASES.c.offset, LEASES.c.length)
    .where(LEASES.c.device_id == bindparam("device_id"), LEASES.c.state.in_(HOLDING),
           LEASES.c.offset < bindparam("end"),
           LEASES.c.offset + LEASES.c.length > bindparam("start"))
    .order_by(LEASES.c.offset)
)
_LOCK_HOLDING_IN_RANGE = _HOLDING_IN_RANGE.with_for_update(skip_locked=True)
_REPOINT_LEASE = (
    update(LEASES).where(LEASES.c.id == bindparam("lease_id"))
    .values(claim_id=bindparam("new_claim_id"))
)
_EXPIRED_ON_DEVICE = (
    SELECT_LEASE
    .where(LEASES.c.device_id == bindparam("device_id"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at <= bindparam("now"))
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)  # one its owner is changing now is left to the owner
)
# Idempotency keys are per host: an adopted lease gives its key up rather than collide. Only on
# shared devices, as claims (q.claims._ADOPT_CLAIMS says why).
_ADOPT_LEASES = (
    update(LEASES)
    .where(LEASES.c.host_id == bindparam("from_host"), LEASES.c.state.in_(HOLDING),
           LEASES.c.device_id.in_(SHARED_DEVICE_IDS))
    .values(host_id=bindparam("to_host"), idempotency_key=None)
    .returning(*(LEASES.c[name] for name in LEASE_COLUMNS))
)
_LOSE_ACTIVE_LEASE = (
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == ACTIVE)
    .values(state=LeaseState.LOST.value, ended_at=bindparam("now"))
)
_OWN_ACTIVE_LEASES = SELECT_LEASE.where(LEASES.c.host_id == bindparam("host_id"),
                                         LEASES.c.state == ACTIVE)


def lease_record(conn: Connection, lease_id: str) -> LeaseRecord | None:
    rows = _LEASE_BY_ID.rows(conn, {"lease_id": lease_id})
    return LeaseRecord(*rows[0]) if rows else None


def lease_record_by_key(conn: Connection, host_id: str, tenant: str | None, key: str
                        ) -> LeaseRecord | None:
    """The lease granted with this idempotency key on this host for this tenant (None: for
    admins and agents leasing for no tenant)."""
    rows = _LEASE_BY_KEY.rows(conn, {"host_id": host_id, "tenant": tenant, "key": key})
    return LeaseRecord(*rows[0]) if rows else None


def expired_leases(conn: Connection, host_id: str, now: datetime, limit: int
                   ) -> list[LeaseRecord]:
    rows = conn.execute(_EXPIRED_LEASES, {"host_id": host_id, "now": now, "limit": limit})
    return [LeaseRecord(*row) for row in rows]


def insert_granted_lease(conn: Connection, lease: LeaseRecord) -> LeaseRecord:
    """Insert a lease just granted, its generation the next fencing token (whatever
    `lease.generation` says); the lease as stored."""
    values = lease.values()
    if conn.dialect.name == "postgresql":  # drawn from the sequence in the insert: one round trip
        del values["generation"]
        ((generation,),) = _INSERT_LEASE_DRAWING_GENERATION.rows(conn, values)
    else:
        values["generation"] = generation = next_generation(conn)
        _INSERT_LEASE.rowcount(conn, values)
    return replace(lease, generation=int(generation))


def renew_lease(conn: Connection, lease_id: str, now: datetime, expires_at: datetime,
                ttl_s: int) -> int:
    """Extend a lease that is still valid at `now`; 0 rows when it is not."""
    return _RENEW_LEASE.rowcount(conn, {"lease_id": lease_id, "now": now,
                                        "new_expires_at": expires_at, "new_ttl_s": ttl_s})


def expire_lease(conn: Connection, lease_id: str, now: datetime) -> int:
    """Finalise an active lease as expired, only if it is past expires_at by the ledger clock
    (`now`) in the same statement; 0 rows otherwise."""
    return _EXPIRE_LEASE.rowcount(conn, {"lease_id": lease_id, "now": now})


def end_own_lease(conn: Connection, lease_id: str, host_id: str, state: LeaseState,
                  now: datetime) -> LeaseRecord | None:
    """Release or revoke in one statement: end the lease if it is `host_id`'s, active and still
    valid at `now`, and return it as it ended; None, having written nothing, otherwise."""
    rows = _END_OWN_LEASE.rows(conn, {"lease_id": lease_id, "owner": host_id, "now": now,
                                      "new_state": state.value})
    return LeaseRecord(*rows[0]) if rows else None


def holding_in_range(conn: Connection, device_id: int, extent: Extent
                     ) -> list[tuple[str, int, Extent]] | None:
    """(id, claim_id, extent) of the leases holding bytes that overlap `extent` on the device,
    whichever claim they name (a misfiled lease still holds its bytes), locked FOR UPDATE; None
    when another transaction is changing one of them (then leave the range alone)."""
    params = {"device_id": device_id, "start": extent.offset, "end": extent.end}
    everything = conn.execute(_HOLDING_IN_RANGE, params).all()
    locked = conn.execute(_LOCK_HOLDING_IN_RANGE, params).all()
    if len(locked) != len(everything):
        return None
    return [(str(i), int(c), Extent(int(o), int(n))) for i, c, o, n in locked]


def repoint_leases(conn: Connection, lease_ids: list[str], claim_id: int) -> None:
    if lease_ids:
        conn.execute(_REPOINT_LEASE, [{"lease_id": i, "new_claim_id": claim_id}
                                      for i in lease_ids])


def expired_on_device(conn: Connection, device_id: int, now: datetime, limit: int
                      ) -> list[LeaseRecord]:
    """Any host's active leases on the device past expires_at by the ledger clock."""
    rows = conn.execute(_EXPIRED_ON_DEVICE, {"device_id": device_id, "now": now, "limit": limit})
    return [LeaseRecord(*row) for row in rows]


def adopt_leases(conn: Connection, from_host: str, to_host: str) -> list[LeaseRecord]:
    rows = conn.execute(_ADOPT_LEASES, {"from_host": from_host, "to_host": to_host})
    return [LeaseRecord(*row) for row in rows]


def lose_active_lease(conn: Connection, lease_id: str, now: datetime) -> int:
    return conn.execute(_LOSE_ACTIVE_LEASE, {"lease_id": lease_id, "now": now}).rowcount


def own_active_leases(conn: Connection, host_id: str) -> list[LeaseRecord]:
    return [LeaseRecord(*row) for row in conn.execute(_OWN_ACTIVE_LEASES, {"host_id": host_id})]
