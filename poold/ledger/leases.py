"""Lease lifecycle: grant, keepalive, release, revoke, reap.

Stateless functions run by the ledger writer inside its transaction (`Tx`); none commits. Each
checks everything it can before its first write and records an Event with every change, so a
refused request leaves nothing behind and every change is audited in its own transaction.

This is the writer's hot path: it runs Core statements on the writer's connection, reads pools and
devices from the writer's catalog snapshot, and queues its events on the Tx; the writer inserts
them in one statement before the transaction commits.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import NoReturn

from poold.errors import (
    DeviceBound,
    DeviceBusy,
    DeviceDraining,
    HostFenced,
    IdempotencyConflict,
    InvalidRequest,
    LeaseExpired,
    LeaseNotActive,
    LeaseTooLarge,
    NoCapacity,
    QuotaExceeded,
    SessionExpired,
    SessionNotActive,
    TenantNotAllowed,
    UnknownLease,
    UnknownPool,
    UnknownSession,
)
from poold.ledger import queries as q
from poold.ledger import sharing
from poold.ledger.tx import Tx, scrubs_before_reuse
from poold.ledger.views import (
    DeviceRecord,
    LeaseRecord,
    LeaseView,
    PoolRecord,
    Quota,
    SessionRecord,
    effective_state,
)
from poold.pool import ExtentAllocator
from poold.types import (
    MAX_BYTES,
    DeviceKind,
    DeviceState,
    EventKind,
    Extent,
    LeaseState,
    SessionState,
    is_lease_id,
    is_text,
    round_up,
)

REAP_BATCH = 500
# Kinds leases are granted on: devdax and emulated devices are mapped through their chardev;
# a system-ram device is a NUMA node's memory, handed to the holder as a memfd bound to that node
# (poold.daemon.nodemem). Every kind is accounted the same way: extents of the device's size.
MAPPABLE_KINDS = (DeviceKind.DEVDAX, DeviceKind.EMULATED, DeviceKind.SYSTEM_RAM,
                  DeviceKind.DAX_REGION)


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
    session_id: str | None = None
    elastic: bool = False

    def digest(self) -> str:
        """What must match for an idempotency key to be replayed rather than refused."""
        body: list[object] = [self.size, self.pool, self.ttl_s, sorted(self.labels.items()),
                              self.tenant, self.device, self.numa_node]
        if self.session_id is not None:  # as before for plain leases: their keys still match
            body.append(self.session_id)
        if self.elastic:
            body.append("elastic")
        return hashlib.sha256(json.dumps(body).encode()).hexdigest()


def view(tx: Tx, lease: LeaseRecord) -> LeaseView:
    device = tx.device(lease.device_id)
    assert device is not None  # the foreign key
    return LeaseView.build(lease, device, _pool_record(tx, lease.pool_id).name, tx.now)


def grant(tx: Tx, request: GrantRequest) -> LeaseView:
    _check_text(request)
    pool = pool_named(tx, request.pool)
    if not pool.admits(request.tenant):
        raise TenantNotAllowed(f"tenant {request.tenant!r} may not lease from pool "
                               f"{pool.name!r}")
    session = _session_of(tx, request)
    if session is None:
        ttl_s, expires_at = _ttl(pool, request.ttl_s), None
    else:  # it lives as long as its session, within the pool's policy
        ttl_s, expires_at = _ttl(pool, session.ttl_s), session.expires_at
    if request.size <= 0 or request.size > MAX_BYTES:
        raise InvalidRequest(f"size must be between 1 and {MAX_BYTES} bytes, got {request.size}")
    digest = request.digest()
    if request.idempotency_key is not None:
        replay = q.leases.lease_record_by_key(tx.conn, tx.host_id, request.tenant,
                                              request.idempotency_key)
        if replay is not None:
            if replay.request_digest != digest:
                raise IdempotencyConflict(
                    f"idempotency key {request.idempotency_key!r} was used for another request"
                )
            return view(tx, replay)
    devices = _candidates(tx, pool, request)
    # No reap here: _place's last pass (sharing.make_room) already expires every host's leases
    # past their time on each candidate device, this host's among them.
    placed = _place(tx, pool, devices)
    if placed is None:
        raise NoCapacity(f"no free extent of {request.size} bytes in pool {pool.name!r} now")
    device, claim_id, extent = placed
    if not pool.trusted and hands_whole(device) and device.tenant_scope is None:
        _bind(tx, device, request, claim_id, extent)
    if request.tenant is not None:
        try:
            _check_quota(tx, request.tenant, pool.id, extent.length)
        except QuotaExceeded:
            tx.space.free(claim_id, extent)
            raise
    lease = LeaseRecord(
        id=uuid.uuid4().hex, pool_id=pool.id, device_id=device.id, claim_id=claim_id,
        host_id=tx.host_id, tenant=request.tenant, offset=extent.offset, length=extent.length,
        generation=0, ttl_s=ttl_s, granted_at=tx.now,  # the insert draws the fencing token
        expires_at=expires_at or tx.now + timedelta(seconds=ttl_s), ended_at=None,
        state=LeaseState.ACTIVE.value, labels=dict(request.labels),
        idempotency_key=request.idempotency_key, request_digest=digest,
        session_id=request.session_id, elastic=request.elastic,
        # An elastic lease is in use from its grant on: a lease just granted to someone
        # waiting for room is never the coldest one to ask back, whatever its session last
        # reported of its older leases.
        # (A plain lease's coldness is its last renewal, which its keepalive moves on.)
        used_at=tx.now if request.elastic and request.session_id is not None else None,
    )
    lease = q.leases.insert_granted_lease(tx.conn, lease)
    tx.event(EventKind.LEASE_GRANTED, request.actor, host_id=tx.host_id, device_id=device.id,
             lease_id=lease.id, offset=extent.offset, length=extent.length,
             generation=lease.generation, ttl_s=ttl_s, requested=request.size,
             **({"elastic": True} if request.elastic else {}))
    return LeaseView.build(lease, device, pool.name, tx.now)


def keepalive(tx: Tx, lease_id: str, ttl_s: int | None, actor: str,
              tenant_only: str | None = None) -> LeaseView:
    """`tenant_only`: the caller is that tenant, and any other tenant's lease is unknown to it."""
    lease = _lease(tx, lease_id, tenant_only)
    if tx.fenced and lease.host_id == tx.host_id:
        raise HostFenced(f"lease {lease_id} is lost: host {tx.host_id} lost the ledger")
    if lease.session_id is not None:
        return _keepalive_in_session(tx, lease, actor)
    pool = _pool_record(tx, lease.pool_id)
    # The lease's own TTL, within what the pool allows now (an admin may have lowered it since):
    # a holder that asks nothing is never refused for a policy it did not choose.
    ttl = _ttl(pool, ttl_s) if ttl_s is not None else min(lease.ttl_s, pool.max_ttl_s)
    expires_at = tx.now + timedelta(seconds=ttl)
    if q.leases.renew_lease(tx.conn, lease_id, tx.now, expires_at, ttl) == 1:
        tx.event(EventKind.LEASE_RENEWED, actor, host_id=lease.host_id,
                 device_id=lease.device_id, lease_id=lease_id,
                 expires_at=expires_at.isoformat(), ttl_s=ttl)
        return view(tx, replace(lease, expires_at=expires_at, ttl_s=ttl))
    if effective_state(lease, tx.now) is LeaseState.EXPIRED:
        raise LeaseExpired(f"lease {lease_id} expired at {lease.expires_at.isoformat()}")
    raise LeaseNotActive(f"lease {lease_id} is {lease.state}")


