"""Read-only snapshots the ledger hands upward: the API renders them, nothing writes them back.

Also the plain records (PoolRecord, DeviceRecord, LeaseRecord) the ledger writer reads and writes
with Core statements instead of ORM objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from poold.models import Device, Event, Lease
from poold.types import DeviceKind, LeaseState, SessionState


@dataclass(frozen=True, slots=True)
class LeaseView:
    id: str
    pool: str
    host: str
    tenant: str | None
    device: str
    device_id: int
    chardev: str
    offset: int
    length: int
    align: int
    generation: int
    ttl_s: int
    granted_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: LeaseState
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    scrubbed_bytes: int = 0
    kind: str = DeviceKind.DEVDAX.value
    # Where an admin maps the lease's bytes: a devdax lease is its device's chardev at the
    # lease's offset; an emulated or system-ram lease is a memfd of its host's daemon at offset
    # 0, whose path only that daemon knows (None here; api.lease_backing fills it in).
    map_path: str | None = None
    map_offset: int = 0
    session_id: str | None = None  # granted under this client session
    elastic: bool = False  # a cache its holder gives back when asked
    reclaim_by: datetime | None = None  # asked to: it is revoked past this instant

    @classmethod
    def build(cls, lease: Lease | LeaseRecord, device: Device | DeviceRecord, pool_name: str,
              now: datetime) -> LeaseView:
        """From ORM rows (reads) or the writer's plain records: the same attribute names."""
        return cls(
            id=lease.id,
            pool=pool_name,
            host=lease.host_id,
            tenant=lease.tenant,
            device=device.devname,
            device_id=device.id,
            chardev=device.chardev,
            offset=lease.offset,
            length=lease.length,
            align=device.align,
            generation=lease.generation,
            ttl_s=lease.ttl_s,
            granted_at=lease.granted_at,
            expires_at=lease.expires_at,
            ended_at=lease.ended_at,
            state=effective_state(lease, now),
            labels=dict(lease.labels),
            idempotency_key=lease.idempotency_key,
            scrubbed_bytes=lease.scrubbed_bytes,
            kind=device.kind,
            map_path=device.chardev if device.kind == DeviceKind.DEVDAX else None,
            map_offset=lease.offset if device.kind == DeviceKind.DEVDAX else 0,
            session_id=lease.session_id,
            elastic=lease.elastic,
            reclaim_by=lease.reclaim_by,
        )


def effective_state(lease: Lease | LeaseRecord, now: datetime) -> LeaseState:
    """An active lease past expires_at is expired, whether or not the reaper got to it yet."""
    state = LeaseState(lease.state)
    if state is LeaseState.ACTIVE and lease.expires_at <= now:
        return LeaseState.EXPIRED
    return state


# --- rows as the ledger writer reads them (plain values, no ORM identity map) ------------------


Quota = tuple[int | None, int | None]  # (max_bytes, max_leases); None: unlimited


@dataclass(frozen=True, slots=True)
class PoolRecord:
    id: int
    name: str
    claim_slice: int
    default_ttl_s: int
    max_ttl_s: int
    max_lease_size: int | None
    scrub_on_release: bool
    trusted: bool = False
    allowed_tenants: list[str] | None = None  # None: every tenant
    retired_at: datetime | None = None

    def admits(self, tenant: str | None) -> bool:
        """Whether a grant for `tenant` may lease here (a grant of no tenant, an admin's or
        an agent's, is the operators' own and always may)."""
        return tenant is None or self.allowed_tenants is None or tenant in self.allowed_tenants


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    id: int
    uid: str
    host_id: str | None
    pool_id: int
    kind: str
    devname: str
    chardev: str
    size: int
    align: int
    numa_node: int | None
    state: str
    tenant_scope: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One row of `leases`, every column."""

    id: str
    pool_id: int
    device_id: int
    claim_id: int
    host_id: str
    tenant: str | None
    offset: int
    length: int
    generation: int
    ttl_s: int
    granted_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: str
    labels: dict[str, str]
    idempotency_key: str | None
    request_digest: str | None
    ended_as: str | None = None
    scrubbed_bytes: int = 0
    session_id: str | None = None
    elastic: bool = False
    used_at: datetime | None = None
    reclaim_by: datetime | None = None

    def values(self) -> dict[str, Any]:
        """Column name -> value, for an INSERT."""
        return {name: getattr(self, name) for name in LEASE_COLUMNS}


LEASE_COLUMNS = tuple(f.name for f in fields(LeaseRecord))


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One row of `sessions`, every column."""

    id: str
    host_id: str
    tenant: str | None
    ttl_s: int
    opened_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: str
    labels: dict[str, str]

    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SESSION_COLUMNS}


