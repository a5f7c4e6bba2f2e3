"""Capacity at a glance: every device's bytes split into leased, scrubbing, claimed-but-idle, free
and draining, and the same summed per pool. Read-only; the admin UI's overview draws it.

The five figures of a device always add up to its size:

- leased: active leases not past expires_at (by the ledger clock);
- scrubbing: leases in state `scrubbing`, released extents being zeroed before reuse;
- idle: claimed by a host but neither leased nor scrubbing (an expired lease the reaper has not
  finalised yet counts here: nobody may use it, and it will be freed within one period);
- free: not claimed;
- draining: on a device in state `draining`, what would otherwise be idle or free: it is held
  back from new grants while the leases on it run out.

A missing device keeps its figures (its live extents are still in the ledger), but pools count
only present devices, as `reads.pools` does. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from poold.ledger import queries as q
from poold.ledger import reads
from poold.types import DeviceState


@dataclass(frozen=True, slots=True)
class Split:
    """Bytes by what they are doing; the five add up to `size`."""

    size: int
    leased: int
    scrubbing: int
    idle: int
    free: int
    draining: int


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    id: int
    devname: str
    pool: str
    host: str | None
    kind: str
    state: str
    numa_node: int | None
    align: int
    live_leases: int
    bytes: Split


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    name: str
    devices: int
    missing_devices: int
    live_leases: int
    bytes: Split


@dataclass(frozen=True, slots=True)
class Capacity:
    pools: list[PoolCapacity]
    devices: list[DeviceCapacity]


def split(size: int, claimed: int, leased: int, scrubbing: int, draining: bool) -> Split:
    """One device's five figures from what the ledger counts. Clamped so that a figure is never
    negative even if a count is momentarily off (a read between two writers' commits)."""
    leased = min(leased, size)
    scrubbing = min(scrubbing, size - leased)
    claimed = min(max(claimed, leased + scrubbing), size)
    idle = claimed - leased - scrubbing
    free = size - claimed
    if draining:
        return Split(size, leased, scrubbing, 0, 0, idle + free)
    return Split(size, leased, scrubbing, idle, free, 0)


def _add(total: Split, one: Split) -> Split:
    return Split(*(a + b for a, b in zip(
        (total.size, total.leased, total.scrubbing, total.idle, total.free, total.draining),
        (one.size, one.leased, one.scrubbing, one.idle, one.free, one.draining), strict=True)))


def capacity(session: Session, now: datetime) -> Capacity:
    """From the same per-device counts as GET /v1/devices (reads.devices), split five ways."""
    devices = [
        DeviceCapacity(
            id=d.id, devname=d.devname, pool=d.pool, host=d.host, kind=d.kind, state=d.state,
            numa_node=d.numa_node, align=d.align, live_leases=d.live_leases,
            bytes=split(d.size, d.claimed_bytes, d.leased_bytes, d.scrubbing_bytes,
                        d.state == DeviceState.DRAINING),
        )
        for d in reads.devices(session, now)
    ]
    names = sorted(q.pools.pool_names(session).values())
    return Capacity(pools=[_pool(name, devices) for name in names], devices=devices)


def _pool(name: str, devices: list[DeviceCapacity]) -> PoolCapacity:
    members = [d for d in devices if d.pool == name]
    present = [d for d in members if d.state != DeviceState.MISSING]
    total = Split(0, 0, 0, 0, 0, 0)
    for d in present:
        total = _add(total, d.bytes)
    return PoolCapacity(name=name, devices=len(members),
                        missing_devices=len(members) - len(present),
                        live_leases=sum(d.live_leases for d in members), bytes=total)
