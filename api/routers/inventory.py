"""/v1/devices, /v1/topology and /v1/events: what the pool holds and what happened to it."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request

from api.auth import PrincipalDep, get_operator, get_principal
from api.deps import LedgerDep
from api.errors import ERROR_RESPONSES
from api.lease_backing import backing_of, located
from api.schemas import Claim, Device, DeviceExtents, Event, Lease
from drivers import DriverFailure
from drivers.topology import scan
from poold.errors import DriverError
from poold.inventory.discovery import discover_json
from poold.ledger import reads
from poold.types import LEASE_ID_PATTERN, TEXT_PATTERN

# Anyone authenticated sees what memory exists; which leases sit where (extents, events) is for
# admins and host agents.
router = APIRouter(prefix="/v1", tags=["inventory"], responses=ERROR_RESPONSES,
                   dependencies=[Depends(get_principal)])


@router.get("/devices")
def list_devices(ledger: LedgerDep, principal: PrincipalDep) -> list[Device]:
    """A tenant sees which devices serve it; whose leases another device serves is not its
    business (that it serves someone shows as its leased bytes)."""
    return [Device.model_validate(asdict(d if principal.owns(d.tenant_scope) else
                                         replace(d, tenant_scope=None)))
            for d in ledger.read(reads.devices)]


@router.get("/devices/{device_id}/extents", dependencies=[Depends(get_operator)])
def device_extents(device_id: Annotated[int, Path(ge=1, le=2**31)], ledger: LedgerDep,
                   request: Request) -> DeviceExtents:
    device, claims, leases = ledger.read(lambda s, now: reads.device_extents(s, device_id, now))
    backing = backing_of(request)
    return DeviceExtents(
        device=Device.model_validate(asdict(device)),
        claims=[Claim.model_validate(asdict(c)) for c in claims],
        leases=[Lease.model_validate(asdict(located(backing, x))) for x in leases],
    )


@router.get("/topology")
def topology(request: Request) -> dict[str, Any]:
    """What `poold discover` prints: the kernel's CXL/DAX objects and poold's verdicts."""
    try:
        return discover_json(scan(request.app.state.sysfs_root))
    except DriverFailure as exc:
        raise DriverError(str(exc)) from exc


@router.get("/events", dependencies=[Depends(get_operator)])
def list_events(
    ledger: LedgerDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    after_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    lease_id: Annotated[str | None, Query(pattern=LEASE_ID_PATTERN)] = None,
    kind: Annotated[str | None, Query(max_length=32, pattern=TEXT_PATTERN)] = None,
) -> list[Event]:
    """Newest first; `after_id` returns only events newer than that id (for polling)."""
    found = ledger.read(lambda s, _now: reads.events(s, limit=limit, after_id=after_id,
                                                     lease_id=lease_id, kind=kind))
    return [Event.model_validate(asdict(e)) for e in found]
