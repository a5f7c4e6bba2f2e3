"""Hosts and devices in the ledger: registration at start and device reconciliation (pools:
poold.ledger.pools).

Inventory says what devices exist now (`DeviceSpec`s); this module makes the ledger agree, with an
event for every change. Devices of this host that no longer exist are marked missing, never
deleted: their history and leases stay auditable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from poold.inventory import DeviceSpec
from poold.ledger import queries as q
from poold.ledger.tx import Tx
from poold.models import Device, Host, Pool
from poold.types import DeviceState, EventKind, Extent, HostState

log = logging.getLogger(__name__)


def register_host(tx: Tx, name: str) -> None:
    host = q.hosts.get_host(tx.session, tx.host_id)
    if host is None:
        tx.session.add(Host(id=tx.host_id, name=name, state=HostState.UP, registered_at=tx.now,
                            last_seen_at=tx.now))
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.HOST_REGISTERED, actor="daemon",
                           host_id=tx.host_id, name=name)
    else:
        if host.state == HostState.LOST:  # back after others reclaimed what it held
            q.events.add_event(tx.session, at=tx.now, kind=EventKind.HOST_RECOVERED, actor="daemon",
                               host_id=tx.host_id,
                               silent_s=(tx.now - host.last_seen_at).total_seconds())
        host.name, host.state, host.last_seen_at = name, HostState.UP, tx.now


def ledger_uid(spec: DeviceSpec, host_id: str) -> str:
    """The key a device has in the ledger. A name only this host gives meaning to (an hmem or
    pmem device by kernel path and physical address, an emulated file) is qualified with the
    host, since identical machines name their own, different memory alike; a name that means the
    same memory wherever it is seen (a CXL device by serial) is the key as it is."""
    return f"{spec.uid}@{host_id}" if spec.host_local and not spec.shared else spec.uid


def reconcile_devices(tx: Tx, specs: Iterable[DeviceSpec],
                      pool_for: Pool | Callable[[DeviceSpec], Pool]) -> None:
    """Make this host's devices in the ledger match `specs`; `pool_for` places new devices
    (a pool, or a rule from spec to pool).

    A device whose key is another host's own device, or a shared device that this host does not
    declare shared (or the other way round), is the same memory reached by several hosts that
    do not agree to share it: it is left out here (and logged) rather than granted twice."""
    place = pool_for if callable(pool_for) else (lambda _spec: pool_for)
    seen: set[str] = set()
    for spec in specs:
        key = ledger_uid(spec, tx.host_id)
        device = q.devices.get_device_by_uid(tx.session, key)
        if device is None:
            _add_device(tx, spec, key, place(spec))
        elif _ours(tx, device, spec) or _share_if_idle(tx, device, spec):
            _update_device(tx, device, spec, place)
        else:
            log.warning("inventory.device_conflict uid=%s devname=%s ledger_host=%s "
                        "declared_shared=%s: name it in shared_devices on every host that "
                        "reaches it", key, spec.devname, device.host_id, spec.shared)
            continue
        seen.add(key)
    for device in q.devices.list_devices(tx.session):
        gone = device.host_id == tx.host_id and device.uid not in seen
        if gone and q.devices.mark_device(tx.session, device.id, DeviceState.MISSING, tx.now):
            q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_MISSING,
                               actor="inventory", host_id=tx.host_id, device_id=device.id,
                               devname=device.devname)
            lose_leases(tx, device, f"device {device.devname} disappeared")


def _ours(tx: Tx, device: Device, spec: DeviceSpec) -> bool:
    """The ledger's device is the one this spec describes from this host: both shared, or both
    this host's own."""
    return device.host_id is None if spec.shared else device.host_id == tx.host_id


def _share_if_idle(tx: Tx, device: Device, spec: DeviceSpec) -> bool:
    """This host's own device, now declared shared: it becomes shared (owned by no host) when
    nothing holds it, so no claim of this host is left that others cannot see as theirs."""
    if not (spec.shared and device.host_id == tx.host_id):
        return False
    if q.claims.live_claims(tx.session, device_id=device.id):
        return False
    device.host_id = None
    return True


def _add_device(tx: Tx, spec: DeviceSpec, key: str, pool: Pool) -> None:
    device = Device(
        uid=key, host_id=None if spec.shared else tx.host_id, pool_id=pool.id,
        kind=spec.kind, devname=spec.devname,
        chardev=spec.chardev, size=spec.size, align=spec.align, numa_node=spec.numa_node,
        state=DeviceState.ONLINE, created_at=tx.now, updated_at=tx.now,
    )
    tx.session.add(device)
    tx.session.flush()
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_ADDED, actor="inventory",
                       host_id=tx.host_id, device_id=device.id, devname=spec.devname,
                       kind_=spec.kind, size=spec.size, chardev=spec.chardev)


def _update_device(tx: Tx, device: Device, spec: DeviceSpec,
                   place: Callable[[DeviceSpec], Pool]) -> None:
    wanted: dict[str, object] = {
        "kind": spec.kind, "devname": spec.devname, "chardev": spec.chardev, "size": spec.size,
        "align": spec.align, "numa_node": spec.numa_node,
    }
    if device.host_id is None:
        # A shared device: each host may name it differently; the first host's names stay, and
        # no host's view changes what other hosts' clients mapped.
        wanted = {k: v for k, v in wanted.items() if k in ("size", "align")}
        if spec.size < device.size:
            wanted.pop("size")  # one host seeing less must not shrink it for everybody
    if device.state == DeviceState.MISSING:
        # Back after it was gone (or a new device at a gone one's address, as when a dynamic dax
        # region hands out the same range again): placed like a new device, so it does not
        # inherit a pool its namesake was put in for another purpose (an isolated pool's).
        wanted["state"] = DeviceState.ONLINE
        if not device.pool_assigned:  # an admin's assignment outlives an absence
            wanted["pool_id"] = place(spec).id
    changed = {k: v for k, v in wanted.items() if getattr(device, k) != v}
    if not changed:
        return
    if "size" in changed and spec.size < _claimed_end(tx, device):
        # Shrinking under live claims would orphan bytes someone holds: keep the old size.
        changed.pop("size")
    for key, value in changed.items():
        setattr(device, key, value)
    device.updated_at = tx.now
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_CHANGED, actor="inventory",
                       host_id=tx.host_id, device_id=device.id,
                       changed={k: str(v) for k, v in changed.items()})
    if {"kind", "chardev", "align"} & changed.keys():
        # What clients mapped is no longer what the device is: their leases cannot go on.
        lose_leases(tx, device, f"device {device.devname} changed: {', '.join(sorted(changed))}")


def lose_leases(tx: Tx, device: Device, reason: str) -> int:
    """End every live lease on a device whose memory went away, with a lease.lost event each;
    holders learn at their next keepalive (LeaseNotActive) and must stop using the memory."""
    lost = 0
    for lease in q.leases.live_leases_on_device(tx.session, device.id):
        if not q.leases.lose_lease(tx.session, lease.id, tx.now):
            continue
        if lease.host_id == tx.host_id:
            tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.LEASE_LOST, actor="inventory",
                           host_id=lease.host_id, device_id=device.id, lease_id=lease.id,
                           offset=lease.offset, length=lease.length, generation=lease.generation,
                           reason=reason)
        lost += 1
    return lost


def _claimed_end(tx: Tx, device: Device) -> int:
    return max((c.offset + c.length for c in q.claims.live_claims(tx.session, device_id=device.id)),
               default=0)
