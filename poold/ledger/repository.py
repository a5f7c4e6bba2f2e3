"""All SQL of the ledger. Functions take the session first and never commit.

State transitions put their precondition in the WHERE clause and return the rowcount, so a
concurrent change (another host, the reaper) can never be overwritten by a stale read.

The writer's hot path (grant, keepalive, release, revoke, reap) is the exception to "session
first": those functions take the writer's Connection, run Core statements built once at import
and return plain records (poold.ledger.views), because building a statement and running the ORM's
unit of work cost several times more than the SQL itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Connection,
    CursorResult,
    String,
    Table,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from poold.ledger.views import LEASE_COLUMNS, DeviceRecord, LeaseRecord, PoolRecord
from poold.models import Claim, Counter, Device, Event, Host, Lease, Pool, Tenant
from poold.types import (
    HOLDING_STATES,
    ClaimState,
    DeviceState,
    EventKind,
    Extent,
    HostState,
    LeaseState,
)

# --- hosts, pools, devices ------------------------------------------------------------------


def get_host(session: Session, host_id: str) -> Host | None:
    return session.get(Host, host_id)


def list_hosts(session: Session) -> Sequence[Host]:
    return session.scalars(select(Host).order_by(Host.id)).all()


def get_pool_by_name(session: Session, name: str) -> Pool | None:
    return session.scalars(select(Pool).where(Pool.name == name)).one_or_none()


def list_pools(session: Session) -> Sequence[Pool]:
    return session.scalars(select(Pool).order_by(Pool.id)).all()


def pool_names(session: Session) -> dict[int, str]:
    return {pid: name for pid, name in session.execute(select(Pool.id, Pool.name))}


def get_device_by_uid(session: Session, uid: str) -> Device | None:
    return session.scalars(select(Device).where(Device.uid == uid)).one_or_none()


def list_devices(session: Session, pool_id: int | None = None) -> Sequence[Device]:
    query = select(Device).order_by(Device.id)
    if pool_id is not None:
        query = query.where(Device.pool_id == pool_id)
    return session.scalars(query).all()


def pools_by_id(session: Session) -> dict[int, Pool]:
    return {pool.id: pool for pool in session.scalars(select(Pool))}


def devices_by_id(session: Session) -> dict[int, Device]:
    return {device.id: device for device in list_devices(session)}


# --- claims ------------------------------------------------------------------------------------


def live_claims(session: Session, *, device_id: int | None = None, host_id: str | None = None
                ) -> Sequence[Claim]:
    query = select(Claim).where(Claim.state == ClaimState.ACTIVE).order_by(Claim.offset)
    if device_id is not None:
        query = query.where(Claim.device_id == device_id)
    if host_id is not None:
        query = query.where(Claim.host_id == host_id)
    return session.scalars(query).all()


def all_claims(session: Session) -> Sequence[Claim]:
    return session.scalars(select(Claim).order_by(Claim.device_id, Claim.offset)).all()


# --- leases ------------------------------------------------------------------------------------


def get_lease(session: Session, lease_id: str) -> Lease | None:
    return session.get(Lease, lease_id)


def live_leases(session: Session, *, host_id: str | None = None) -> Sequence[Lease]:
    """Leases that hold their extent: active, and scrubbing ones."""
    query = select(Lease).where(Lease.state.in_(HOLDING_STATES))
    if host_id is not None:
        query = query.where(Lease.host_id == host_id)
    return session.scalars(query.order_by(Lease.device_id, Lease.offset)).all()


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


# --- the writer's hot path: Core on the writer's connection ------------------------------------
# Each statement is built once with bind parameters: building one costs more than running it.

_POOLS, _DEVICES, _CLAIMS, _LEASES, _EVENTS, _COUNTERS = (
    cast(Table, model.__table__) for model in (Pool, Device, Claim, Lease, Event, Counter)
)
_ACTIVE = LeaseState.ACTIVE.value

_SELECT_POOLS = select(*(_POOLS.c[f.name] for f in fields(PoolRecord))).order_by(_POOLS.c.id)
_SELECT_DEVICES = select(*(_DEVICES.c[f.name] for f in fields(DeviceRecord)))
_ALL_DEVICES = _SELECT_DEVICES.order_by(_DEVICES.c.id)
# FOR NO KEY UPDATE: claimers queue on the device row, while grants (whose lease and claim rows
# reference it, so take FOR KEY SHARE on it) never wait for a claimer.
_LOCK_DEVICE = (_SELECT_DEVICES.where(_DEVICES.c.id == bindparam("device_id"))
                .with_for_update(key_share=True))
_CLAIM_EXTENTS = (
    select(_CLAIMS.c.offset, _CLAIMS.c.length)
    .where(_CLAIMS.c.device_id == bindparam("device_id"),
           _CLAIMS.c.state == ClaimState.ACTIVE.value)
    .order_by(_CLAIMS.c.offset)
)
_INSERT_CLAIM = insert(_CLAIMS).returning(_CLAIMS.c.id)
_SELECT_LEASE = select(*(_LEASES.c[name] for name in LEASE_COLUMNS))
_LEASE_BY_ID = _SELECT_LEASE.where(_LEASES.c.id == bindparam("lease_id"))
_LEASE_BY_KEY = _SELECT_LEASE.where(
    _LEASES.c.host_id == bindparam("host_id"), _LEASES.c.idempotency_key == bindparam("key"),
    func.coalesce(_LEASES.c.tenant, "") == func.coalesce(bindparam("tenant", type_=String), ""))
_EXPIRED_LEASES = (
    _SELECT_LEASE
    .where(_LEASES.c.host_id == bindparam("host_id"), _LEASES.c.state == _ACTIVE,
           _LEASES.c.expires_at <= bindparam("now"))
    .order_by(_LEASES.c.expires_at)
    .limit(bindparam("limit"))
)
_INSERT_LEASE = insert(_LEASES)
_RENEW_LEASE = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == _ACTIVE,
           _LEASES.c.expires_at > bindparam("now"))
    .values(expires_at=bindparam("new_expires_at"), ttl_s=bindparam("new_ttl_s"))
)
_EXPIRE_LEASE = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == _ACTIVE,
           _LEASES.c.expires_at <= bindparam("now"))
    .values(state=LeaseState.EXPIRED.value, ended_at=bindparam("now"))
)
_END_OWN_LEASE = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.host_id == bindparam("owner"),
           _LEASES.c.state == _ACTIVE, _LEASES.c.expires_at > bindparam("now"))
    .values(state=bindparam("new_state"), ended_at=bindparam("now"))
    .returning(*(_LEASES.c[name] for name in LEASE_COLUMNS))
)
_SCRUBBING = LeaseState.SCRUBBING.value
_START_SCRUB = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == bindparam("ended_as"))
    .values(state=_SCRUBBING, ended_as=bindparam("ended_as"), scrubbed_bytes=0)
)
_SCRUB_PROGRESS = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == _SCRUBBING)
    .values(scrubbed_bytes=bindparam("done"))
)
_FINISH_SCRUB = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == _SCRUBBING)
    .values(state=_LEASES.c.ended_as, scrubbed_bytes=_LEASES.c.length)
    .returning(*(_LEASES.c[name] for name in LEASE_COLUMNS))
)
_NEXT_GENERATIONS = (
    update(_COUNTERS)
    .where(_COUNTERS.c.name == "generation")
    .values(value=_COUNTERS.c.value + bindparam("count"))
    .returning(_COUNTERS.c.value)
)
_INSERT_EVENTS = insert(_EVENTS)


def catalog(conn: Connection) -> tuple[list[PoolRecord], list[DeviceRecord]]:
    """Every pool and device, for the writer's cached snapshot."""
    pools = [PoolRecord(*row) for row in conn.execute(_SELECT_POOLS)]
    return pools, [DeviceRecord(*row) for row in conn.execute(_ALL_DEVICES)]


