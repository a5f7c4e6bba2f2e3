"""What the single ledger writer keeps in memory: this host's free space inside its own claims,
and a snapshot of the catalog (pools and devices).

Only this host's daemon places leases inside this host's claims, so the writer can answer "where
does this lease go?" without reading the ledger; the ledger stays the source of truth and the
space is rebuilt from it at start and after any failed transaction. Claims themselves are placed
from the ledger under a device lock, because other hosts claim from the same devices.

Pools and devices change rarely (registration, inventory rescans, another host's policy), so the
writer reads them once and keeps the snapshot until a command that may change them runs, a
transaction fails, or the reaper's next tick, whichever comes first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from poold.ledger.views import DeviceRecord, PoolRecord
from poold.models import Claim, Lease
from poold.pool import AllocatorError, ExtentAllocator
from poold.types import Extent

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClaimSpace:
    claim_id: int
    device_id: int
    extent: Extent
    leases: ExtentAllocator


class HostSpace:
    def __init__(self) -> None:
        self._claims: dict[int, ClaimSpace] = {}

    @classmethod
    def rebuild(cls, claims: Iterable[Claim], leases: Iterable[Lease],
                align_of: dict[int, int]) -> HostSpace:
        space = cls()
        for claim in claims:
            space.add_claim(claim.id, claim.device_id, Extent(claim.offset, claim.length),
                            align_of[claim.device_id])
        for lease in leases:
            space._reserve_lease(lease)
        return space

    def _reserve_lease(self, lease: Lease) -> None:
        """Keep a live lease's bytes out of reach, even when the ledger misfiles it.

        A lease whose claim is not a live claim of this host is an invariant violation (fsck
        names it); refusing to start would strand the whole host, so its bytes are reserved in
        whichever live claim holds them, and it is logged.
        """
        extent = Extent(lease.offset, lease.length)
        home = self._claims.get(lease.claim_id)
        if home is None or not home.extent.contains(extent):
            home = next((c for c in self._claims.values()
                         if c.device_id == lease.device_id and c.extent.contains(extent)), None)
            log.error("space.misfiled_lease lease=%s claim=%s; run `poold fsck`", lease.id,
                      lease.claim_id)
        if home is not None:
            try:
                home.leases.reserve(extent)
            except AllocatorError:
                log.error("space.overlapping_lease lease=%s; run `poold fsck`", lease.id)

    def add_claim(self, claim_id: int, device_id: int, extent: Extent, align: int) -> None:
        allocator = ExtentAllocator(extent.length, align, base=extent.offset)
        self._claims[claim_id] = ClaimSpace(claim_id, device_id, extent, allocator)

    def place(self, device_id: int, length: int) -> tuple[int, Extent] | None:
        """Best fit across this host's claims on the device: (claim_id, extent) or None."""
        best: tuple[int, ClaimSpace] | None = None
        for claim in self._claims.values():
            if claim.device_id != device_id:
                continue
            hole = claim.leases.best_fit(length)
            if hole is not None and (best is None or hole < best[0]):
                best = (hole, claim)
        if best is None:
            return None
        extent = best[1].leases.allocate(length)
        assert extent is not None
        return best[1].claim_id, extent

    def free(self, claim_id: int, extent: Extent) -> None:
        self._claims[claim_id].leases.free(extent)

    def drop_claim(self, claim_id: int) -> None:
        """A claim released in the ledger (it held no lease) leaves this host's space."""
        self._claims.pop(claim_id, None)

    def claims_on(self, device_id: int) -> list[ClaimSpace]:
        return [c for c in self._claims.values() if c.device_id == device_id]


class Catalog:
    """Pools and devices as the ledger had them when read; immutable, replaced whole."""

    def __init__(self, pools: Iterable[PoolRecord], devices: Iterable[DeviceRecord]) -> None:
        self._pools = {pool.name: pool for pool in pools}
        self._pools_by_id = {pool.id: pool for pool in self._pools.values()}
        self._devices = {device.id: device for device in devices}
        self._by_pool: dict[int, list[DeviceRecord]] = {}
        for device in self._devices.values():
            self._by_pool.setdefault(device.pool_id, []).append(device)

    def pool(self, name: str) -> PoolRecord | None:
        return self._pools.get(name)

    def pool_by_id(self, pool_id: int) -> PoolRecord | None:
        return self._pools_by_id.get(pool_id)

    def device(self, device_id: int) -> DeviceRecord | None:
        return self._devices.get(device_id)

    def devices_in(self, pool_id: int) -> list[DeviceRecord]:
        """The pool's devices by id, whatever their state."""
        return self._by_pool.get(pool_id, [])
