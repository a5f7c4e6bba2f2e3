"""Pools administered in the ledger: their policy, created, edited and retired by an admin, a
tenant's quotas inside one pool, and a host's config seeding a pool it names for the first time.

The ledger is the one source of a pool's policy for every host. A host's config file only seeds
a pool the ledger does not have yet; after that the ledger wins, and what a file says
differently is returned by `seed` for the daemon to log and show. Every change here bumps the
ledger's catalog version (`q.pools.catalog_changed`) in its own transaction: each daemon of the
ledger compares that version before every batch of commands, so the next grant anywhere obeys
the policy an admin's answer reported.

Ledger commands (functions of `Tx`) run by the writer; none commits. Each checks everything
before its first write, so a refused change leaves every row as it was.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from poold.errors import (
    Conflict,
    InvalidRequest,
    UnknownPool,
    UnknownTenant,
)
from poold.ledger import queries as q
from poold.ledger.tenants import ensure_tenant
from poold.ledger.tx import Tx
from poold.ledger.views import PoolView
from poold.models import Device, Pool, PoolQuota, PoolRule
from poold.types import MAX_BYTES, DeviceState, EventKind, is_text

NAME_PATTERN = r"^[A-Za-z0-9][\w.-]*$"  # as a tenant's: safe in a URL path and a shell
NAME_MAX = 128
DESCRIPTION_MAX = 1024
ALLOWED_TENANTS_MAX = 1024
MAX_TTL_S = 10 * 365 * 86_400  # ten years, the most a grant may ask (api.schemas)


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """What an admin decides about a pool; everything grants obey there."""

    name: str
    claim_slice: int
    default_ttl_s: int
    max_ttl_s: int
    max_lease_size: int | None = None
    scrub_on_release: bool = True  # the safe default: see Settings.unscrubbed_pools
    trusted: bool = False  # the safe default: see Settings.trusted_pools
    description: str = ""
    allowed_tenants: list[str] | None = None  # None: every tenant

    @classmethod
    def of(cls, pool: Pool | PoolView) -> PoolPolicy:
        return cls(**{f.name: getattr(pool, f.name) for f in fields(cls)})

    def checked(self) -> PoolPolicy:
        """The policy if every field is valid (allowed tenants sorted, once each), else
        InvalidRequest naming the first field that is not."""
        _check_name(self.name, "pool name")
        if not 0 < self.default_ttl_s <= self.max_ttl_s <= MAX_TTL_S:
            raise InvalidRequest(f"need 1 <= default_ttl_s ({self.default_ttl_s}) <= max_ttl_s "
                                 f"({self.max_ttl_s}) <= {MAX_TTL_S}")
        if not 0 <= self.claim_slice <= MAX_BYTES:
            raise InvalidRequest(f"claim_slice must be between 0 (whole devices) and "
                                 f"{MAX_BYTES} bytes, got {self.claim_slice}")
        if self.max_lease_size is not None and not 0 < self.max_lease_size <= MAX_BYTES:
            raise InvalidRequest(f"max_lease_size must be between 1 and {MAX_BYTES} bytes "
                                 f"(or null: no limit), got {self.max_lease_size}")
        if len(self.description) > DESCRIPTION_MAX or not is_text(self.description):
            raise InvalidRequest(f"description: at most {DESCRIPTION_MAX} characters, "
                                 "no control characters")
        allowed = self.allowed_tenants
        if allowed is not None:
            if len(allowed) > ALLOWED_TENANTS_MAX:
                raise InvalidRequest(f"allowed_tenants: at most {ALLOWED_TENANTS_MAX} names")
            for tenant in allowed:
                _check_name(tenant, "tenant name")
            allowed = sorted(set(allowed))
        return replace(self, allowed_tenants=allowed)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A setting this host's config file gives a pool otherwise than the ledger (which wins)."""

    pool: str
    setting: str
    file: Any
    ledger: Any


def _check_name(name: str, what: str) -> None:
    if not (0 < len(name) <= NAME_MAX and re.fullmatch(NAME_PATTERN, name)):
        raise InvalidRequest(f"{what} {name[:64]!r}: 1 to {NAME_MAX} letters, digits, '.', '_' "
                             "or '-', starting with a letter or digit")


def live_pool(session: Session, name: str) -> Pool:
    """The pool of that name, unless retired (UnknownPool either way)."""
    pool = q.pools.get_pool_by_name(session, name)
    if pool is None or pool.retired_at is not None:
        raise UnknownPool(f"no pool {name!r}" if pool is None else f"pool {name!r} is retired")
    return pool


# --- seeding from a host's config ---------------------------------------------------------------


def seed(tx: Tx, policy: PoolPolicy) -> tuple[Pool, list[Disagreement]]:
    """The pool the config names: created with the file's policy if the ledger has no pool of
    that name, else the ledger's as it is, with what the file says otherwise."""
    pool = q.pools.get_pool_by_name(tx.session, policy.name)
    if pool is None:
        pool = Pool(created_at=tx.now, **asdict(policy.checked()))
        tx.session.add(pool)
        tx.session.flush()
        q.pools.catalog_changed(tx.conn)
        q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_CREATED, actor="daemon",
                           host_id=tx.host_id, pool=policy.name, seeded="config")
        return pool, []
    return pool, disagreements(policy, PoolPolicy.of(pool), pool.retired_at is not None)


def disagreements(file: PoolPolicy, ledger: PoolPolicy, retired: bool) -> list[Disagreement]:
    """What a host's config says of a pool otherwise than the ledger (a retired pool the file
    still names included)."""
    differ = [Disagreement(ledger.name, name, getattr(file, name), getattr(ledger, name))
              for name in SEEDED if getattr(file, name) != getattr(ledger, name)]
    if retired:
        differ.append(Disagreement(ledger.name, "retired", False, True))
    return differ


