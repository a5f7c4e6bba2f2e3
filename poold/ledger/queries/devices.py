"""Devices: reading them, their state (drain, missing, held while the daemon changes one), the
tenant a device serves, and the lock that serialises claim changes on one device.

Leaves the claims and leases on a device to `claims` and `leases`, adding a device (an ORM
object) to poold.ledger.registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, bindparam, or_, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import DEVICES, SELECT_DEVICES
from poold.ledger.views import DeviceRecord
from poold.models import Device
from poold.types import DeviceState

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def get_device_by_uid(session: Session, uid: str) -> Device | None:
    return session.scalars(select(Device).where(Device.uid == uid)).one_or_none()


def list_devices(session: Session, pool_id: int | None = None) -> Sequence[Device]:
    query = select(Device).order_by(Device.id)
    if pool_id is not None:
        query = query.where(Device.pool_id == pool_id)
    return session.scalars(query).all()


def devices_by_id(session: Session) -> dict[int, Device]:
    return {device.id: device for device in list_devices(session)}


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


def mark_device(session: Session, device_id: int, state: DeviceState, now: datetime) -> int:
    result = session.execute(
        update(Device).where(Device.id == device_id, Device.state != state)
        .values(state=state, updated_at=now)
    )
    return cast(CursorResult[Any], result).rowcount


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

# FOR NO KEY UPDATE: claimers queue on the device row, while grants (whose lease and claim rows
# reference it, so take FOR KEY SHARE on it) never wait for a claimer.
_DEVICE_BY_ID = SELECT_DEVICES.where(DEVICES.c.id == bindparam("device_id"))
_LOCK_DEVICE = _DEVICE_BY_ID.with_for_update(key_share=True)
_BIND_DEVICE = (update(DEVICES)
                .where(DEVICES.c.id == bindparam("device_id"),
                       or_(DEVICES.c.tenant_scope.is_(None),
                           DEVICES.c.tenant_scope == bindparam("scope")))
                .values(tenant_scope=bindparam("scope")))


def bind_device(conn: Connection, device_id: int, scope: str) -> bool:
    """The device serves `scope`'s leases from now on, unless it already serves another's."""
    return conn.execute(_BIND_DEVICE, {"device_id": device_id, "scope": scope}).rowcount == 1


def device_record(conn: Connection, device_id: int) -> DeviceRecord | None:
    row = conn.execute(_DEVICE_BY_ID, {"device_id": device_id}).one_or_none()
    return None if row is None else DeviceRecord(*row)


def lock_device(conn: Connection, device_id: int) -> DeviceRecord:
    """Serialise claim changes on one device across hosts (FOR UPDATE; a no-op on SQLite, whose
    writer already holds the database lock). Returns the device as it is now."""
    return DeviceRecord(*conn.execute(_LOCK_DEVICE, {"device_id": device_id}).one())
