"""Read side of the ledger: snapshots for the API and CLI, judged by the ledger clock.

Reads run on their own connections (WAL readers on SQLite) and never wait for the writer.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from poold.errors import UnknownDevice, UnknownHost, UnknownLease, UnknownPool, UnknownSession
from poold.ledger import queries as q
from poold.ledger.views import (
    SESSION_COLUMNS,
    ClaimView,
    DeviceView,
    EventView,
    HostView,
    LeaseView,
    PoolQuotaView,
    PoolView,
    ScrubJob,
    SessionRecord,
    SessionView,
)
from poold.models import Claim, ClientSession, Device, Lease, PoolQuota
from poold.types import DeviceKind, DeviceState, LeaseState, SessionState, is_lease_id


def devices(session: Session, now: datetime) -> list[DeviceView]:
    names = q.pools.pool_names(session)
    claimed = q.counters.live_usage(session, Claim, "device", None)
    leased = q.counters.live_usage(session, Lease, "device", now)
    scrubbing = q.counters.live_usage(session, Lease, "device", None, LeaseState.SCRUBBING.value)
    return [_device_view(d, names[d.pool_id], claimed, leased, scrubbing)
            for d in q.devices.list_devices(session)]


def _device_view(device: Device, pool: str, claimed: dict[int, tuple[int, int]],
                 leased: dict[int, tuple[int, int]], scrubbing: dict[int, tuple[int, int]]
                 ) -> DeviceView:
    claimed_bytes, _claims = claimed.get(device.id, (0, 0))
    leased_bytes, live = leased.get(device.id, (0, 0))
    scrubbing_bytes, _scrubbing = scrubbing.get(device.id, (0, 0))
    return DeviceView(
        id=device.id, uid=device.uid, devname=device.devname, kind=device.kind,
        chardev=device.chardev, pool=pool, host=device.host_id, size=device.size,
        align=device.align, numa_node=device.numa_node, state=device.state,
        claimed_bytes=claimed_bytes, leased_bytes=leased_bytes,
        scrubbing_bytes=scrubbing_bytes,
        free_bytes=device.size - claimed_bytes, live_leases=live,
        tenant_scope=device.tenant_scope, pool_assigned=device.pool_assigned,
    )


def pools(session: Session, now: datetime, *, retired: bool = False) -> list[PoolView]:
    """Every pool with its policy, devices, usage and per-tenant quotas (retired ones too when
    `retired`)."""
    by_pool: dict[str, list[DeviceView]] = {}
    for device in devices(session, now):
        by_pool.setdefault(device.pool, []).append(device)
    quotas = _pool_quotas(session, now)
    views = []
    for pool in q.pools.list_pools(session):
        if pool.retired_at is not None and not retired:
            continue
        # Missing devices hold no leasable bytes; their live extents are still reported.
        members = by_pool.get(pool.name, [])
        present = [d for d in members if d.state != DeviceState.MISSING]
        size = sum(d.size for d in present)
        claimed = sum(d.claimed_bytes for d in present)
        leased = sum(d.leased_bytes for d in present)
        scrubbing = sum(d.scrubbing_bytes for d in present)
        views.append(PoolView(
            id=pool.id, name=pool.name, devices=len(members), size=size, claimed_bytes=claimed,
            leased_bytes=leased, scrubbing_bytes=scrubbing, free_bytes=size - claimed,
            available_bytes=size - leased - scrubbing,
            live_leases=sum(d.live_leases for d in members), claim_slice=pool.claim_slice,
            default_ttl_s=pool.default_ttl_s, max_ttl_s=pool.max_ttl_s,
            max_lease_size=pool.max_lease_size, scrub_on_release=pool.scrub_on_release,
            trusted=pool.trusted, description=pool.description,
            allowed_tenants=pool.allowed_tenants, retired_at=pool.retired_at,
            quotas=[PoolQuotaView(tenant=quota.tenant, max_bytes=quota.max_bytes,
                                  max_leases=quota.max_leases, leased_bytes=leased_there,
                                  live_leases=live_there)
                    for quota, leased_there, live_there in quotas.get(pool.id, [])],
        ))
    return views


def _pool_quotas(session: Session, now: datetime
                 ) -> dict[int, list[tuple[PoolQuota, int, int]]]:
    """Every per-pool quota with what its tenant holds in that pool now: {pool_id: [(quota,
    leased_bytes, live_leases)]}."""
    usage = q.tenants.usage_by_pool(session.connection(), now)
    found: dict[int, list[tuple[PoolQuota, int, int]]] = {}
    for quota in session.scalars(select(PoolQuota).order_by(PoolQuota.tenant)):
        leased, live = usage.get((quota.pool_id, quota.tenant), (0, 0))
        found.setdefault(quota.pool_id, []).append((quota, leased, live))
    return found


def pool(session: Session, now: datetime, name: str) -> PoolView:
    found = next((p for p in pools(session, now, retired=True) if p.name == name), None)
    if found is None:
        raise UnknownPool(f"no pool {name!r}")
    return found


def pool_id(session: Session, name: str) -> int:
    pool = q.pools.get_pool_by_name(session, name)
    if pool is None:
        raise UnknownPool(f"no pool {name!r}")
    return pool.id


def lease(session: Session, lease_id: str, now: datetime, *,
          tenant_only: str | None = None) -> LeaseView:
    """`tenant_only`: asked by that tenant, to whom other tenants' leases do not exist."""
    if not is_lease_id(lease_id):  # names no lease: no query
        raise UnknownLease(f"no lease {lease_id[:64]!r}")
    found = q.leases.get_lease(session, lease_id)
    if found is None or (tenant_only is not None and found.tenant != tenant_only):
        raise UnknownLease(f"no lease {lease_id!r}")
    return _lease_views(session, [found], now)[0]