# What a host's config says of a pool (the rest exists only in the ledger).
SEEDED = ("claim_slice", "default_ttl_s", "max_ttl_s", "scrub_on_release", "trusted")


# --- admin commands -------------------------------------------------------------------------------


def create_pool(tx: Tx, policy: PoolPolicy, actor: str) -> Pool:
    """A new pool, or a retired one of that name brought back with this policy; a live pool of
    that name is a Conflict."""
    policy = policy.checked()
    pool = q.pools.get_pool_by_name(tx.session, policy.name)
    if pool is not None and pool.retired_at is None:
        raise Conflict(f"pool {policy.name!r} exists: edit it instead")
    if pool is None:
        pool = Pool(created_at=tx.now, **asdict(policy))
        tx.session.add(pool)
    else:
        for key, value in asdict(policy).items():
            setattr(pool, key, value)
        pool.retired_at = None
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_CREATED, actor=actor,
                       host_id=tx.host_id, pool=policy.name, policy=_wire(policy))
    return pool


def edit_pool(tx: Tx, name: str, changes: dict[str, Any], actor: str) -> Pool:
    """Change some of the pool's policy (`changes`: field -> new value). Leases already granted
    keep their TTL and bytes; the next grant and keepalive anywhere obey the new policy."""
    unknown = sorted(set(changes) - ({f.name for f in fields(PoolPolicy)} - {"name"}))
    if unknown:
        raise InvalidRequest(f"cannot change {', '.join(unknown)} of a pool")
    pool = live_pool(tx.session, name)
    before = PoolPolicy.of(pool)
    after = replace(before, **changes).checked()
    changed = {f.name: [getattr(before, f.name), getattr(after, f.name)]
               for f in fields(PoolPolicy) if getattr(before, f.name) != getattr(after, f.name)}
    if not changed:
        return pool
    for key, (_old, new) in changed.items():
        setattr(pool, key, new)
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_CHANGED, actor=actor,
                       host_id=tx.host_id, pool=name, changed=changed)
    return pool


def retire_pool(tx: Tx, name: str, actor: str, *, keep: frozenset[str] = frozenset()) -> Pool:
    """Retire an empty pool: it grants nothing and takes no device; its name and history stay
    (creating it again brings it back). Refused while a device (present or draining) is in it,
    a placement rule names it, or it is in `keep` (the pools this daemon's config places
    devices in)."""
    pool = live_pool(tx.session, name)
    if name in keep:
        raise Conflict(f"pool {name!r} is where this host's config places devices "
                       "(default_pool or device_pools): change the config first")
    members = tx.session.scalars(select(Device.devname).where(
        Device.pool_id == pool.id, Device.state != DeviceState.MISSING)).all()
    if members:
        raise Conflict(f"pool {name!r} holds {len(members)} device(s) "
                       f"({', '.join(sorted(members)[:5])}): move them out first")
    ruled = tx.session.scalars(select(PoolRule.pattern).where(PoolRule.pool_id == pool.id)).all()
    if ruled:
        raise Conflict(f"placement rules send devices to pool {name!r} ({', '.join(ruled[:5])}): "
                       "change the rules first")
    pool.retired_at = tx.now
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_RETIRED, actor=actor,
                       host_id=tx.host_id, pool=name)
    return pool


def set_pool_quota(tx: Tx, name: str, tenant: str, *, max_bytes: int | None,
                   max_leases: int | None, actor: str) -> PoolQuota:
    """Set the tenant's quotas in the pool (None: unlimited there; its global quotas still
    hold). A tenant unknown so far is created with the default global quotas."""
    _check_name(tenant, "tenant name")
    _check_quota(max_bytes, max_leases)
    pool = live_pool(tx.session, name)
    ensure_tenant(tx, tenant)
    quota = tx.session.get(PoolQuota, (pool.id, tenant))
    if quota is None:
        quota = PoolQuota(pool_id=pool.id, tenant=tenant)
        tx.session.add(quota)
    quota.max_bytes, quota.max_leases = max_bytes, max_leases
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_QUOTA_CHANGED, actor=actor,
                       host_id=tx.host_id, pool=name, tenant=tenant, max_bytes=max_bytes,
                       max_leases=max_leases)
    return quota


def clear_pool_quota(tx: Tx, name: str, tenant: str, actor: str) -> None:
    """The tenant has no quota of its own in the pool any more (its global ones still hold)."""
    pool = live_pool(tx.session, name)
    quota = tx.session.get(PoolQuota, (pool.id, tenant))
    if quota is None:
        raise UnknownTenant(f"tenant {tenant!r} has no quota in pool {name!r}")
    tx.session.delete(quota)
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_QUOTA_CHANGED, actor=actor,
                       host_id=tx.host_id, pool=name, tenant=tenant, cleared=True)


def _check_quota(max_bytes: int | None, max_leases: int | None) -> None:
    if max_bytes is not None and not 0 <= max_bytes <= MAX_BYTES:
        raise InvalidRequest(f"max_bytes must be between 0 and {MAX_BYTES}, got {max_bytes}")
    if max_leases is not None and not 0 <= max_leases <= 2**31 - 1:
        raise InvalidRequest(f"max_leases must be between 0 and {2**31 - 1}, got {max_leases}")


def _wire(policy: PoolPolicy) -> dict[str, Any]:
    return {k: v for k, v in asdict(policy).items() if k != "name"}