SESSION_COLUMNS = tuple(f.name for f in fields(SessionRecord))


@dataclass(frozen=True, slots=True)
class ReclaimAsk:
    """A lease of the session that the daemon asked back: release it by `by`, or it is revoked."""

    lease: str
    length: int
    by: datetime


@dataclass(frozen=True, slots=True)
class SessionView:
    """A client session as the API shows it: `leases` are the ids of its live leases (what a
    keepalive renewed), so a holder learns in one answer which of its leases ended."""

    id: str
    host: str
    tenant: str | None
    ttl_s: int
    opened_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: SessionState
    labels: dict[str, str]
    leases: list[str]
    reclaim: list[ReclaimAsk] = field(default_factory=list)

    @classmethod
    def build(cls, session: SessionRecord, leases: list[str], now: datetime,
              reclaim: list[ReclaimAsk] | None = None) -> SessionView:
        state = SessionState(session.state)
        if state is SessionState.ACTIVE and session.expires_at <= now:
            state = SessionState.EXPIRED  # as for leases: computed on read, before the reaper
        return cls(id=session.id, host=session.host_id, tenant=session.tenant,
                   ttl_s=session.ttl_s, opened_at=session.opened_at,
                   expires_at=session.expires_at, ended_at=session.ended_at, state=state,
                   labels=dict(session.labels),
                   leases=leases if state is SessionState.ACTIVE else [],
                   reclaim=(reclaim or []) if state is SessionState.ACTIVE else [])


@dataclass(frozen=True, slots=True)
class DeviceView:
    id: int
    uid: str
    devname: str
    kind: str
    chardev: str
    pool: str
    host: str | None
    size: int
    align: int
    numa_node: int | None
    state: str
    claimed_bytes: int
    leased_bytes: int
    scrubbing_bytes: int
    free_bytes: int
    live_leases: int
    tenant_scope: str | None = None
    pool_assigned: bool = False  # put in its pool by an admin, not by a placement rule


@dataclass(frozen=True, slots=True)
class PoolView:
    id: int
    name: str
    devices: int
    size: int
    claimed_bytes: int
    leased_bytes: int
    scrubbing_bytes: int
    free_bytes: int
    available_bytes: int
    live_leases: int
    claim_slice: int
    default_ttl_s: int
    max_ttl_s: int
    max_lease_size: int | None
    scrub_on_release: bool
    trusted: bool = False
    description: str = ""
    allowed_tenants: list[str] | None = None
    retired_at: datetime | None = None
    quotas: list[PoolQuotaView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PoolQuotaView:
    """A tenant's quotas in one pool and what it holds there now."""

    tenant: str
    max_bytes: int | None
    max_leases: int | None
    leased_bytes: int
    live_leases: int


@dataclass(frozen=True, slots=True)
class EventView:
    id: int
    at: datetime
    kind: str
    actor: str
    host: str | None
    device_id: int | None
    lease_id: str | None
    details: dict[str, Any]

    @classmethod
    def build(cls, event: Event) -> EventView:
        return cls(
            id=event.id,
            at=event.at,
            kind=event.kind,
            actor=event.actor,
            host=event.host_id,
            device_id=event.device_id,
            lease_id=event.lease_id,
            details=dict(event.details),
        )


@dataclass(frozen=True, slots=True)
class HostView:
    id: str
    name: str
    state: str
    registered_at: datetime
    last_seen_at: datetime
    heartbeat_age_s: float
    claims: int
    claimed_bytes: int
    live_leases: int
    leased_bytes: int


@dataclass(frozen=True, slots=True)
class ClaimView:
    id: int
    host: str
    offset: int
    length: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ScrubJob:
    """A lease that ended in a scrubbing pool: where its bytes are, how many are zero already."""

    lease_id: str
    chardev: str
    offset: int
    length: int
    done: int
    kind: str = "devdax"  # emulated, system-ram: the bytes are a memfd of the daemon's
    # False: the pool does not scrub, and the lease waits only for its own dax device (a region
    # carved per lease) to be destroyed.
    zero: bool = True