def _keepalive_in_session(tx: Tx, lease: LeaseRecord, actor: str) -> LeaseView:
    """A lease in a session lives as long as the session: renewing it renews the session, and
    with it every lease in it (its expiry is the session's, never its own)."""
    if lease.state == LeaseState.ACTIVE and lease.expires_at > tx.now:
        session = q.sessions.session_record(tx.conn, lease.session_id or "")
        assert session is not None  # the foreign key
        expires_at, renewed = renew_session(tx, session, actor)
        if lease.id in renewed:
            return view(tx, replace(lease, expires_at=expires_at, ttl_s=session.ttl_s))
    if effective_state(lease, tx.now) is LeaseState.EXPIRED:
        raise LeaseExpired(f"lease {lease.id} expired at {lease.expires_at.isoformat()}")
    raise LeaseNotActive(f"lease {lease.id} is {lease.state}")


def renew_session(tx: Tx, session: SessionRecord, actor: str) -> tuple[datetime, list[str]]:
    """Renew a valid session and every valid lease in it, by its TTL: the new expiry, and the
    ids of those leases. One statement for the leases and one event for all of them (a
    keepalive of 64 leases costs about what one lease's does)."""
    if tx.fenced and session.host_id == tx.host_id:
        raise HostFenced(f"session {session.id} is lost: host {tx.host_id} lost the ledger")
    expires_at = tx.now + timedelta(seconds=session.ttl_s)
    renewed = q.sessions.renew_session(tx.conn, session.id, tx.now, expires_at, session.ttl_s)
    if renewed is None:
        if session.state == SessionState.ACTIVE:
            raise SessionExpired(f"session {session.id} expired at "
                                 f"{session.expires_at.isoformat()}")
        raise SessionNotActive(f"session {session.id} is {session.state}")
    tx.event(EventKind.SESSION_RENEWED, actor, host_id=session.host_id, session=session.id,
             expires_at=expires_at.isoformat(), leases=len(renewed))
    return expires_at, renewed