def lease_memory(session: Session, lease_id: str, now: datetime
                 ) -> tuple[LeaseView, str, int | None]:
    """A lease with the kind and NUMA node of its device: where its memory is (the fd server
    hands a chardev for devdax and emulated devices, a node-bound memfd for system-ram)."""
    view = lease(session, lease_id, now)
    device = q.devices.devices_by_id(session)[view.device_id]
    return view, device.kind, device.numa_node


def memory_leases(session: Session, now: datetime, *, host_id: str
                  ) -> dict[str, tuple[DeviceKind, LeaseState]]:
    """This host's leases that still hold their extent (active or scrubbing) on devices whose
    leases are memory objects of the daemon (emulated, system-ram): id -> (kind, state)."""
    kinds = {d.id: DeviceKind(d.kind) for d in q.devices.list_devices(session)
             if d.kind in (DeviceKind.EMULATED, DeviceKind.SYSTEM_RAM)}
    return {x.id: (kinds[x.device_id], LeaseState(x.state))
            for x in q.leases.live_leases(session, host_id=host_id) if x.device_id in kinds}


def still_holding(session: Session, now: datetime, *, lease_ids: Collection[str]) -> set[str]:
    """Of these leases, those that still hold their extent (active, or scrubbing)."""
    return q.leases.holding_among(session, lease_ids, now)


def region_leases(session: Session, now: datetime, *, host_id: str) -> list[LeaseView]:
    """This host's leases that hold their extent on regions carved per lease."""
    devices_ = q.devices.devices_by_id(session)
    found = [x for x in q.leases.live_leases(session, host_id=host_id)
             if devices_[x.device_id].kind == DeviceKind.DAX_REGION]
    return _lease_views(session, found, now)


def leases(session: Session, now: datetime, *, state: LeaseState | None = None,
           pool: str | None = None, tenant: str | None = None, host: str | None = None,
           limit: int = 1000) -> list[LeaseView]:
    pid = pool_id(session, pool) if pool is not None else None
    found = q.leases.list_leases(session, state=state, pool_id=pid, now=now, limit=limit,
                                 tenant=tenant, host_id=host)
    return _lease_views(session, found, now)


def _lease_views(session: Session, found: Sequence[Lease], now: datetime) -> list[LeaseView]:
    devices_ = q.devices.devices_by_id(session)
    names = q.pools.pool_names(session)
    return [LeaseView.build(x, devices_[x.device_id], names[x.pool_id], now) for x in found]


