"""/v1/capacity: every pool's and device's bytes split into leased, scrubbing, claimed-but-idle,
free and draining (see poold.ledger.capacity for what each means). What the admin UI's overview
draws; the wire schemas of this one endpoint live here with it."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.auth import OperatorDep
from api.deps import LedgerDep
from api.errors import ERROR_RESPONSES
from api.history import CapacityHistory as History
from poold.ledger.capacity import capacity

router = APIRouter(prefix="/v1", tags=["inventory"], responses=ERROR_RESPONSES)


class CapacitySplit(BaseModel):
    """Bytes; leased + scrubbing + idle + free + draining = size."""

    size: int
    leased: int = Field(description="Active leases not past their expiry.")
    scrubbing: int = Field(description="Released extents being zeroed before reuse.")
    idle: int = Field(description="Claimed by a host, not leased.")
    free: int = Field(description="Not claimed.")
    draining: int = Field(description="Unleased bytes of a draining device: not grantable.")


class DeviceCapacity(BaseModel):
    id: int
    devname: str
    pool: str
    host: str | None
    kind: str
    state: str
    numa_node: int | None
    align: int
    live_leases: int
    bytes: CapacitySplit


class PoolCapacity(BaseModel):
    name: str
    devices: int
    missing_devices: int = Field(description="Members whose bytes the pool does not count.")
    live_leases: int
    bytes: CapacitySplit


class Capacity(BaseModel):
    pools: list[PoolCapacity]
    devices: list[DeviceCapacity]


class CapacitySample(BaseModel):
    at: float = Field(description="Seconds since the epoch (the sampling daemon's clock).")
    size: int
    leased: int
    scrubbing: int
    free: int = Field(description="Grantable: unclaimed, or claimed by a host and idle.")


class CapacityHistory(BaseModel):
    period_s: float = Field(description="Seconds between samples.")
    window_s: float = Field(description="How far back samples are kept.")
    pools: dict[str, list[CapacitySample]]


@router.get("/capacity/history")
def get_capacity_history(request: Request, _who: OperatorDep) -> CapacityHistory:
    """Each pool's capacity over the last hour, as this daemon sampled it (in memory: a
    restarted daemon starts a new hour)."""
    history: History | None = getattr(request.app.state, "capacity_history", None)
    if history is None:
        return CapacityHistory(period_s=0, window_s=0, pools={})
    return CapacityHistory(period_s=history.period_s, window_s=history.window_s, pools={
        name: [CapacitySample.model_validate(asdict(s)) for s in samples]
        for name, samples in history.pools().items()})


@router.get("/capacity")
def get_capacity(ledger: LedgerDep, _who: OperatorDep) -> Capacity:
    """Per pool and per device, read now by the ledger clock."""
    return Capacity.model_validate(asdict(ledger.read(capacity)))
