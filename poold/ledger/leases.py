"""Lease lifecycle: grant, keepalive, release, revoke, reap.

Stateless functions run by the ledger writer inside its transaction (`Tx`); none commits. Each
checks everything it can before its first write and records an Event with every change, so a
refused request leaves nothing behind and every change is audited in its own transaction.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from poold.errors import (
    IdempotencyConflict,
    InvalidRequest,
    LeaseExpired,
    LeaseNotActive,
    LeaseTooLarge,
    NoCapacity,
    UnknownLease,
    UnknownPool,
)
from poold.ledger import repository as repo
from poold.ledger.space import HostSpace
from poold.ledger.views import LeaseView, effective_state
from poold.models import Claim, Device, Lease, Pool
from poold.pool import ExtentAllocator
from poold.types import (
    MAX_BYTES,
    ClaimState,
    DeviceKind,
    DeviceState,
    EventKind,
    Extent,
    LeaseState,
    round_up,
)

REAP_BATCH = 500
# Kinds whose chardev a client maps; system-ram devices are NUMA memory (leased in issue 4).
MAPPABLE_KINDS = (DeviceKind.DEVDAX, DeviceKind.EMULATED)


@dataclass(slots=True)
class Tx:
    """What a ledger command sees: the writer's session, the ledger clock's reading for this
    transaction, this host's in-memory space and identity."""

    session: Session
    now: datetime
    space: HostSpace
    host_id: str
    default_pool: str


@dataclass(frozen=True, slots=True)
class GrantRequest:
    size: int
    actor: str
    pool: str | None = None
    ttl_s: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    tenant: str | None = None
    device: str | None = None
    numa_node: int | None = None

    def digest(self) -> str:
        """What must match for an idempotency key to be replayed rather than refused."""
        body = [self.size, self.pool, self.ttl_s, sorted(self.labels.items()), self.tenant,
                self.device, self.numa_node]
        return hashlib.sha256(json.dumps(body).encode()).hexdigest()


def view(tx: Tx, lease: Lease) -> LeaseView:
    device = tx.session.get(Device, lease.device_id)
    pool = tx.session.get(Pool, lease.pool_id)
    assert device is not None and pool is not None
    return LeaseView.build(lease, device, pool.name, tx.now)


def grant(tx: Tx, request: GrantRequest) -> LeaseView:
    pool = _pool(tx, request.pool)
    ttl_s = _ttl(pool, request.ttl_s)
    if request.size <= 0 or request.size > MAX_BYTES:
        raise InvalidRequest(f"size must be between 1 and {MAX_BYTES} bytes, got {request.size}")
    if request.idempotency_key is not None:
        replay = repo.get_lease_by_key(tx.session, tx.host_id, request.idempotency_key)
        if replay is not None:
            if replay.request_digest != request.digest():
                raise IdempotencyConflict(
                    f"idempotency key {request.idempotency_key!r} was used for another request"
                )
            return view(tx, replay)
    devices = _candidates(tx, pool, request)
    placed = _place(tx, pool, devices, request.size)
    if placed is None and reap(tx) > 0:
        placed = _place(tx, pool, devices, request.size)
    if placed is None:
        raise NoCapacity(f"no free extent of {request.size} bytes in pool {pool.name!r} now")
    device, claim_id, extent = placed
    lease = Lease(
        id=uuid.uuid4().hex, pool_id=pool.id, device_id=device.id, claim_id=claim_id,
        host_id=tx.host_id, tenant=request.tenant, offset=extent.offset, length=extent.length,
        generation=repo.next_generations(tx.session, 1), ttl_s=ttl_s, granted_at=tx.now,
        expires_at=tx.now + timedelta(seconds=ttl_s), ended_at=None, state=LeaseState.ACTIVE,
        labels=dict(request.labels), idempotency_key=request.idempotency_key,
        request_digest=request.digest(),
    )
    tx.session.add(lease)
    repo.add_event(tx.session, at=tx.now, kind=EventKind.LEASE_GRANTED, actor=request.actor,
                   host_id=tx.host_id, device_id=device.id, lease_id=lease.id,
                   offset=extent.offset, length=extent.length, generation=lease.generation,
                   ttl_s=ttl_s, requested=request.size)
    return view(tx, lease)


def keepalive(tx: Tx, lease_id: str, ttl_s: int | None, actor: str) -> LeaseView:
    lease = _lease(tx, lease_id)
    pool = tx.session.get(Pool, lease.pool_id)
    assert pool is not None
    ttl = _ttl(pool, ttl_s if ttl_s is not None else lease.ttl_s)
    expires_at = tx.now + timedelta(seconds=ttl)
    if repo.renew_lease(tx.session, lease_id, tx.now, expires_at, ttl) == 1:
        repo.add_event(tx.session, at=tx.now, kind=EventKind.LEASE_RENEWED, actor=actor,
                       host_id=lease.host_id, device_id=lease.device_id, lease_id=lease_id,
                       expires_at=expires_at.isoformat(), ttl_s=ttl)
        return view(tx, lease)
    if effective_state(lease, tx.now) is LeaseState.EXPIRED:
        raise LeaseExpired(f"lease {lease_id} expired at {lease.expires_at.isoformat()}")
    raise LeaseNotActive(f"lease {lease_id} is {lease.state}")


def release(tx: Tx, lease_id: str, actor: str) -> LeaseView:
    """Idempotent: releasing a finished lease returns it as it ended."""
    return _end(tx, _lease(tx, lease_id), LeaseState.RELEASED, EventKind.LEASE_RELEASED, actor)


