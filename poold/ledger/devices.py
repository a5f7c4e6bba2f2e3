"""Administering devices in the ledger: drain and undrain, and holding a device while the daemon
changes it in the kernel (create, resize, destroy, reconfigure).

Ledger commands (functions of `Tx`) run by the writer; none commits. A drained device gets no new
leases (the grant path leases from online devices only) while its live leases run to release,
expiry or revocation. A held device is drained for the time of a kernel change, after checking in
the same transaction that it has no live lease and releasing this host's idle claims on it, so no
grant can land between the check and the change. Leaves alone: the kernel (poold.daemon.devices
does the sysfs side) and inventory reconciliation (poold.ledger.registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from poold.errors import Conflict, DeviceBusy, UnknownDevice
from poold.ledger import leases
from poold.ledger import repository as repo
from poold.ledger.leases import Tx
from poold.ledger.reads import devices as device_views
from poold.ledger.views import DeviceView
from poold.models import Device
from poold.types import DeviceState, EventKind


@dataclass(frozen=True, slots=True)
class Held:
    """A device held for a kernel change: its id (None when the ledger does not know it: a
    disabled or size-0 device) and the state to return it to."""

    devname: str
    device_id: int | None
    before: DeviceState | None
    operation: str


def _device(tx: Tx, devname: str) -> Device:
    device = repo.device_by_devname(tx.session, tx.host_id, devname)
    if device is None:
        raise UnknownDevice(f"no device {devname!r} on host {tx.host_id}")
    return device


def drain(tx: Tx, devname: str, actor: str) -> None:
    """No new leases on the device; live ones go on. Idempotent."""
    device = _device(tx, devname)
    if device.state == DeviceState.MISSING:
        raise Conflict(f"{devname} is missing: there is nothing to drain")
    if repo.change_device_state(tx.session, device.id, DeviceState.ONLINE, DeviceState.DRAINING,
                                tx.now):
        live = len(repo.live_leases_on_device(tx.session, device.id))
        repo.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_DRAINED, actor=actor,
                       host_id=tx.host_id, device_id=device.id, devname=devname,
                       live_leases=live)


def undrain(tx: Tx, devname: str, actor: str) -> None:
    """Leasable again. Idempotent; a missing device stays missing."""
    device = _device(tx, devname)
    if device.state == DeviceState.MISSING:
        raise Conflict(f"{devname} is missing: it cannot be made leasable")
    if repo.change_device_state(tx.session, device.id, DeviceState.DRAINING, DeviceState.ONLINE,
                                tx.now):
        repo.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_UNDRAINED, actor=actor,
                       host_id=tx.host_id, device_id=device.id, devname=devname)


def hold(tx: Tx, devname: str, actor: str, operation: str) -> Held:
    """Refuse (DeviceBusy) if a lease holds bytes on the device (live, or still being scrubbed
    after its end); else release this host's idle claims
    on it and drain it until `finish` or `give_back`."""
    leases.reap(tx)  # a lease past expires_at holds nothing any more
    device = repo.device_by_devname(tx.session, tx.host_id, devname)
    if device is None or device.state == DeviceState.MISSING:
        return Held(devname, None if device is None else device.id, None, operation)
    live = repo.holding_leases_on_device(tx.session, device.id)
    if live:
        ids = ", ".join(f"{lease.id} {lease.state}" for lease in live[:5])
        raise DeviceBusy(f"{devname} holds {len(live)} live lease(s) ({ids}): cannot {operation}"
                         f" it; drain it and let them end, or revoke them")
    for claim_id, offset, length in repo.release_idle_claims(tx.session, device.id, tx.host_id,
                                                             tx.now):
        tx.space.drop_claim(claim_id)
        repo.add_event(tx.session, at=tx.now, kind=EventKind.CLAIM_RELEASED, actor=actor,
                       host_id=tx.host_id, device_id=device.id, claim_id=claim_id,
                       offset=offset, length=length, reason=operation)
    before = DeviceState(device.state)
    if repo.change_device_state(tx.session, device.id, DeviceState.ONLINE, DeviceState.DRAINING,
                                tx.now):
        repo.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_DRAINED, actor=actor,
                       host_id=tx.host_id, device_id=device.id, devname=devname, live_leases=0,
                       reason=operation)
    return Held(devname, device.id, before, operation)


def give_back(tx: Tx, held: Held, actor: str, error: str) -> None:
    """The kernel change failed: the device is as it was, and so is its ledger state."""
    _restore(tx, held, actor, failed=error)


def finish(tx: Tx, held: Held, kind: EventKind, actor: str, **details: Any) -> None:
    """The kernel change is done (and the inventory reconciled in this same transaction): the
    device returns to its state before the hold, and the change is recorded."""
    _restore(tx, held, actor)
    device = repo.device_by_devname(tx.session, tx.host_id, held.devname)
    repo.add_event(tx.session, at=tx.now, kind=kind, actor=actor, host_id=tx.host_id,
                   device_id=device.id if device is not None else held.device_id,
                   devname=held.devname, **details)


def _restore(tx: Tx, held: Held, actor: str, **details: Any) -> None:
    if held.device_id is None or held.before != DeviceState.ONLINE:
        return
    if repo.change_device_state(tx.session, held.device_id, DeviceState.DRAINING,
                                DeviceState.ONLINE, tx.now):
        repo.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_UNDRAINED, actor=actor,
                       host_id=tx.host_id, device_id=held.device_id, devname=held.devname,
                       after=held.operation, **details)


def view(session: Session, now: datetime, host_id: str, devname: str) -> DeviceView | None:
    """The device as GET /v1/devices shows it (a present one before a missing namesake)."""
    found = [d for d in device_views(session, now) if d.host == host_id and d.devname == devname]
    found.sort(key=lambda d: (d.state == DeviceState.MISSING, -d.id))
    return found[0] if found else None
