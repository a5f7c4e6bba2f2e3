"""All SQL of the ledger. Functions take the session first and never commit.

State transitions put their precondition in the WHERE clause and return the rowcount, so a
concurrent change (another host, the reaper) can never be overwritten by a stale read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.orm import Session

from poold.models import Claim, Counter, Device, Event, Host, Lease, Pool
from poold.types import ClaimState, DeviceState, EventKind, LeaseState

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


def devices_by_id(session: Session) -> dict[int, Device]:
    return {device.id: device for device in list_devices(session)}


def lock_device(session: Session, device_id: int) -> Device:
    """Serialise claim changes on one device across hosts (FOR UPDATE; a no-op on SQLite, whose
    writer already holds the database lock)."""
    return session.scalars(
        select(Device).where(Device.id == device_id).with_for_update()
    ).one()


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


def get_lease_by_key(session: Session, host_id: str, key: str) -> Lease | None:
    return session.scalars(
        select(Lease).where(Lease.host_id == host_id, Lease.idempotency_key == key)
    ).one_or_none()


def live_leases(session: Session, *, host_id: str | None = None) -> Sequence[Lease]:
    query = select(Lease).where(Lease.state == LeaseState.ACTIVE)
    if host_id is not None:
        query = query.where(Lease.host_id == host_id)
    return session.scalars(query.order_by(Lease.device_id, Lease.offset)).all()


def list_leases(
    session: Session, *, state: LeaseState | None, pool_id: int | None, now: datetime,
    limit: int, after: str | None = None,
) -> Sequence[Lease]:
    query = select(Lease).order_by(Lease.granted_at.desc(), Lease.id).limit(limit)
    if pool_id is not None:
        query = query.where(Lease.pool_id == pool_id)
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


def expired_leases(session: Session, host_id: str, now: datetime, limit: int) -> Sequence[Lease]:
    return session.scalars(
        select(Lease)
        .where(Lease.host_id == host_id, Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
        .order_by(Lease.expires_at)
        .limit(limit)
    ).all()


def renew_lease(session: Session, lease_id: str, now: datetime, expires_at: datetime,
                ttl_s: int) -> int:
    """Extend a lease that is still valid at `now`; 0 rows when it is not."""
    result = session.execute(
        update(Lease)
        .where(Lease.id == lease_id, Lease.state == LeaseState.ACTIVE, Lease.expires_at > now)
        .values(expires_at=expires_at, ttl_s=ttl_s)
    )
    return cast(CursorResult[Any], result).rowcount


def end_lease(session: Session, lease_id: str, state: LeaseState, now: datetime, *,
              only_if_expired: bool) -> int:
    """Move an active lease to a final state; 0 rows when it was no longer active.

    `only_if_expired` makes the reaper's expiry conditional on the ledger clock in the same
    statement, and a release conditional on the lease still being valid.
    """
    condition = Lease.expires_at <= now if only_if_expired else Lease.expires_at > now
    result = session.execute(
        update(Lease)
        .where(Lease.id == lease_id, Lease.state == LeaseState.ACTIVE, condition)
        .values(state=state, ended_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


def next_generations(session: Session, count: int) -> int:
    """Reserve `count` fencing tokens; returns the last one. Tokens only ever grow."""
    value = session.execute(
        update(Counter)
        .where(Counter.name == "generation")
        .values(value=Counter.value + count)
        .returning(Counter.value)
    ).scalar_one()
    return int(value)


# --- usage figures --------------------------------------------------------------------------


def bytes_by_device(session: Session, model: type[Claim] | type[Lease], now: datetime | None
                    ) -> dict[int, tuple[int, int]]:
    """{device_id: (live bytes, live count)} of live claims or leases."""
    query = select(model.device_id, func.sum(model.length), func.count()).where(
        model.state == "active"
    )
    if model is Lease and now is not None:
        query = query.where(Lease.expires_at > now)
    rows = session.execute(query.group_by(model.device_id))
    return {device_id: (int(total or 0), int(count)) for device_id, total, count in rows}


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
    return session.scalars(
        select(Lease).where(Lease.device_id == device_id, Lease.state == LeaseState.ACTIVE)
    ).all()


def lose_lease(session: Session, lease_id: str, now: datetime) -> int:
    """The memory under an active lease is gone (device vanished or changed mode): 0 rows when
    the lease had already ended."""
    result = session.execute(
        update(Lease)
        .where(Lease.id == lease_id, Lease.state == LeaseState.ACTIVE)
        .values(state=LeaseState.LOST, ended_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


def bytes_by_host(session: Session, model: type[Claim] | type[Lease], now: datetime | None
                  ) -> dict[str, tuple[int, int]]:
    """{host_id: (live bytes, live count)} of live claims or leases."""
    query = select(model.host_id, func.sum(model.length), func.count()).where(
        model.state == "active"
    )
    if model is Lease and now is not None:
        query = query.where(Lease.expires_at > now)
    rows = session.execute(query.group_by(model.host_id))
    return {host_id: (int(total or 0), int(count)) for host_id, total, count in rows}