def events(session: Session, *, limit: int = 100, after_id: int | None = None,
           lease_id: str | None = None, kind: str | None = None) -> list[EventView]:
    found = q.events.list_events(session, limit=limit, after_id=after_id, lease_id=lease_id,
                                 kind=kind)
    return [EventView.build(e) for e in found]


def hosts(session: Session, now: datetime) -> list[HostView]:
    claimed = q.counters.live_usage(session, Claim, "host", None)
    leased = q.counters.live_usage(session, Lease, "host", now)
    views = []
    for h in q.hosts.list_hosts(session):
        claimed_bytes, claims = claimed.get(h.id, (0, 0))
        leased_bytes, live = leased.get(h.id, (0, 0))
        views.append(HostView(
            id=h.id, name=h.name, state=h.state, registered_at=h.registered_at,
            last_seen_at=h.last_seen_at,
            heartbeat_age_s=max(0.0, (now - h.last_seen_at).total_seconds()),
            claims=claims, claimed_bytes=claimed_bytes, live_leases=live, leased_bytes=leased_bytes,
        ))
    return views


def host(session: Session, host_id: str, now: datetime) -> HostView:
    for view in hosts(session, now):
        if view.id == host_id:
            return view
    raise UnknownHost(f"no host {host_id!r}")


def device_extents(session: Session, device_id: int, now: datetime
                   ) -> tuple[DeviceView, list[ClaimView], list[LeaseView]]:
    """One device's live claims and leases, for drawing its memory map."""
    device = next((d for d in devices(session, now) if d.id == device_id), None)
    if device is None:
        raise UnknownDevice(f"no device {device_id}")
    claims = [ClaimView(id=c.id, host=c.host_id, offset=c.offset, length=c.length,
                        created_at=c.created_at)
              for c in q.claims.live_claims(session, device_id=device_id)]
    return device, claims, _lease_views(session, q.leases.live_leases_on_device(session, device_id),
                                        now)


def scrubbing(session: Session, _now: datetime, *, host_id: str) -> list[ScrubJob]:
    """This host's leases waiting to be zeroed (or, on a region carved per lease, for their
    device to go), with where their bytes are."""
    devices_ = q.devices.devices_by_id(session)
    scrubs = {p.id: p.scrub_on_release for p in q.pools.list_pools(session)}
    # Never another host's own device: its chardev names some other device here (a ledger
    # from before leases on such devices stopped being adopted may still hold one).
    return [ScrubJob(lease_id=x.id, chardev=devices_[x.device_id].chardev, offset=x.offset,
                     length=x.length, done=x.scrubbed_bytes, kind=devices_[x.device_id].kind,
                     zero=scrubs[x.pool_id])  # every pool, retired ones too
            for x in q.scrubs.scrubbing_leases(session, host_id)
            if devices_[x.device_id].host_id in (None, host_id)]


def sessions(session: Session, now: datetime, *, tenant: str | None = None,
             host: str | None = None, state: SessionState | None = None,
             limit: int = 1000) -> list[SessionView]:
    """Newest first, each with the ids of its live leases."""
    found = q.sessions.list_sessions(session, tenant=tenant, host_id=host, state=state, now=now,
                                     limit=limit)
    ids = [s.id for s in found]
    live, asked = q.sessions.live_lease_ids(session, ids, now), q.reclaims.asks_by_session(session,
                                                                                          ids)
    return [SessionView.build(_session_record(s), live[s.id], now, asked[s.id]) for s in found]


def client_session(session: Session, session_id: str, now: datetime, *,
                   tenant_only: str | None = None) -> SessionView:
    """`tenant_only`: asked by that tenant, to whom other tenants' sessions do not exist."""
    if not is_lease_id(session_id):
        raise UnknownSession(f"no session {session_id[:64]!r}")
    found = q.sessions.get_session(session, session_id)
    if found is None or (tenant_only is not None and found.tenant != tenant_only):
        raise UnknownSession(f"no session {session_id!r}")
    live = q.sessions.live_lease_ids(session, [found.id], now)
    asked = q.reclaims.asks_by_session(session, [found.id])
    return SessionView.build(_session_record(found), live[found.id], now, asked[found.id])


def _session_record(row: ClientSession) -> SessionRecord:
    return SessionRecord(**{name: getattr(row, name) for name in SESSION_COLUMNS})