def _session_of(tx: Tx, request: GrantRequest) -> SessionRecord | None:
    """The session the grant names, if any: active and valid, this host's, the same tenant's
    (another tenant's session does not exist for the asker)."""
    if request.session_id is None:
        return None
    if not is_lease_id(request.session_id):
        raise UnknownSession(f"no session {request.session_id[:64]!r}")
    session = q.sessions.session_record(tx.conn, request.session_id)
    if session is None or session.tenant != request.tenant:
        raise UnknownSession(f"no session {request.session_id!r}")
    if session.host_id != tx.host_id:
        raise InvalidRequest(f"session {session.id} belongs to host {session.host_id}; "
                             "lease there, or open a session on this host")
    if request.ttl_s is not None and request.ttl_s != session.ttl_s:
        raise InvalidRequest(f"a lease in session {session.id} lives as long as the session "
                             f"(ttl_s {session.ttl_s}): leave ttl_s out")
    if session.state != SessionState.ACTIVE:
        raise SessionNotActive(f"session {session.id} is {session.state}")
    if session.expires_at <= tx.now:
        raise SessionExpired(f"session {session.id} expired at {session.expires_at.isoformat()}")
    return session


def release(tx: Tx, lease_id: str, actor: str, tenant_only: str | None = None) -> LeaseView:
    """Idempotent: releasing a finished lease returns it as it ended. `tenant_only` as for
    keepalive."""
    if tenant_only is not None:
        _lease(tx, lease_id, tenant_only)
    return _end(tx, lease_id, LeaseState.RELEASED, EventKind.LEASE_RELEASED, actor)


def revoke(tx: Tx, lease_id: str, actor: str) -> LeaseView:
    """An administrator ends a lease before its holder does; the holder learns at keepalive."""
    return _end(tx, lease_id, LeaseState.REVOKED, EventKind.LEASE_REVOKED, actor)


def reap(tx: Tx, limit: int = REAP_BATCH) -> int:
    """Finalise this host's leases past expires_at by the ledger clock; returns how many.

    The daemon runs this every reap_interval_s, so it also drops the catalog snapshot: what other
    hosts changed in pools and devices is seen within one tick.
    """
    tx.refresh_catalog()
    reaped = 0
    for lease in q.leases.expired_leases(tx.conn, tx.host_id, tx.now, limit):
        reaped += _expire(tx, lease)
    return reaped


def _end(tx: Tx, lease_id: str, state: LeaseState, kind: EventKind, actor: str) -> LeaseView:
    _known_id(lease_id)
    # The usual case, in one statement whose WHERE clause holds every check: this host's lease,
    # active and still valid.
    ended = q.leases.end_own_lease(tx.conn, lease_id, tx.host_id, state, tx.now)
    if ended is not None:
        return view(tx, _ended(tx, ended, kind, actor))
    lease = _lease(tx, lease_id)
    if lease.state == LeaseState.ACTIVE:
        if lease.host_id != tx.host_id:
            raise InvalidRequest(f"lease {lease.id} belongs to host {lease.host_id}; end it there")
        # Past expires_at already: it ends as expired, whatever the caller wanted.
        _expire(tx, lease)
        lease = _lease(tx, lease_id)  # as the ledger has it now (ended by us or meanwhile)
    return view(tx, lease)


def _expire(tx: Tx, lease: LeaseRecord) -> int:
    if not q.leases.expire_lease(tx.conn, lease.id, tx.now):
        return 0
    _ended(tx, replace(lease, state=LeaseState.EXPIRED.value, ended_at=tx.now),
           EventKind.LEASE_EXPIRED, "reaper")
    return 1


