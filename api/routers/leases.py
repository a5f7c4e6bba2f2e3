"""/v1/leases: grant, inspect, keep alive, release and revoke leases.

Responses are the ledger's LeaseView serialised straight to JSON by pydantic (the same bytes the
`Lease` schema produces, checked at import), skipping a dict copy and two validations per request.
The write endpoints are the hot path: they find the ledger and the actor with api.deps' functions
called inline, since as FastAPI dependencies (plain def) each would run in a worker thread: two
thread hops per request on top of the one to the ledger writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from pydantic import TypeAdapter

from api.auth import PrincipalDep, admin_of, principal_of
from api.deps import LedgerDep, actor_of, ledger_of
from api.device_admin import LeasePlacer
from api.errors import ERROR_RESPONSES
from api.schemas import GrantedLease, KeepaliveRequest, Lease, LeaseRequest
from poold.errors import Forbidden
from poold.ledger import leases, reads
from poold.ledger.views import LeaseView
from poold.security import lease_token
from poold.types import LeaseState, Role

router = APIRouter(prefix="/v1/leases", tags=["leases"], responses=ERROR_RESPONSES)
LeaseId = Annotated[str, Path(min_length=1, max_length=64)]

# The wire schema is the view, field for field: the view's JSON is the schema's JSON.
if [f.name for f in fields(LeaseView)] != list(Lease.model_fields):
    raise RuntimeError("api.schemas.Lease and LeaseView name different fields")
_ONE = TypeAdapter(LeaseView)
_MANY = TypeAdapter(list[LeaseView])


def _json(content: bytes, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(content=content, status_code=status_code, media_type="application/json")


async def _write(request: Request, command: Callable[[leases.Tx], LeaseView],
                 status_code: int = status.HTTP_200_OK) -> Response:
    view: LeaseView = await asyncio.wrap_future(ledger_of(request).submit(command))
    return _json(_ONE.dump_json(view), status_code)


def _tenant_only(request: Request) -> str | None:
    """The tenant a tenant principal is confined to; None for admins and host agents."""
    principal = principal_of(request)
    return principal.tenant if principal.role is Role.TENANT else None


@router.post("", status_code=status.HTTP_201_CREATED, response_model=GrantedLease)
async def grant_lease(body: LeaseRequest, request: Request) -> Response:
    principal = principal_of(request)
    fields_ = body.model_dump()
    if principal.role is Role.TENANT:
        if body.tenant not in (None, principal.tenant):
            raise Forbidden(f"{principal.actor} may lease only for tenant {principal.tenant!r}")
        fields_["tenant"] = principal.tenant
    grant = leases.GrantRequest(actor=principal.actor, **fields_)
    placer: LeasePlacer | None = getattr(request.app.state, "lease_placer", None)
    view: LeaseView
    if placer is not None and placer.isolates(grant.pool):  # a device of its own: sysfs writes
        view = await asyncio.to_thread(placer.grant, grant)
    else:
        view = await asyncio.wrap_future(
            ledger_of(request).submit(partial(leases.grant, request=grant)))
    token = lease_token(request.app.state.lease_key, view.id)
    # The view's JSON object with the token appended (hex: nothing to escape).
    body_json = _ONE.dump_json(view)[:-1] + b',"token":"' + token.encode() + b'"}'
    return _json(body_json, status.HTTP_201_CREATED)


@router.get("", response_model=list[Lease])
def list_leases(
    ledger: LedgerDep,
    principal: PrincipalDep,
    state: LeaseState | None = None,
    pool: Annotated[str | None, Query(max_length=128)] = None,
    tenant: Annotated[str | None, Query(max_length=128)] = None,
    host: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    """Newest first. A tenant sees its own leases only, whatever `tenant` asks."""
    if principal.role is Role.TENANT:
        tenant = principal.tenant
    found = ledger.read(lambda s, now: reads.leases(s, now, state=state, pool=pool, tenant=tenant,
                                                    host=host, limit=limit))
    return _json(_MANY.dump_json(found))


@router.get("/{lease_id}", response_model=Lease)
def get_lease(lease_id: LeaseId, ledger: LedgerDep, request: Request) -> Response:
    only = _tenant_only(request)
    return _json(_ONE.dump_json(
        ledger.read(lambda s, now: reads.lease(s, lease_id, now, tenant_only=only))))


@router.post("/{lease_id}/keepalive", response_model=Lease)
async def keepalive(lease_id: LeaseId, request: Request,
                    body: KeepaliveRequest | None = None) -> Response:
    ttl_s = body.ttl_s if body else None
    return await _write(request, partial(leases.keepalive, lease_id=lease_id, ttl_s=ttl_s,
                                         actor=actor_of(request),
                                         tenant_only=_tenant_only(request)))


@router.delete("/{lease_id}", response_model=Lease)
async def release_lease(lease_id: LeaseId, request: Request) -> Response:
    """Idempotent: a lease that already ended is returned as it ended."""
    return await _write(request, partial(leases.release, lease_id=lease_id,
                                         actor=actor_of(request),
                                         tenant_only=_tenant_only(request)))


@router.post("/{lease_id}/revoke", response_model=Lease)
async def revoke_lease(lease_id: LeaseId, request: Request) -> Response:
    """Administrative end of a lease; its holder learns at its next keepalive."""
    return await _write(request, partial(leases.revoke, lease_id=lease_id,
                                         actor=admin_of(request).actor))