_BIND_DEVICE = (update(_DEVICES)
                .where(_DEVICES.c.id == bindparam("device_id"),
                       or_(_DEVICES.c.tenant_scope.is_(None),
                           _DEVICES.c.tenant_scope == bindparam("scope")))
                .values(tenant_scope=bindparam("scope")))


def bind_device(conn: Connection, device_id: int, scope: str) -> bool:
    """The device serves `scope`'s leases from now on, unless it already serves another's."""
    return conn.execute(_BIND_DEVICE, {"device_id": device_id, "scope": scope}).rowcount == 1


def lock_device(conn: Connection, device_id: int) -> DeviceRecord:
    """Serialise claim changes on one device across hosts (FOR UPDATE; a no-op on SQLite, whose
    writer already holds the database lock). Returns the device as it is now."""
    return DeviceRecord(*conn.execute(_LOCK_DEVICE, {"device_id": device_id}).one())


def live_claim_extents(conn: Connection, device_id: int) -> list[Extent]:
    """Every host's live claims on the device."""
    rows = conn.execute(_CLAIM_EXTENTS, {"device_id": device_id})
    return [Extent(offset, length) for offset, length in rows]


def insert_claim(conn: Connection, *, device_id: int, host_id: str, extent: Extent,
                 now: datetime) -> int:
    return int(conn.execute(_INSERT_CLAIM, {
        "device_id": device_id, "host_id": host_id, "offset": extent.offset,
        "length": extent.length, "state": ClaimState.ACTIVE.value, "created_at": now,
        "ended_at": None,
    }).scalar_one())