def _ended(tx: Tx, lease: LeaseRecord, kind: EventKind, actor: str) -> LeaseRecord:
    """A live lease just ended in the ledger (`lease` as it ended): audited, and its bytes are
    free again, or, in a pool that scrubs, kept as `scrubbing` until the daemon zeroed them
    (`finish_scrub`). Returns the lease as it is now."""
    scrub = scrubs_before_reuse(tx, _pool_record(tx, lease.pool_id), lease.device_id)
    tx.ended[lease.id] = scrub
    tx.event(kind, actor, host_id=lease.host_id, device_id=lease.device_id, lease_id=lease.id,
             offset=lease.offset, length=lease.length, generation=lease.generation, scrub=scrub)
    if scrub and q.scrubs.start_scrub(tx.conn, lease.id, LeaseState(lease.state)):
        # What it ended as, and its scrub's progress (none yet: it was live), are the
        # ledger's to keep; the answer shows it scrubbing.
        return replace(lease, state=LeaseState.SCRUBBING.value)
    tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))
    return lease


def scrub_progress(tx: Tx, lease_id: str, done: int) -> None:
    """Record how much of a scrubbing lease is zeroed (what `poold` shows as progress)."""
    q.scrubs.scrub_progress(tx.conn, lease_id, done)


def finish_scrub(tx: Tx, lease_id: str, actor: str = "scrubber") -> LeaseView | None:
    """The lease's bytes are zero: it takes the state it ended as and its extent is free.
    None if it was not scrubbing (finished already, or lost with its device)."""
    lease = q.scrubs.finish_scrub(tx.conn, lease_id)
    if lease is None:
        return None
    tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))
    tx.event(EventKind.LEASE_SCRUBBED, actor, host_id=lease.host_id, device_id=lease.device_id,
             lease_id=lease.id, offset=lease.offset, length=lease.length)
    return view(tx, lease)


def _pool_record(tx: Tx, pool_id: int) -> PoolRecord:
    pool = tx.catalog.pool_by_id(pool_id)
    if pool is None:  # added by another host since the snapshot
        tx.refresh_catalog()
        pool = tx.catalog.pool_by_id(pool_id)
    assert pool is not None
    return pool


def _check_text(request: GrantRequest) -> None:
    """What the grant stores as text holds no control character (the API refuses those first;
    a NUL byte would fail the whole transaction on PostgreSQL, not this command alone)."""
    texts = [request.pool, request.idempotency_key, request.tenant, request.device,
             *request.labels, *request.labels.values()]
    bad = next((t for t in texts if t is not None and not is_text(t)), None)
    if bad is not None:
        raise InvalidRequest(f"control characters in {bad[:64]!r}")


def _known_id(lease_id: str) -> None:
    """Anything but a lease id names no lease: refused without a query (a NUL byte would fail
    the whole transaction on PostgreSQL)."""
    if not is_lease_id(lease_id):
        raise UnknownLease(f"no lease {lease_id[:64]!r}")


def _lease(tx: Tx, lease_id: str, tenant_only: str | None = None) -> LeaseRecord:
    _known_id(lease_id)
    lease = q.leases.lease_record(tx.conn, lease_id)
    if lease is None or (tenant_only is not None and lease.tenant != tenant_only):
        raise UnknownLease(f"no lease {lease_id!r}")
    return lease


def tenant_scope(tenant: str | None) -> str:
    """Whose a device handed out whole is: its tenant, '' for leases of no tenant."""
    return tenant or ""


def hands_whole(device: DeviceRecord) -> bool:
    """A devdax device's holders are handed the whole device (not memory made for the lease)."""
    return device.kind == DeviceKind.DEVDAX


def _bind(tx: Tx, device: DeviceRecord, request: GrantRequest, claim_id: int,
          extent: Extent) -> None:
    """The first lease on a free device handed out whole: the device is its tenant's from now
    on, in the WHERE clause (another host may have bound it first: then this grant is refused)."""
    scope = tenant_scope(request.tenant)
    if not q.devices.bind_device(tx.conn, device.id, scope):
        tx.space.free(claim_id, extent)
        tx.refresh_catalog()
        raise DeviceBound(f"{device.devname} was just bound to another tenant's leases")
    tx.event(EventKind.DEVICE_CHANGED, request.actor, host_id=tx.host_id, device_id=device.id,
             devname=device.devname, changed={"tenant_scope": scope})
    tx.refresh_catalog()  # the snapshot's device does not say so yet


