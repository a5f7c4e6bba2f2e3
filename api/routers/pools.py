"""/v1/pools: pools, their policy and their tenants' quotas, administered in the ledger.

Anyone authenticated reads the pools; a tenant sees those it may lease from, and of their policy
nothing about other tenants (the allow-list and quotas are cut to its own name). Admins create,
edit and retire pools and set quotas; each change holds on every daemon of the ledger from its
next grant (poold.ledger.pools).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, replace
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, status

from api.auth import AdminDep, OperatorDep, PrincipalDep
from api.deps import LedgerDep, ledger_of
from api.errors import ERROR_RESPONSES
from api.schemas import (
    ConfigDisagreement,
    DeviceMove,
    Pool,
    PoolCreate,
    PoolEdit,
    PoolName,
    PoolRule,
    PoolRules,
    PoolRulesView,
    TenantName,
    TenantQuota,
)
from poold.errors import UnknownPool
from poold.ledger import membership, pools, reads
from poold.ledger.views import PoolView
from poold.types import GiB, Principal

router = APIRouter(prefix="/v1", tags=["pools"], responses=ERROR_RESPONSES)
PoolPath = Annotated[PoolName, Path()]
# A pool created through the API takes, for the fields the request leaves out, what this
# daemon's config seeds its default pool with (app.state.pool_template, set by the daemon).
_FALLBACK = pools.PoolPolicy(name="-", claim_slice=GiB, default_ttl_s=60, max_ttl_s=86_400)


@router.get("/pools")
def list_pools(ledger: LedgerDep, principal: PrincipalDep, request: Request,
               retired: Annotated[bool, Query(description="Retired pools too.")] = False
               ) -> list[Pool]:
    found = ledger.read(lambda s, now: reads.pools(s, now, retired=retired))
    return [_shown(request, principal, p) for p in found if _visible(principal, p)]


@router.get("/pool-rules")
def get_rules(ledger: LedgerDep, request: Request, _who: OperatorDep) -> PoolRulesView:
    """Where devices go as they appear: the first rule whose glob matches wins, else the
    daemon's default_pool. Also what this daemon's config says (it seeded them once)."""
    found = ledger.read(lambda s, _now: membership.rules(s))
    config: list[membership.Rule] = getattr(request.app.state, "config_rules", [])
    return PoolRulesView(rules=[PoolRule.model_validate(asdict(r)) for r in found],
                         config_rules=[PoolRule.model_validate(asdict(r)) for r in config])


@router.put("/pool-rules")
async def set_rules(body: PoolRules, request: Request, admin: AdminDep) -> PoolRulesView:
    """Replace the rules (in order). They place devices that appear from now on; a device
    already in a pool stays (move it to change that)."""
    wanted = [membership.Rule(r.field, r.pattern, r.pool) for r in body.rules]
    await _submit(request, partial(membership.set_rules, wanted=wanted, actor=admin.actor))
    return await asyncio.to_thread(get_rules, ledger_of(request), request, admin)


@router.get("/pools/{name}")
def get_pool(name: PoolPath, ledger: LedgerDep, principal: PrincipalDep,
             request: Request) -> Pool:
    found = ledger.read(lambda s, now: reads.pool(s, now, name))
    if not _visible(principal, found):
        raise UnknownPool(f"no pool {name!r}")
    return _shown(request, principal, found)


@router.post("/pools", status_code=status.HTTP_201_CREATED)
async def create_pool(body: PoolCreate, request: Request, admin: AdminDep) -> Pool:
    """A new pool (or a retired one brought back); 409 if a pool of that name is live."""
    template: pools.PoolPolicy = getattr(request.app.state, "pool_template", _FALLBACK)
    given = {k: v for k, v in body.model_dump().items() if v is not None}  # null: not given
    policy = pools.PoolPolicy(
        name=body.name, claim_slice=given.get("claim_slice", template.claim_slice),
        default_ttl_s=given.get("default_ttl_s", template.default_ttl_s),
        max_ttl_s=given.get("max_ttl_s", template.max_ttl_s),
        max_lease_size=given.get("max_lease_size"),
        scrub_on_release=given.get("scrub_on_release", True),
        trusted=given.get("trusted", False), description=given.get("description", ""),
        allowed_tenants=given.get("allowed_tenants"))
    await _submit(request, partial(pools.create_pool, policy=policy, actor=admin.actor))
    return await _read(request, admin, body.name)


@router.patch("/pools/{name}")
async def edit_pool(name: PoolPath, body: PoolEdit, request: Request, admin: AdminDep) -> Pool:
    """Change the fields given; null clears max_lease_size (no limit) and allowed_tenants
    (every tenant). Live leases keep their bytes and TTL; the next grant obeys."""
    changes = body.model_dump(exclude_unset=True)
    if "description" in changes and changes["description"] is None:
        changes["description"] = ""  # null clears it
    for key in ("scrub_on_release", "trusted", "default_ttl_s", "max_ttl_s", "claim_slice"):
        if key in changes and changes[key] is None:
            changes.pop(key)  # null means "not given" where the policy needs a value
    await _submit(request, partial(pools.edit_pool, name=name, changes=changes,
                                   actor=admin.actor))
    return await _read(request, admin, name)


@router.delete("/pools/{name}")
async def retire_pool(name: PoolPath, request: Request, admin: AdminDep) -> Pool:
    """Retire an empty pool (409 while a device is in it, or when it is where this daemon's
    config places devices). Its name and history stay; creating it again brings it back."""
    keep = frozenset(_seeds(request))
    await _submit(request, partial(pools.retire_pool, name=name, actor=admin.actor, keep=keep))
    return await _read(request, admin, name)


@router.put("/pools/{name}/quotas/{tenant}")
async def set_quota(name: PoolPath, tenant: Annotated[TenantName, Path()], body: TenantQuota,
                    request: Request, admin: AdminDep) -> Pool:
    """The tenant's quotas in this pool (null: unlimited here); its global quotas still hold."""
    await _submit(request, partial(pools.set_pool_quota, name=name, tenant=tenant,
                                   max_bytes=body.max_bytes, max_leases=body.max_leases,
                                   actor=admin.actor))
    return await _read(request, admin, name)