def lease_record(conn: Connection, lease_id: str) -> LeaseRecord | None:
    row = conn.execute(_LEASE_BY_ID, {"lease_id": lease_id}).one_or_none()
    return None if row is None else LeaseRecord(*row)


def lease_record_by_key(conn: Connection, host_id: str, tenant: str | None, key: str
                        ) -> LeaseRecord | None:
    """The lease granted with this idempotency key on this host for this tenant (None: for
    admins and agents leasing for no tenant)."""
    row = conn.execute(_LEASE_BY_KEY, {"host_id": host_id, "tenant": tenant,
                                       "key": key}).one_or_none()
    return None if row is None else LeaseRecord(*row)


def expired_leases(conn: Connection, host_id: str, now: datetime, limit: int
                   ) -> list[LeaseRecord]:
    rows = conn.execute(_EXPIRED_LEASES, {"host_id": host_id, "now": now, "limit": limit})
    return [LeaseRecord(*row) for row in rows]


def insert_lease(conn: Connection, lease: LeaseRecord) -> None:
    conn.execute(_INSERT_LEASE, lease.values())


def renew_lease(conn: Connection, lease_id: str, now: datetime, expires_at: datetime,
                ttl_s: int) -> int:
    """Extend a lease that is still valid at `now`; 0 rows when it is not."""
    return conn.execute(_RENEW_LEASE, {"lease_id": lease_id, "now": now,
                                       "new_expires_at": expires_at, "new_ttl_s": ttl_s}).rowcount


def expire_lease(conn: Connection, lease_id: str, now: datetime) -> int:
    """Finalise an active lease as expired, only if it is past expires_at by the ledger clock
    (`now`) in the same statement; 0 rows otherwise."""
    return conn.execute(_EXPIRE_LEASE, {"lease_id": lease_id, "now": now}).rowcount


def start_scrub(conn: Connection, lease_id: str, ended_as: LeaseState) -> int:
    """A lease just ended as `ended_as` keeps its extent, as `scrubbing`, until zeroed."""
    return conn.execute(_START_SCRUB, {"lease_id": lease_id, "ended_as": ended_as.value}).rowcount


def scrub_progress(conn: Connection, lease_id: str, done: int) -> int:
    return conn.execute(_SCRUB_PROGRESS, {"lease_id": lease_id, "done": done}).rowcount


def finish_scrub(conn: Connection, lease_id: str) -> LeaseRecord | None:
    """The lease's bytes are zero: it takes the state it ended as; None if it was not
    scrubbing."""
    row = conn.execute(_FINISH_SCRUB, {"lease_id": lease_id}).one_or_none()
    return None if row is None else LeaseRecord(*row)


