"""/v1/leases: grant, inspect, keep alive, release and revoke leases."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from api.deps import ActorDep, LedgerDep
from api.errors import ERROR_RESPONSES
from api.schemas import KeepaliveRequest, Lease, LeaseRequest
from poold.ledger import leases, reads
from poold.ledger.views import LeaseView
from poold.types import LeaseState

router = APIRouter(prefix="/v1/leases", tags=["leases"], responses=ERROR_RESPONSES)
LeaseId = Annotated[str, Path(min_length=1, max_length=64)]


def _wire(view: LeaseView) -> Lease:
    return Lease.model_validate(asdict(view))


@router.post("", status_code=status.HTTP_201_CREATED)
async def grant_lease(body: LeaseRequest, ledger: LedgerDep, actor: ActorDep) -> Lease:
    request = leases.GrantRequest(actor=actor, **body.model_dump())
    return _wire(await asyncio.wrap_future(ledger.submit(partial(leases.grant, request=request))))


@router.get("")
def list_leases(
    ledger: LedgerDep,
    state: LeaseState | None = None,
    pool: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[Lease]:
    found = ledger.read(lambda s, now: reads.leases(s, now, state=state, pool=pool, limit=limit))
    return [_wire(v) for v in found]


@router.get("/{lease_id}")
def get_lease(lease_id: LeaseId, ledger: LedgerDep) -> Lease:
    return _wire(ledger.read(lambda s, now: reads.lease(s, lease_id, now)))


@router.post("/{lease_id}/keepalive")
async def keepalive(lease_id: LeaseId, ledger: LedgerDep, actor: ActorDep,
                    body: KeepaliveRequest | None = None) -> Lease:
    ttl_s = body.ttl_s if body else None
    command = partial(leases.keepalive, lease_id=lease_id, ttl_s=ttl_s, actor=actor)
    return _wire(await asyncio.wrap_future(ledger.submit(command)))


@router.delete("/{lease_id}")
async def release_lease(lease_id: LeaseId, ledger: LedgerDep, actor: ActorDep) -> Lease:
    """Idempotent: a lease that already ended is returned as it ended."""
    command = partial(leases.release, lease_id=lease_id, actor=actor)
    return _wire(await asyncio.wrap_future(ledger.submit(command)))


@router.post("/{lease_id}/revoke")
async def revoke_lease(lease_id: LeaseId, ledger: LedgerDep, actor: ActorDep) -> Lease:
    """Administrative end of a lease; its holder learns at its next keepalive."""
    command = partial(leases.revoke, lease_id=lease_id, actor=actor)
    return _wire(await asyncio.wrap_future(ledger.submit(command)))
