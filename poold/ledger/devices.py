"""Administering devices in the ledger: drain and undrain, and holding a device while the daemon
changes it in the kernel (create, resize, destroy, reconfigure).

Ledger commands (functions of `Tx`) run by the writer; none commits. A drained device gets no new
leases (the grant path leases from online devices only, and names a draining device when only it
could serve) while its live leases run to release, expiry or revocation.

A held device is one the daemon is about to change in the kernel: `hold` checks, in the writer,
that no lease holds bytes on it and puts it in the writer's in-memory `held` set, which the grant
path skips, so no grant lands between the check and the change. The hold writes nothing: a
change the kernel refuses leaves the ledger exactly as it was (`give_back` only forgets the
hold), and a crash mid-change leaves no device stuck in a state nobody will undo. `finish`
releases this host's idle claims on the device and records the change, in the transaction that
reconciles the inventory. Leaves alone: the kernel (poold.daemon.devices does the sysfs side) and
inventory reconciliation (poold.ledger.registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from poold.errors import Conflict, DeviceBusy, UnknownDevice
from poold.ledger import leases
from poold.ledger import queries as q
from poold.ledger.reads import devices as device_views
from poold.ledger.tx import Tx
from poold.ledger.views import DeviceView
from poold.models import Device
from poold.types import DeviceState, EventKind


@dataclass(frozen=True, slots=True)
class Held:
    """A device held for a kernel change: its id (None when the ledger does not know it: a
    disabled or size-0 device, or one being created)."""

    devname: str
    device_id: int | None
    operation: str


def _device(tx: Tx, devname: str) -> Device:
    device = q.devices.device_by_devname(tx.session, tx.host_id, devname)
    if device is None:
        raise UnknownDevice(f"no device {devname!r} on host {tx.host_id}")
    return device


def drain(tx: Tx, devname: str, actor: str) -> None:
    """No new leases on the device; live ones go on. Idempotent."""
    device = _device(tx, devname)
    if device.state == DeviceState.MISSING:
        raise Conflict(f"{devname} is missing: there is nothing to drain")
    if q.devices.change_device_state(tx.session, device.id, DeviceState.ONLINE,
                                     DeviceState.DRAINING, tx.now):
        live = len(q.leases.live_leases_on_device(tx.session, device.id))
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_DRAINED, actor=actor,
                           host_id=tx.host_id, device_id=device.id, devname=devname,
                           live_leases=live)


def undrain(tx: Tx, devname: str, actor: str) -> None:
    """Leasable again. Idempotent; a missing device stays missing."""
    device = _device(tx, devname)
    if device.state == DeviceState.MISSING:
        raise Conflict(f"{devname} is missing: it cannot be made leasable")
    if q.devices.change_device_state(tx.session, device.id, DeviceState.DRAINING,
                                     DeviceState.ONLINE, tx.now):
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_UNDRAINED, actor=actor,
                           host_id=tx.host_id, device_id=device.id, devname=devname)


def unbind_tenant(tx: Tx, devname: str, actor: str) -> None:
    """Free a device handed out whole from the tenant it serves, once none of its leases holds
    bytes there; its next lease binds it anew. Idempotent. (What the tenant's processes still
    hold of it, a descriptor or a mapping, the kernel cannot take back from a static device: free
    it when they are gone.)"""
    device = _device(tx, devname)
    live = q.leases.holding_leases_on_device(tx.session, device.id)
    if live:
        raise DeviceBusy(f"{devname} holds {len(live)} live lease(s) of "
                         f"{device.tenant_scope or 'no tenant'}: let them end, or revoke them")
    if device.tenant_scope is not None:
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_CHANGED, actor=actor,
                           host_id=tx.host_id, device_id=device.id, devname=devname,
                           changed={"tenant_scope": None}, was=device.tenant_scope)
        device.tenant_scope = None


def hold(tx: Tx, devname: str, actor: str, operation: str) -> Held:
    """Refuse (DeviceBusy) if a lease holds bytes on the device (live, or still being scrubbed
    after its end); else hold it (tx.held) until `finish` or `give_back`. Writes nothing but
    what the reaper would: a lease past expires_at is finalised first, since it holds nothing."""
    leases.reap(tx)
    device = q.devices.device_by_devname(tx.session, tx.host_id, devname)
    if device is None or device.state == DeviceState.MISSING:
        return Held(devname, None if device is None else device.id, operation)
    live = q.leases.holding_leases_on_device(tx.session, device.id)
    if live:
        ids = ", ".join(f"{lease.id} {lease.state}" for lease in live[:5])
        raise DeviceBusy(f"{devname} holds {len(live)} live lease(s) ({ids}): cannot {operation}"
                         f" it; drain it and let them end, or revoke them")
    if device.id in tx.held:  # DeviceOps runs one operation at a time: this is a bug
        raise DeviceBusy(f"{devname} is already held for another operation")
    tx.held.add(device.id)
    return Held(devname, device.id, operation)


def give_back(held_devices: set[int], held: Held) -> None:
    """The kernel change failed (and was undone there) or is recorded: grants may use the device
    again. Safe from any thread: it only drops an id from the writer's set."""
    if held.device_id is not None:
        held_devices.discard(held.device_id)


def release_claims(tx: Tx, held: Held, actor: str) -> None:
    """The kernel change is done: this host's idle claims on the device end (the inventory,
    reconciled next in the same transaction, then sees a device nobody claims)."""
    if held.device_id is None:
        return
    for claim_id, offset, length in q.claims.release_idle_claims(tx.session, held.device_id,
                                                                 tx.host_id, tx.now):
        tx.space.drop_claim(claim_id)
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.CLAIM_RELEASED, actor=actor,
                           host_id=tx.host_id, device_id=held.device_id, claim_id=claim_id,
                           offset=offset, length=length, reason=held.operation)


def finish(tx: Tx, held: Held, kind: EventKind, actor: str, **details: Any) -> None:
    """Record the change (after `release_claims` and the reconcile, in their transaction)."""
    device = q.devices.device_by_devname(tx.session, tx.host_id, held.devname)
    q.events.add_event(tx.session, at=tx.now, kind=kind, actor=actor, host_id=tx.host_id,
                       device_id=device.id if device is not None else held.device_id,
                       devname=held.devname, **details)


def view(session: Session, now: datetime, host_id: str, devname: str) -> DeviceView | None:
    """The device as GET /v1/devices shows it (a present one before a missing namesake)."""
    found = [d for d in device_views(session, now) if d.host == host_id and d.devname == devname]
    found.sort(key=lambda d: (d.state == DeviceState.MISSING, -d.id))
    return found[0] if found else None