def scrubbing_leases(session: Session, host_id: str) -> Sequence[Lease]:
    """This host's leases waiting to be zeroed, oldest first."""
    query = select(Lease).where(Lease.host_id == host_id, Lease.state == LeaseState.SCRUBBING)
    return session.scalars(query.order_by(Lease.ended_at, Lease.id)).all()


def end_own_lease(conn: Connection, lease_id: str, host_id: str, state: LeaseState,
                  now: datetime) -> LeaseRecord | None:
    """Release or revoke in one statement: end the lease if it is `host_id`'s, active and still
    valid at `now`, and return it as it ended; None, having written nothing, otherwise."""
    row = conn.execute(_END_OWN_LEASE, {"lease_id": lease_id, "owner": host_id, "now": now,
                                        "new_state": state.value}).one_or_none()
    return None if row is None else LeaseRecord(*row)


_NEXTVAL = select(func.nextval("lease_generation"))


def next_generations(conn: Connection, count: int) -> int:
    """Reserve `count` fencing tokens; returns the last one. Tokens only ever grow.

    PostgreSQL: from the `lease_generation` sequence (migration 0004), which takes no row lock,
    so hosts sharing the ledger neither queue nor deadlock on it; SQLite: the counters row.
    """
    if conn.dialect.name == "postgresql":
        last = 0
        for _ in range(count):
            last = int(conn.execute(_NEXTVAL).scalar_one())
        return last
    return int(conn.execute(_NEXT_GENERATIONS, {"count": count}).scalar_one())


def insert_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    """Append audit rows (keys: at, kind, actor, host_id, device_id, lease_id, details) in one
    executemany."""
    if events:
        conn.execute(_INSERT_EVENTS, events)


# --- usage figures --------------------------------------------------------------------------


def live_usage(session: Session, model: type[Claim] | type[Lease], by: str,
               now: datetime | None, state: str = "active") -> dict[Any, tuple[int, int]]:
    """{device_id or host_id: (bytes, count)} of claims or leases in `state` (live ones by
    default); an active lease past expires_at (by `now`) no longer counts."""
    key = model.device_id if by == "device" else model.host_id
    query = select(key, func.sum(model.length), func.count()).where(model.state == state)
    if model is Lease and now is not None:
        query = query.where(Lease.expires_at > now)
    rows = session.execute(query.group_by(key))
    return {group: (int(total or 0), int(count)) for group, total, count in rows}


# --- events ------------------------------------------------------------------------------------


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