def revoke(tx: Tx, lease_id: str, actor: str) -> LeaseView:
    """An administrator ends a lease before its holder does; the holder learns at keepalive."""
    return _end(tx, _lease(tx, lease_id), LeaseState.REVOKED, EventKind.LEASE_REVOKED, actor)


def reap(tx: Tx, limit: int = REAP_BATCH) -> int:
    """Finalise this host's leases past expires_at by the ledger clock; returns how many."""
    reaped = 0
    for lease in repo.expired_leases(tx.session, tx.host_id, tx.now, limit):
        reaped += _finish(tx, lease, LeaseState.EXPIRED, EventKind.LEASE_EXPIRED, "reaper",
                          only_if_expired=True)
    return reaped


def _end(tx: Tx, lease: Lease, state: LeaseState, kind: EventKind, actor: str) -> LeaseView:
    if lease.state == LeaseState.ACTIVE:
        if lease.host_id != tx.host_id:
            raise InvalidRequest(f"lease {lease.id} belongs to host {lease.host_id}; end it there")
        if not _finish(tx, lease, state, kind, actor, only_if_expired=False):
            # Past expires_at already: it ends as expired, whatever the caller wanted.
            _finish(tx, lease, LeaseState.EXPIRED, EventKind.LEASE_EXPIRED, "reaper",
                    only_if_expired=True)
    return view(tx, lease)


def _finish(tx: Tx, lease: Lease, state: LeaseState, kind: EventKind, actor: str, *,
            only_if_expired: bool) -> int:
    if not repo.end_lease(tx.session, lease.id, state, tx.now, only_if_expired=only_if_expired):
        return 0
    tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))
    repo.add_event(tx.session, at=tx.now, kind=kind, actor=actor, host_id=lease.host_id,
                   device_id=lease.device_id, lease_id=lease.id, offset=lease.offset,
                   length=lease.length, generation=lease.generation)
    return 1


def _lease(tx: Tx, lease_id: str) -> Lease:
    lease = repo.get_lease(tx.session, lease_id)
    if lease is None:
        raise UnknownLease(f"no lease {lease_id!r}")
    return lease


def _pool(tx: Tx, name: str | None) -> Pool:
    pool = repo.get_pool_by_name(tx.session, name or tx.default_pool)
    if pool is None:
        raise UnknownPool(f"no pool {name or tx.default_pool!r}")
    return pool


def _ttl(pool: Pool, ttl_s: int | None) -> int:
    ttl = pool.default_ttl_s if ttl_s is None else ttl_s
    if not 0 < ttl <= pool.max_ttl_s:
        raise InvalidRequest(f"ttl_s must be between 1 and {pool.max_ttl_s} in pool {pool.name!r}")
    return ttl


def _candidates(tx: Tx, pool: Pool, request: GrantRequest) -> list[tuple[Device, int]]:
    """Online devices of the pool that match the hints and could ever hold the lease, with the
    lease's length rounded up to each device's align."""
    devices = [
        d for d in repo.list_devices(tx.session, pool.id)
        if d.state == DeviceState.ONLINE and d.host_id in (None, tx.host_id)
        and d.kind in MAPPABLE_KINDS and request.device in (None, d.devname)
        and request.numa_node in (None, d.numa_node)
    ]
    fitting = [(d, round_up(request.size, d.align)) for d in devices]
    fitting = [(d, n) for d, n in fitting if n <= d.size]
    if pool.max_lease_size is not None:
        fitting = [(d, n) for d, n in fitting if n <= pool.max_lease_size]
    if not fitting:
        where = "matching the hints " if request.device or request.numa_node is not None else ""
        raise LeaseTooLarge(
            f"no online device {where}in pool {pool.name!r} can hold {request.size} bytes"
        )
    return fitting


def _place(tx: Tx, pool: Pool, devices: Sequence[tuple[Device, int]], size: int
           ) -> tuple[Device, int, Extent] | None:
    """Inside this host's claims first (no ledger round trip), else in a new claim."""
    for device, length in devices:
        placed = tx.space.place(device.id, length)
        if placed is not None:
            return device, placed[0], placed[1]
    for device, length in devices:
        if _claim(tx, pool, device, length):
            placed = tx.space.place(device.id, length)
            assert placed is not None
            return device, placed[0], placed[1]
    return None


def _claim(tx: Tx, pool: Pool, device: Device, length: int) -> bool:
    """Claim a slice of the device big enough for `length`, placed among every host's claims."""
    repo.lock_device(tx.session, device.id)
    taken = ExtentAllocator(device.size, device.align)
    for claim in repo.live_claims(tx.session, device_id=device.id):
        taken.reserve(Extent(claim.offset, claim.length))
    slice_ = round_up(pool.claim_slice, device.align) if pool.claim_slice else device.size
    extent = taken.allocate(min(round_up(length, slice_), device.size)) or taken.allocate(length)
    if extent is None:
        return False
    claim = Claim(device_id=device.id, host_id=tx.host_id, offset=extent.offset,
                  length=extent.length, state=ClaimState.ACTIVE, created_at=tx.now)
    tx.session.add(claim)
    tx.session.flush()
    tx.space.add_claim(claim.id, device.id, extent, device.align)
    repo.add_event(tx.session, at=tx.now, kind=EventKind.CLAIM_CREATED, actor="allocator",
                   host_id=tx.host_id, device_id=device.id, claim_id=claim.id,
                   offset=extent.offset, length=extent.length)
    return True