def _check_quota(tx: Tx, tenant: str, pool_id: int, length: int) -> None:
    """Refuse a grant that would take the tenant past a quota, its global ones or its own in
    the pool. The tenant's row stays locked to the end of the transaction (whichever quota is
    checked), so grants on other hosts wait rather than both pass. A tenant's first lease
    creates its row with the default quotas, once they admit it: a refused first lease leaves
    no tenant behind (two hosts creating it at once: one insert fails, and the writer reruns
    that grant, which then finds the row and waits on its lock)."""
    quota = q.tenants.lock_tenant_quota(tx.conn, tenant)
    new = quota is None
    if quota is None:  # (not `if new`: mypy narrows on the test itself)
        quota = tx.tenant_defaults
    if quota != (None, None):
        _within(quota, q.tenants.tenant_usage(tx.conn, tenant, tx.now), length,
                f"tenant {tenant!r}", "its quota")
    in_pool = tx.catalog.quota(pool_id, tenant)
    if in_pool is not None and in_pool != (None, None):
        pool = _pool_record(tx, pool_id)
        _within(in_pool, q.tenants.pool_usage(tx.conn, tenant, pool_id, tx.now), length,
                f"tenant {tenant!r}", f"its quota in pool {pool.name!r}")
    if new:
        max_bytes, max_leases = quota
        q.tenants.insert_tenant(tx.conn, tenant, tx.now, max_bytes, max_leases)
        tx.event(EventKind.TENANT_CHANGED, "daemon", host_id=tx.host_id, tenant=tenant,
                 max_bytes=max_bytes, max_leases=max_leases, reason="first lease")


def _within(quota: Quota, usage: tuple[int, int], length: int, who: str, which: str) -> None:
    max_bytes, max_leases = quota
    leased, live = usage
    if max_leases is not None and live + 1 > max_leases:
        raise QuotaExceeded(f"{who} holds {live} leases; {which} is {max_leases}")
    if max_bytes is not None and leased + length > max_bytes:
        raise QuotaExceeded(f"{who} holds {leased} bytes; {length} more would pass {which} "
                            f"of {max_bytes}")


def pool_named(tx: Tx, name: str | None) -> PoolRecord:
    """The live pool of that name (the host's default pool when None), else UnknownPool."""
    name = name or tx.default_pool
    pool = tx.catalog.pool(name)
    if pool is None:  # perhaps created by another host since the snapshot
        tx.refresh_catalog()
        pool = tx.catalog.pool(name)
    if pool is None:
        raise UnknownPool(f"no pool {name!r}")
    if pool.retired_at is not None:
        raise UnknownPool(f"pool {name!r} is retired")
    return pool


def _ttl(pool: PoolRecord, ttl_s: int | None) -> int:
    ttl = pool.default_ttl_s if ttl_s is None else ttl_s
    if not 0 < ttl <= pool.max_ttl_s:
        raise InvalidRequest(f"ttl_s must be between 1 and {pool.max_ttl_s} in pool {pool.name!r}")
    return ttl


def _candidates(tx: Tx, pool: PoolRecord, request: GrantRequest
                ) -> list[tuple[DeviceRecord, int]]:
    """Online devices of the pool that match the hints and could ever hold the lease, with the
    lease's length rounded up to each device's align."""
    devices = [
        d for d in tx.catalog.devices_in(pool.id)
        if d.host_id in (None, tx.host_id)
        and d.kind in MAPPABLE_KINDS and request.device in (None, d.devname)
        and request.numa_node in (None, d.numa_node)
    ]
    fitting = [(d, round_up(request.size, d.align)) for d in devices]
    fitting = [(d, n) for d, n in fitting if n <= d.size]
    if pool.max_lease_size is not None:
        fitting = [(d, n) for d, n in fitting if n <= pool.max_lease_size]
    usable = [(d, n) for d, n in fitting if d.state == DeviceState.ONLINE and d.id not in tx.held]
    if not usable:
        _refuse_unplaceable(tx, pool, request, [d for d, _n in fitting])
    if pool.trusted:
        return usable
    scope = tenant_scope(request.tenant)
    mine = [(d, n) for d, n in usable if not hands_whole(d) or d.tenant_scope in (None, scope)]
    if not mine:
        # Which tenant is not said: the asker may be another tenant.
        bound = ", ".join(d.devname for d, _n in usable)
        raise DeviceBound(f"{bound} in pool {pool.name!r} serve(s) another tenant's leases: a "
                          "device handed out whole serves one tenant at a time (a trusted pool "
                          "shares it); an admin frees one with `poold device unbind-tenant` "
                          "once that tenant's leases ended")
    # What needs no new binding first: memory made per lease, devices bound to this tenant.
    return sorted(mine, key=lambda x: hands_whole(x[0]) and x[0].tenant_scope is None)