def mark_device(session: Session, device_id: int, state: DeviceState, now: datetime) -> int:
    result = session.execute(
        update(Device).where(Device.id == device_id, Device.state != state)
        .values(state=state, updated_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


def live_leases_on_device(session: Session, device_id: int) -> Sequence[Lease]:
    """Leases that hold an extent of the device: active, and scrubbing ones."""
    return session.scalars(
        select(Lease).where(Lease.device_id == device_id, Lease.state.in_(HOLDING_STATES))
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


# --- device administration (drain, and holding a device while the daemon changes it) ----------


def device_by_devname(session: Session, host_id: str, devname: str) -> Device | None:
    """This host's device of that name; a present one before a missing namesake (a name the
    kernel reused), the newest first."""
    return session.scalars(
        select(Device).where(Device.host_id == host_id, Device.devname == devname)
        .order_by(Device.state == DeviceState.MISSING, Device.id.desc())
    ).first()


def change_device_state(session: Session, device_id: int, before: DeviceState,
                        after: DeviceState, now: datetime) -> int:
    """`before` -> `after`, only if the device is still `before`: 0 rows otherwise."""
    result = session.execute(
        update(Device).where(Device.id == device_id, Device.state == before)
        .values(state=after, updated_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


# A lease in any other state still holds its bytes (active, or being scrubbed after its end).
_ENDED = (LeaseState.RELEASED, LeaseState.EXPIRED, LeaseState.REVOKED, LeaseState.LOST)


def holding_leases_on_device(session: Session, device_id: int) -> Sequence[Lease]:
    """Leases whose bytes on the device are not free yet: live, or ended but not yet final."""
    return session.scalars(
        select(Lease).where(Lease.device_id == device_id, Lease.state.not_in(_ENDED))
    ).all()


def release_idle_claims(session: Session, device_id: int, host_id: str, now: datetime
                        ) -> list[tuple[int, int, int]]:
    """End this host's live claims on the device that hold no active lease; (id, offset,
    length) of each."""
    busy = select(Lease.id).where(Lease.claim_id == Claim.id, Lease.state.not_in(_ENDED))
    rows = session.execute(
        update(Claim)
        .where(Claim.device_id == device_id, Claim.host_id == host_id,
               Claim.state == ClaimState.ACTIVE, ~busy.exists())
        .values(state=ClaimState.RELEASED, ended_at=now)
        .returning(Claim.id, Claim.offset, Claim.length)
        .execution_options(synchronize_session=False)
    )
    return [(int(i), int(o), int(n)) for i, o, n in rows]


# --- tenants -----------------------------------------------------------------------------------

_QUOTA = (select(Tenant.max_bytes, Tenant.max_leases)
          .where(Tenant.name == bindparam("name")).with_for_update())
_TENANT_USAGE = (
    select(func.coalesce(func.sum(_LEASES.c.length), 0), func.count())
    .where(_LEASES.c.tenant == bindparam("name"), _LEASES.c.state == _ACTIVE,
           _LEASES.c.expires_at > bindparam("now"))
)


def lock_tenant_quota(conn: Connection, name: str) -> tuple[int | None, int | None] | None:
    """(max_bytes, max_leases) of the tenant, its row locked until the transaction ends
    (PostgreSQL; on SQLite the writer holds the database), or None for an unknown tenant."""
    row = conn.execute(_QUOTA, {"name": name}).first()
    return None if row is None else (row[0], row[1])


_INSERT_TENANT = insert(Tenant)


def insert_tenant(conn: Connection, name: str, now: datetime, max_bytes: int | None,
                  max_leases: int | None) -> None:
    conn.execute(_INSERT_TENANT, {"name": name, "created_at": now, "max_bytes": max_bytes,
                                  "max_leases": max_leases})


def tenant_usage(conn: Connection, name: str, now: datetime) -> tuple[int, int]:
    """(bytes, count) of the tenant's valid leases."""
    row = conn.execute(_TENANT_USAGE, {"name": name, "now": now}).one()
    return int(row[0]), int(row[1])


def notify(conn: Connection, channel: str, payload: str) -> None:
    """PostgreSQL NOTIFY: delivered to every listener when the transaction commits, never if it
    rolls back. SQLite has no listeners: nothing is sent."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_notify(channel, payload)))


# --- sharing devices between hosts (poold.ledger.sharing) --------------------------------------
# Locks: a host's writer takes FOR SHARE on each own claim it places a lease in; another host
# that trims or releases that claim takes FOR UPDATE (SKIP LOCKED: a claim in use by its owner's
# open transaction is skipped, not waited for, so two writers never deadlock over claims), then
# reads the claim's leases in a new statement, which sees everything its owner committed.

_HOSTS = cast(Table, Host.__table__)
_HOLDING = list(HOLDING_STATES)
_OWN_CLAIM = (
    select(_CLAIMS.c.id)
    .where(_CLAIMS.c.id == bindparam("claim_id"), _CLAIMS.c.host_id == bindparam("host_id"),
           _CLAIMS.c.state == ClaimState.ACTIVE.value)
    .with_for_update(read=True)
)
_LOCK_CLAIMS_ON_DEVICE = (
    select(_CLAIMS.c.id, _CLAIMS.c.host_id, _CLAIMS.c.offset, _CLAIMS.c.length)
    .where(_CLAIMS.c.device_id == bindparam("device_id"),
           _CLAIMS.c.state == ClaimState.ACTIVE.value)
    .order_by(_CLAIMS.c.offset)
    .with_for_update(skip_locked=True)
)
_HOLDING_IN_RANGE = (
    select(_LEASES.c.id, _LEASES.c.claim_id, _LEASES.c.offset, _LEASES.c.length)
    .where(_LEASES.c.device_id == bindparam("device_id"), _LEASES.c.state.in_(_HOLDING),
           _LEASES.c.offset < bindparam("end"),
           _LEASES.c.offset + _LEASES.c.length > bindparam("start"))
    .order_by(_LEASES.c.offset)
)
_LOCK_HOLDING_IN_RANGE = _HOLDING_IN_RANGE.with_for_update(skip_locked=True)
_END_CLAIM = (
    update(_CLAIMS)
    .where(_CLAIMS.c.id == bindparam("claim_id"), _CLAIMS.c.state == ClaimState.ACTIVE.value)
    .values(state=ClaimState.RELEASED.value, ended_at=bindparam("now"))
)
_REPOINT_LEASE = (
    update(_LEASES).where(_LEASES.c.id == bindparam("lease_id"))
    .values(claim_id=bindparam("new_claim_id"))
)
_EXPIRED_ON_DEVICE = (
    _SELECT_LEASE
    .where(_LEASES.c.device_id == bindparam("device_id"), _LEASES.c.state == _ACTIVE,
           _LEASES.c.expires_at <= bindparam("now"))
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)  # one its owner is changing now is left to the owner
)
_LOSABLE_HOSTS = (
    select(_HOSTS.c.id)
    .where(_HOSTS.c.state == HostState.UP.value, _HOSTS.c.last_seen_at < bindparam("cutoff"),
           _HOSTS.c.id != bindparam("me"))
    .with_for_update(skip_locked=True)
)
_MARK_HOST_LOST = (
    update(_HOSTS)
    .where(_HOSTS.c.id == bindparam("host_id"), _HOSTS.c.state == HostState.UP.value,
           _HOSTS.c.last_seen_at < bindparam("cutoff"))
    .values(state=HostState.LOST.value)
)
_ADOPT_CLAIMS = (
    update(_CLAIMS)
    .where(_CLAIMS.c.host_id == bindparam("from_host"),
           _CLAIMS.c.state == ClaimState.ACTIVE.value)
    .values(host_id=bindparam("to_host"))
    .returning(_CLAIMS.c.id, _CLAIMS.c.device_id, _CLAIMS.c.offset, _CLAIMS.c.length)
)
# Idempotency keys are per host: an adopted lease gives its key up rather than collide.
_ADOPT_LEASES = (
    update(_LEASES)
    .where(_LEASES.c.host_id == bindparam("from_host"), _LEASES.c.state.in_(_HOLDING))
    .values(host_id=bindparam("to_host"), idempotency_key=None)
    .returning(*(_LEASES.c[name] for name in LEASE_COLUMNS))
)
_LOSE_ACTIVE_LEASE = (
    update(_LEASES)
    .where(_LEASES.c.id == bindparam("lease_id"), _LEASES.c.state == _ACTIVE)
    .values(state=LeaseState.LOST.value, ended_at=bindparam("now"))
)
_OWN_ACTIVE_LEASES = _SELECT_LEASE.where(_LEASES.c.host_id == bindparam("host_id"),
                                         _LEASES.c.state == _ACTIVE)
_RELEASE_IF_IDLE = (
    update(_CLAIMS)
    .where(_CLAIMS.c.id == bindparam("claim_id"), _CLAIMS.c.host_id == bindparam("owner"),
           _CLAIMS.c.state == ClaimState.ACTIVE.value,
           ~select(_LEASES.c.id).where(_LEASES.c.claim_id == _CLAIMS.c.id,
                                       _LEASES.c.state.in_(_HOLDING)).exists())
    .values(state=ClaimState.RELEASED.value, ended_at=bindparam("now"))
)
_OWN_FINGERPRINT_CLAIMS = select(_CLAIMS.c.id).where(
    _CLAIMS.c.host_id == bindparam("host_id"), _CLAIMS.c.state == ClaimState.ACTIVE.value)
_OWN_FINGERPRINT_LEASES = select(func.coalesce(func.sum(_LEASES.c.length), 0)).where(
    _LEASES.c.host_id == bindparam("host_id"), _LEASES.c.state.in_(_HOLDING))


def own_claim_is_live(conn: Connection, claim_id: int, host_id: str) -> bool:
    """The claim is live and `host_id`'s; locked FOR SHARE to the end of the transaction, so no
    other host can trim or take it before a lease placed in it commits."""
    return conn.execute(_OWN_CLAIM, {"claim_id": claim_id, "host_id": host_id}).first() is not None


def lock_claims_on_device(conn: Connection, device_id: int) -> list[tuple[int, str, Extent]]:
    """Live claims of every host on the device, locked FOR UPDATE; claims another transaction
    holds are skipped."""
    rows = conn.execute(_LOCK_CLAIMS_ON_DEVICE, {"device_id": device_id})
    return [(int(i), str(h), Extent(int(o), int(n))) for i, h, o, n in rows]


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


def end_claim(conn: Connection, claim_id: int, now: datetime) -> int:
    return conn.execute(_END_CLAIM, {"claim_id": claim_id, "now": now}).rowcount


def repoint_leases(conn: Connection, lease_ids: list[str], claim_id: int) -> None:
    if lease_ids:
        conn.execute(_REPOINT_LEASE, [{"lease_id": i, "new_claim_id": claim_id}
                                      for i in lease_ids])


def expired_on_device(conn: Connection, device_id: int, now: datetime, limit: int
                      ) -> list[LeaseRecord]:
    """Any host's active leases on the device past expires_at by the ledger clock."""
    rows = conn.execute(_EXPIRED_ON_DEVICE, {"device_id": device_id, "now": now, "limit": limit})
    return [LeaseRecord(*row) for row in rows]


def mark_lost_hosts(conn: Connection, cutoff: datetime, me: str) -> list[str]:
    """Hosts other than `me` last seen before `cutoff` (ledger clock) become lost; their ids.
    A host whose row another transaction holds (it is heartbeating now) is skipped."""
    found = [str(h) for h, in conn.execute(_LOSABLE_HOSTS, {"cutoff": cutoff, "me": me})]
    return [h for h in found
            if conn.execute(_MARK_HOST_LOST, {"host_id": h, "cutoff": cutoff}).rowcount]


def adopt_claims(conn: Connection, from_host: str, to_host: str
                 ) -> list[tuple[int, int, Extent]]:
    rows = conn.execute(_ADOPT_CLAIMS, {"from_host": from_host, "to_host": to_host})
    return [(int(i), int(d), Extent(int(o), int(n))) for i, d, o, n in rows]


def adopt_leases(conn: Connection, from_host: str, to_host: str) -> list[LeaseRecord]:
    rows = conn.execute(_ADOPT_LEASES, {"from_host": from_host, "to_host": to_host})
    return [LeaseRecord(*row) for row in rows]


def lose_active_lease(conn: Connection, lease_id: str, now: datetime) -> int:
    return conn.execute(_LOSE_ACTIVE_LEASE, {"lease_id": lease_id, "now": now}).rowcount


def own_active_leases(conn: Connection, host_id: str) -> list[LeaseRecord]:
    return [LeaseRecord(*row) for row in conn.execute(_OWN_ACTIVE_LEASES, {"host_id": host_id})]


def release_claim_if_idle(conn: Connection, claim_id: int, host_id: str, now: datetime) -> int:
    """End `host_id`'s live claim if no lease holds bytes in it (only its owner places leases
    there, so the NOT EXISTS cannot race with a grant)."""
    return conn.execute(_RELEASE_IF_IDLE, {"claim_id": claim_id, "owner": host_id,
                                           "now": now}).rowcount


def own_fingerprint(conn: Connection, host_id: str) -> tuple[frozenset[int], int]:
    """(ids of the host's live claims, bytes its holding leases hold): what its in-memory space
    must agree with, unless another host changed them."""
    claims = frozenset(int(i) for i, in conn.execute(_OWN_FINGERPRINT_CLAIMS,
                                                     {"host_id": host_id}))
    held = int(conn.execute(_OWN_FINGERPRINT_LEASES, {"host_id": host_id}).scalar_one())
    return claims, held