@router.delete("/pools/{name}/quotas/{tenant}")
async def clear_quota(name: PoolPath, tenant: Annotated[TenantName, Path()], request: Request,
                      admin: AdminDep) -> Pool:
    """The tenant has no quota of its own in the pool any more (404 if it had none)."""
    await _submit(request, partial(pools.clear_pool_quota, name=name, tenant=tenant,
                                   actor=admin.actor))
    return await _read(request, admin, name)


@router.post("/pools/{name}/devices")
async def move_device(name: PoolPath, body: DeviceMove, request: Request,
                      admin: AdminDep) -> Pool:
    """Move a device into this pool (409 DeviceBusy while a lease holds bytes on it or another
    host holds a claim on it: drain it first). It stays there across restarts."""
    await _submit(request, partial(membership.move_device, device_id=body.device_id, name=name,
                                   actor=admin.actor))
    return await _read(request, admin, name)


async def _submit(request: Request, command: Any) -> Any:
    return await ledger_of(request).call(command)


async def _read(request: Request, principal: Principal, name: str) -> Pool:
    found = await asyncio.to_thread(ledger_of(request).read,
                                    lambda s, now: reads.pool(s, now, name))
    return _shown(request, principal, found)


def _seeds(request: Request) -> dict[str, pools.PoolPolicy]:
    seeds: dict[str, pools.PoolPolicy] = getattr(request.app.state, "seed_policies", {})
    return seeds


def _visible(principal: Principal, pool: PoolView) -> bool:
    """A tenant sees the live pools it may lease from."""
    if principal.tenant is None or principal.is_admin:
        return True
    allowed = pool.allowed_tenants
    return pool.retired_at is None and (allowed is None or principal.tenant in allowed)


def _shown(request: Request, principal: Principal, pool: PoolView) -> Pool:
    if principal.tenant is not None and not principal.is_admin:
        mine = [principal.tenant]
        pool = replace(pool, allowed_tenants=None if pool.allowed_tenants is None else mine,
                       quotas=[x for x in pool.quotas if x.tenant == principal.tenant])
    shown = Pool.model_validate(asdict(pool))
    seed = _seeds(request).get(pool.name)
    if seed is not None and principal.is_admin:
        differ = pools.disagreements(seed, pools.PoolPolicy.of(pool), pool.retired_at is not None)
        shown.config_disagrees = [ConfigDisagreement(setting=d.setting, file=d.file,
                                                     ledger=d.ledger) for d in differ]
    return shown
