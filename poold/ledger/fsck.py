"""`poold fsck`: check every DESIGN.md invariant against the ledger as it is on disk.

Read-only. Returns a list of violations (empty means clean) so the CLI and the tests share it.
Invariant 5 (an expired lease is never reported valid) is a property of every read, tested at the
API; here a lease still active long past expiry is only a warning, since the reaper may simply not
be running (the daemon is stopped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise

from sqlalchemy.orm import Session

from poold.ledger import queries as q
from poold.models import Claim, Device, Lease, Pool
from poold.types import (
    HOLDING_STATES,
    ClaimState,
    DeviceKind,
    EventKind,
    LeaseState,
    SessionState,
)

# Which event must exist for a lease in each state (invariant 7).
_EVENT_FOR_STATE = {
    LeaseState.RELEASED: EventKind.LEASE_RELEASED,
    LeaseState.EXPIRED: EventKind.LEASE_EXPIRED,
    LeaseState.REVOKED: EventKind.LEASE_REVOKED,
    LeaseState.LOST: EventKind.LEASE_LOST,
}


@dataclass(slots=True)
class FsckReport:
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    devices: int = 0
    claims: int = 0
    leases: int = 0

    @property
    def clean(self) -> bool:
        return not self.violations


def fsck(session: Session, now: datetime) -> FsckReport:
    report = FsckReport()
    devices = q.devices.devices_by_id(session)
    claims = [c for c in q.claims.all_claims(session) if c.state == ClaimState.ACTIVE]
    leases = q.leases.all_leases(session)
    live = [x for x in leases if x.state in HOLDING_STATES]  # scrubbing ones hold bytes too
    report.devices, report.claims, report.leases = len(devices), len(claims), len(live)
    _check_extents(report, devices, "claim", claims)
    _check_extents(report, devices, "lease", live)
    _check_leases_inside_claims(report, live, {c.id: c for c in claims})
    _check_events(report, session, leases)
    _check_tenant_scopes(report, devices, live, q.pools.pools_by_id(session))
    _check_sessions(report, session, live)
    for lease in live:
        if lease.state == LeaseState.ACTIVE and lease.expires_at <= now:
            report.warnings.append(f"lease {lease.id} expired at {lease.expires_at} "
                                   "and is not finalised yet (is the daemon running?)")
    return report


def _check_extents(report: FsckReport, devices: dict[int, Device], what: str,
                   extents: Sequence[Claim | Lease]) -> None:
    """Invariants 1, 3 and 4: aligned, inside the device, no overlap."""
    by_device: dict[int, list[Claim | Lease]] = {}
    for x in extents:
        device = devices.get(x.device_id)
        if device is None:
            report.violations.append(f"{what} {x.id} names unknown device {x.device_id}")
            continue
        if x.offset % device.align or x.length % device.align or x.length <= 0:
            report.violations.append(f"{what} {x.id} [{x.offset}, +{x.length}) is not aligned "
                                     f"to {device.align} on {device.devname}")
        if x.offset < 0 or x.offset + x.length > device.size:
            report.violations.append(f"{what} {x.id} [{x.offset}, +{x.length}) lies outside "
                                     f"{device.devname} of size {device.size}")
        by_device.setdefault(x.device_id, []).append(x)
    for device_id, items in by_device.items():
        items.sort(key=lambda x: x.offset)
        for a, b in pairwise(items):
            if a.offset + a.length > b.offset:
                report.violations.append(f"live {what}s {a.id} and {b.id} overlap on device "
                                         f"{devices[device_id].devname}")


def _check_leases_inside_claims(report: FsckReport, live: list[Lease],
                                claims: dict[int, Claim]) -> None:
    """Invariant 2: every live lease lies inside a live claim of its own host."""
    for lease in live:
        claim = claims.get(lease.claim_id)
        if claim is None:
            report.violations.append(f"lease {lease.id} lies in claim {lease.claim_id}, "
                                     "which is not live")
        elif claim.host_id != lease.host_id or claim.device_id != lease.device_id:
            report.violations.append(f"lease {lease.id} of host {lease.host_id} lies in claim "
                                     f"{claim.id} of host {claim.host_id}")
        elif not (claim.offset <= lease.offset
                  and lease.offset + lease.length <= claim.offset + claim.length):
            report.violations.append(f"lease {lease.id} sticks out of claim {claim.id}")


def _check_tenant_scopes(report: FsckReport, devices: dict[int, Device], live: list[Lease],
                         pools: dict[int, Pool]) -> None:
    """Invariant 8 for devices handed out whole: outside a trusted pool, the live leases of one
    are its tenant's alone."""
    for device_id, device in devices.items():
        pool = pools.get(device.pool_id)
        if device.kind != DeviceKind.DEVDAX or pool is None or pool.trusted:
            continue
        scopes = {x.tenant or "" for x in live if x.device_id == device_id}
        if len(scopes) > 1 or (scopes and device.tenant_scope not in scopes):
            report.violations.append(
                f"{device.devname} serves {device.tenant_scope!r} but holds live leases of "
                f"{sorted(scopes)}: one tenant's bytes reachable by another")


def _check_events(report: FsckReport, session: Session, leases: Sequence[Lease]) -> None:
    """Invariant 7: each lease has its grant event and the event of the state it ended in."""
    kinds = q.events.events_for_leases(session)
    for lease in leases:
        have = kinds.get(lease.id, set())
        if EventKind.LEASE_GRANTED not in have:
            report.violations.append(f"lease {lease.id} has no {EventKind.LEASE_GRANTED} event")
        needed = _EVENT_FOR_STATE.get(LeaseState(lease.state))
        if needed is not None and needed not in have:
            report.violations.append(f"lease {lease.id} is {lease.state} without a {needed} event")


def _check_sessions(report: FsckReport, session: Session, live: list[Lease]) -> None:
    """A lease in a session lives exactly as long as it: an active lease of an ended session,
    another tenant's or host's session, or one with an expiry of its own, is a lease no
    keepalive or expiry of its holder governs."""
    ids = sorted({x.session_id for x in live if x.session_id is not None})
    sessions = {s.id: s for s in q.sessions.sessions_by_id(session, ids)}
    for lease in live:
        if lease.session_id is None or lease.state != LeaseState.ACTIVE:
            continue
        owner = sessions.get(lease.session_id)
        if owner is None:
            report.violations.append(f"lease {lease.id} names unknown session "
                                     f"{lease.session_id}")
        elif owner.state != SessionState.ACTIVE:
            report.violations.append(f"lease {lease.id} is active in session {owner.id}, "
                                     f"which is {owner.state}")
        elif (owner.tenant, owner.host_id) != (lease.tenant, lease.host_id):
            report.violations.append(f"lease {lease.id} of {lease.tenant!r} on {lease.host_id} "
                                     f"is in session {owner.id} of {owner.tenant!r} on "
                                     f"{owner.host_id}")
        elif lease.expires_at != owner.expires_at:
            report.violations.append(f"lease {lease.id} expires at {lease.expires_at}, its "
                                     f"session {owner.id} at {owner.expires_at}")
