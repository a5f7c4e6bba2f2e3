"""/v1/devices admin operations: create, destroy, resize, reconfigure, drain, undrain, and freeing
a device from the tenant it serves (admins only).

Each route hands its request to the daemon's `DeviceAdmin` (app.state.device_admin) and answers
with what the operation did: the device as the ledger has it and as the kernel shows it. Refusals
are 4xx and change nothing: DeviceBusy (409: live leases, memory in use), RegionFull (409),
InvalidRequest (422: misaligned, static region), UnknownDevice (404). Plain `def` routes: the
work blocks on sysfs and the ledger writer, so it runs in a worker thread.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from api.auth import AdminDep
from api.deps import LedgerDep
from api.device_admin import DeviceAdmin, DeviceOutcome, Mode
from api.errors import ERROR_RESPONSES
from api.schemas import Device
from poold.errors import Conflict, UnknownDevice
from poold.ledger import devices
from poold.types import MAX_BYTES

router = APIRouter(prefix="/v1/devices", tags=["devices"], responses=ERROR_RESPONSES)

DevName = Annotated[str, Path(pattern=r"^dax\d+(\.\d+)?$", max_length=32,
                              description="A dax device, as daxctl names it (dax0.1), or a "
                              "region poold carves per lease (dax0)")]


class CreateDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    region: Annotated[StrictInt, Field(ge=0, le=65_535, description="dax region id")]
    size: Annotated[StrictInt, Field(gt=0, le=MAX_BYTES, description="Bytes, a multiple of "
                                     "align.")]
    align: Annotated[StrictInt | None, Field(gt=0, le=1 << 30,
                                             description="Bytes; default the region's.")] = None


class ResizeDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: Annotated[StrictInt, Field(ge=0, le=MAX_BYTES, description="Bytes; 0 empties it.")]


class ReconfigureDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode


class DeviceChange(BaseModel):
    """What an operation did. `device`: as GET /v1/devices shows it now (missing once
    destroyed; null when the ledger never had it, e.g. a size-0 device); `kernel`: as
    `daxctl list` shows it (null once the kernel has no such device); memory blocks by state
    while it is system-ram."""

    operation: str
    devname: str
    device: Device | None
    kernel: dict[str, object] | None
    online_blocks: list[int]
    offline_blocks: list[int]


def _admin(request: Request) -> DeviceAdmin:
    admin: DeviceAdmin | None = getattr(request.app.state, "device_admin", None)
    if admin is None:
        raise Conflict("device operations are off on this daemon: it does not manage dax "
                       "devices (discover_dax = false)")
    return admin


def _answer(outcome: DeviceOutcome) -> DeviceChange:
    device = None if outcome.device is None else Device.model_validate(asdict(outcome.device))
    return DeviceChange(operation=outcome.operation, devname=outcome.devname, device=device,
                        kernel=outcome.kernel, online_blocks=outcome.online_blocks,
                        offline_blocks=outcome.offline_blocks)


@router.post("", status_code=201)
def create_device(body: CreateDevice, request: Request, admin: AdminDep) -> DeviceChange:
    """A new dax device in a dynamic region (create, align, size, bind), leasable at once."""
    return _answer(_admin(request).create(body.region, body.size, body.align, admin.actor))


@router.delete("/{devname}")
def destroy_device(devname: DevName, request: Request, admin: AdminDep) -> DeviceChange:
    """Unbind, shrink to 0, delete. Refused while it holds live leases, and for a region's first
    device (the kernel keeps it: resize it to 0 instead)."""
    return _answer(_admin(request).destroy(devname, admin.actor))


@router.post("/{devname}/resize")
def resize_device(devname: DevName, body: ResizeDevice, request: Request,
                  admin: AdminDep) -> DeviceChange:
    return _answer(_admin(request).resize(devname, body.size, admin.actor))


@router.post("/{devname}/reconfigure")
def reconfigure_device(devname: DevName, body: ReconfigureDevice, request: Request,
                       admin: AdminDep) -> DeviceChange:
    """system-ram: kmem, memory blocks online movable, a CPU-less NUMA node; devdax: back."""
    return _answer(_admin(request).reconfigure(devname, body.mode, admin.actor))


@router.post("/{devname}/drain")
def drain_device(devname: DevName, request: Request, admin: AdminDep) -> DeviceChange:
    """No new leases on the device; live ones run to release, expiry or revocation."""
    return _answer(_admin(request).drain(devname, admin.actor))


@router.post("/{devname}/undrain")
def undrain_device(devname: DevName, request: Request, admin: AdminDep) -> DeviceChange:
    return _answer(_admin(request).undrain(devname, admin.actor))


@router.delete("/{devname}/tenant")
def unbind_tenant(devname: DevName, ledger: LedgerDep, admin: AdminDep) -> Device:
    """Free a device handed out whole from the tenant whose leases it serves (refused while
    they hold bytes there): its next lease binds it anew. What that tenant's processes still
    hold of it (a descriptor, a mapping) the kernel cannot take back from a static device."""
    ledger.run(partial(devices.unbind_tenant, devname=devname, actor=admin.actor))
    view = ledger.read(lambda s, now: devices.view(s, now, ledger.host_id, devname))
    if view is None:
        raise UnknownDevice(f"no device {devname!r}")
    return Device.model_validate(asdict(view))