def _refuse_unplaceable(tx: Tx, pool: PoolRecord, request: GrantRequest,
                        fitting: list[DeviceRecord]) -> NoReturn:
    """No online device can take the lease. If a draining one (or one an admin operation is
    changing) could, say so: that is a state an admin can end, not a lease too large."""
    draining = [d.devname for d in fitting if d.state == DeviceState.DRAINING]
    if draining:
        raise DeviceDraining(
            f"{', '.join(draining)} in pool {pool.name!r} {'is' if len(draining) == 1 else 'are'}"
            " draining: no new leases there (live ones run on) until an admin undrains it"
            + ("" if request.device else "; no other device can hold "
               f"{request.size} bytes"))
    busy = [d.devname for d in fitting if d.id in tx.held]
    if busy:
        raise DeviceBusy(f"{', '.join(busy)} is being changed by an admin operation: retry "
                         "when it is done")
    where = "matching the hints " if request.device or request.numa_node is not None else ""
    raise LeaseTooLarge(
        f"no online device {where}in pool {pool.name!r} can hold {request.size} bytes"
    )


def _place(tx: Tx, pool: PoolRecord, devices: Sequence[tuple[DeviceRecord, int]]
           ) -> tuple[DeviceRecord, int, Extent] | None:
    """Inside this host's claims first (no claim change), else in a new claim, else in a new
    claim after making room (other hosts' idle claimed bytes, expired leases, lost hosts)."""
    if tx.fenced:
        raise HostFenced(f"host {tx.host_id} lost the ledger for longer than its host_ttl: "
                         "it grants nothing until its heartbeat is back")
    for device, length in devices:
        placed = _place_in_claims(tx, device.id, length)
        if placed is not None:
            return device, placed[0], placed[1]
    for short in (False, True):
        for device, length in devices:
            if _claim(tx, pool, device, length, make_room=short):
                placed = _place_in_claims(tx, device.id, length)
                if placed is not None:
                    return device, placed[0], placed[1]
    return None


def _place_in_claims(tx: Tx, device_id: int, length: int) -> tuple[int, Extent] | None:
    """Best fit in this host's claims, in a claim the ledger confirms is still this host's
    (another host may have trimmed or adopted it; then the space is reloaded and it tries
    again)."""
    for _ in range(3):
        placed = tx.space.place(device_id, length)
        if placed is None or sharing.claim_is_mine(tx, placed[0]):
            return placed
        tx.space.free(*placed)
        sharing.resync_space(tx)
    return None


def _claim(tx: Tx, pool: PoolRecord, device: DeviceRecord, length: int,
           make_room: bool = False) -> bool:
    """Claim a slice of the device big enough for `length`, placed among every host's claims;
    with `make_room`, after freeing what nobody uses (poold.ledger.sharing.make_room)."""
    device = q.devices.lock_device(tx.conn, device.id)  # and read it as it is now
    if make_room:
        sharing.make_room(tx, device)
    taken = ExtentAllocator(device.size, device.align)
    for claimed in q.claims.live_claim_extents(tx.conn, device.id):
        taken.reserve(claimed)
    slice_ = round_up(pool.claim_slice, device.align) if pool.claim_slice else device.size
    extent = taken.allocate(min(round_up(length, slice_), device.size)) or taken.allocate(length)
    if extent is None:
        return False
    claim_id = q.claims.insert_claim(tx.conn, device_id=device.id, host_id=tx.host_id,
                                     extent=extent, now=tx.now)
    tx.space.add_claim(claim_id, device.id, extent, device.align)
    tx.checked_claims.add(claim_id)
    tx.event(EventKind.CLAIM_CREATED, "allocator", host_id=tx.host_id, device_id=device.id,
             claim_id=claim_id, offset=extent.offset, length=extent.length)
    return True
