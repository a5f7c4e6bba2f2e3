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

from api.auth import PrincipalDep, acting_tenant, admin_of, principal_of, tenant_only_of
from api.deps import LedgerDep, actor_of, ledger_of
from api.errors import ERROR_RESPONSES
from api.lease_backing import MADE_IN_A_THREAD, MADE_INLINE, LeaseBacking, backing_of, located
from api.metrics import Metrics
from api.reclaim import WaitingGrants
from api.schemas import GrantedLease, KeepaliveRequest, Lease, LeaseRequest
from poold.errors import PooldError, UnknownLease
from poold.ledger import leases, reads
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView
from poold.security import lease_token
from poold.types import TEXT_PATTERN, LeaseState, Role, is_lease_id

router = APIRouter(prefix="/v1/leases", tags=["leases"], responses=ERROR_RESPONSES)
# A lease id is 32 hex digits; anything else (a NUL byte, garbage) names no lease: 404
# UnknownLease here (`known`), before any ledger command or query.
LeaseId = Annotated[str, Path(min_length=1, max_length=64)]
Filter = Annotated[str | None, Query(max_length=128, pattern=TEXT_PATTERN)]

# The wire schema is the view, field for field: the view's JSON is the schema's JSON.
if [f.name for f in fields(LeaseView)] != list(Lease.model_fields):
    raise RuntimeError("api.schemas.Lease and LeaseView name different fields")
_ONE = TypeAdapter(LeaseView)
_MANY = TypeAdapter(list[LeaseView])


def _json(content: bytes, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(content=content, status_code=status_code, media_type="application/json")


async def _write(request: Request, command: Callable[[Tx], LeaseView]) -> Response:
    view: LeaseView = await ledger_of(request).call(command)
    return _json(_ONE.dump_json(located(backing_of(request), view)))


def known(lease_id: str) -> str:
    if not is_lease_id(lease_id):
        raise UnknownLease(f"no lease {lease_id!r}")
    return lease_id


@router.post("", status_code=status.HTTP_201_CREATED, response_model=GrantedLease)
async def grant_lease(body: LeaseRequest, request: Request) -> Response:
    principal = principal_of(request)
    fields_ = body.model_dump(exclude={"wait_s"})
    fields_["tenant"] = acting_tenant(principal, body.tenant, "lease")
    grant = leases.GrantRequest(actor=principal.actor, **fields_)
    waiting: WaitingGrants = request.app.state.waiting_grants
    view = await waiting.grant(grant, body.wait_s)
    backing = backing_of(request)
    if backing is not None and view.state is LeaseState.ACTIVE:  # not a replay of an ended one
        await _make(request, backing, view)
    token = lease_token(request.app.state.lease_key, view.id)
    # The view's JSON object with the token appended (hex: nothing to escape).
    body_json = _ONE.dump_json(located(backing, view))[:-1] + b',"token":"' + token.encode() + b'"}'
    return _json(body_json, status.HTTP_201_CREATED)


async def _make(request: Request, backing: LeaseBacking, view: LeaseView) -> None:
    """What the lease is made of, once the grant committed (the lease id names it): an emulated
    lease's memfd (inline: microseconds), a region's dax device (sysfs writes: in a thread).
    Nothing to make it of: the lease is released again, and the grant refused."""
    try:
        if view.kind in MADE_INLINE:
            backing.make(view)
        elif view.kind in MADE_IN_A_THREAD:
            await asyncio.to_thread(backing.make, view)
    except PooldError:
        await ledger_of(request).call(partial(
            leases.release, lease_id=view.id, actor="daemon"))
        raise


@router.get("", response_model=list[Lease])
def list_leases(
    request: Request,
    ledger: LedgerDep,
    principal: PrincipalDep,
    state: LeaseState | None = None,
    pool: Filter = None,
    tenant: Filter = None,
    host: Filter = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    """Newest first. A tenant sees its own leases only, whatever `tenant` asks."""
    if principal.role is Role.TENANT:
        tenant = principal.tenant
    found = ledger.read(lambda s, now: reads.leases(s, now, state=state, pool=pool, tenant=tenant,
                                                    host=host, limit=limit))
    backing = backing_of(request)
    return _json(_MANY.dump_json([located(backing, view) for view in found]))


@router.get("/{lease_id}", response_model=Lease)
def get_lease(lease_id: LeaseId, ledger: LedgerDep, request: Request) -> Response:
    only, lease_id = tenant_only_of(request), known(lease_id)
    view = ledger.read(lambda s, now: reads.lease(s, lease_id, now, tenant_only=only))
    return _json(_ONE.dump_json(located(backing_of(request), view)))


@router.post("/{lease_id}/keepalive", response_model=Lease)
async def keepalive(lease_id: LeaseId, request: Request,
                    body: KeepaliveRequest | None = None) -> Response:
    ttl_s = body.ttl_s if body else None
    return await _write(request, partial(leases.keepalive, lease_id=known(lease_id), ttl_s=ttl_s,
                                         actor=actor_of(request),
                                         tenant_only=tenant_only_of(request)))


@router.delete("/{lease_id}", response_model=Lease)
async def release_lease(lease_id: LeaseId, request: Request) -> Response:
    """Idempotent: a lease that already ended is returned as it ended."""
    command = partial(_release, lease_id=known(lease_id), actor=actor_of(request),
                      tenant_only=tenant_only_of(request))
    view, given = await ledger_of(request).call(command)
    if given:
        metrics: Metrics = request.app.state.metrics
        metrics.reclaim_given_bytes.inc(view.length)
    return _json(_ONE.dump_json(located(backing_of(request), view)))


def _release(tx: Tx, lease_id: str, actor: str, tenant_only: str | None
             ) -> tuple[LeaseView, bool]:
    """The release, and whether it gave back, just now, an elastic lease the daemon asked for
    (what `poold_reclaim_given_bytes_total` counts)."""
    view = leases.release(tx, lease_id, actor, tenant_only)
    return view, view.reclaim_by is not None and view.ended_at == tx.now


@router.post("/{lease_id}/revoke", response_model=Lease)
async def revoke_lease(lease_id: LeaseId, request: Request) -> Response:
    """Administrative end of a lease; its holder learns at its next keepalive."""
    return await _write(request, partial(leases.revoke, lease_id=known(lease_id),
                                         actor=admin_of(request).actor))
