"""Who am I, bearer tokens and tenants with their quotas (admins manage; tenants read their own)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Request, status

from api.auth import AdminDep, PrincipalDep, TokenAuthenticator
from api.deps import LedgerDep, ledger_of
from api.errors import ERROR_RESPONSES
from api.schemas import CreatedToken, Tenant, TenantName, TenantQuota, Token, TokenRequest, WhoAmI
from poold.errors import UnknownTenant
from poold.ledger import tenants
from poold.types import TOKEN_ID_PATTERN

router = APIRouter(prefix="/v1", tags=["access"], responses=ERROR_RESPONSES)
TokenId = Annotated[str, Path(pattern=TOKEN_ID_PATTERN)]


@router.get("/auth/whoami")
def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(name=principal.name, role=principal.role, tenant=principal.tenant)


@router.post("/tokens", status_code=status.HTTP_201_CREATED)
async def create_token(body: TokenRequest, request: Request, admin: AdminDep) -> CreatedToken:
    command = partial(tenants.create_token, name=body.name, role=body.role, tenant=body.tenant,
                      actor=admin.actor)
    view, bearer = await ledger_of(request).call(command)
    return CreatedToken(**asdict(view), bearer=bearer)


@router.get("/tokens")
def list_tokens(ledger: LedgerDep, _admin: AdminDep) -> list[Token]:
    return [Token(**asdict(view)) for view in ledger.read(tenants.tokens)]


@router.delete("/tokens/{token_id}")
async def revoke_token(token_id: TokenId, request: Request, admin: AdminDep) -> Token:
    command = partial(tenants.revoke_token, token_id=token_id, actor=admin.actor)
    view = await ledger_of(request).call(command)
    auth = getattr(request.app.state, "auth", None)
    if isinstance(auth, TokenAuthenticator):  # answered once every daemon refuses it
        await asyncio.to_thread(auth.revoked, token_id)
    return Token(**asdict(view))


@router.get("/tenants")
def list_tenants(ledger: LedgerDep, principal: PrincipalDep) -> list[Tenant]:
    found = ledger.read(tenants.tenants)
    return [Tenant(**asdict(t)) for t in found if principal.owns(t.name)]


@router.get("/tenants/{name}")
def get_tenant(name: Annotated[TenantName, Path()], ledger: LedgerDep,
               principal: PrincipalDep) -> Tenant:
    if not principal.owns(name):
        raise UnknownTenant(f"no tenant {name!r}")
    return Tenant(**asdict(ledger.read(lambda s, now: tenants.tenant(s, name, now))))


@router.put("/tenants/{name}")
async def set_tenant(name: Annotated[TenantName, Path()], body: TenantQuota, request: Request,
                     admin: AdminDep) -> Tenant:
    """Create the tenant or replace its quotas (null: unlimited)."""
    command = partial(tenants.set_tenant, name=name, max_bytes=body.max_bytes,
                      max_leases=body.max_leases, actor=admin.actor)
    return Tenant(**asdict(await ledger_of(request).call(command)))
