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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from poold.ledger.views import DeviceRecord, PoolRecord, Quota
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
    idle_since: datetime | None = None  # first seen holding no lease; None: in use


class HostSpace:
    def __init__(self) -> None:
        self._claims: dict[int, ClaimSpace] = {}

    def reload(self, other: HostSpace) -> None:
        """Take the claims of a space rebuilt from the ledger (another host trimmed or adopted
        this host's claims, or ended its leases), keeping when each claim went idle."""
        for claim_id, claim in other._claims.items():
            old = self._claims.get(claim_id)
            if old is not None and old.extent == claim.extent:
                claim.idle_since = old.idle_since
        self._claims = other._claims

    def fingerprint(self) -> tuple[frozenset[int], int]:
        """(claim ids, leased bytes), to compare with queries.hosts.own_fingerprint."""
        return (frozenset(self._claims),
                sum(c.leases.used_bytes for c in self._claims.values()))

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
        best[1].idle_since = None
        return best[1].claim_id, extent

    def free(self, claim_id: int, extent: Extent) -> None:
        """A lease's bytes are free again. A claim this space does not know any more was
        trimmed or adopted by another host: nothing to do here (the next tick reloads)."""
        claim = self._claims.get(claim_id)
        if claim is not None:
            claim.leases.free(extent)

    def reserve(self, claim_id: int, extent: Extent) -> None:
        """A lease this host now holds in one of its claims (adopted from a lost host)."""
        claim = self._claims.get(claim_id)
        if claim is not None:
            claim.leases.reserve(extent)
            claim.idle_since = None

    def idle_claims(self, now: datetime, idle_s: float) -> list[ClaimSpace]:
        """Claims that held no lease for `idle_s` seconds, judged at this call and earlier
        ones: a claim is seen idle from the first call that finds it empty."""
        idle = []
        for claim in self._claims.values():
            if claim.leases.used_bytes:
                claim.idle_since = None
            elif claim.idle_since is None:
                claim.idle_since = now
            if claim.idle_since is not None and (now - claim.idle_since).total_seconds() >= idle_s:
                idle.append(claim)
        return idle

    def drop_claim(self, claim_id: int) -> None:
        """A claim released in the ledger (it held no lease) leaves this host's space."""
        self._claims.pop(claim_id, None)


class Catalog:
    """Pools, their per-tenant quotas and the devices this host can use as the ledger had them
    when read (at catalog `version`: the ledger's counter of admin changes); replaced whole,
    never changed but for other devices read one at a time (`remember`)."""

    def __init__(self, pools: Iterable[PoolRecord], devices: Iterable[DeviceRecord],
                 quotas: Mapping[tuple[int, str], Quota] | None = None, version: int = 0
                 ) -> None:
        self.version = version
        self._quotas = dict(quotas or {})
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

    def remember(self, device: DeviceRecord) -> None:
        """Keep a device read on its own (Tx.device), not one leases are placed on: it is not
        listed by `devices_in`."""
        self._devices[device.id] = device

    def quota(self, pool_id: int, tenant: str) -> Quota | None:
        """The tenant's (max_bytes, max_leases) in the pool; None: no quota there."""
        return self._quotas.get((pool_id, tenant))

    def devices_in(self, pool_id: int) -> list[DeviceRecord]:
        """The pool's devices by id, whatever their state."""
        return self._by_pool.get(pool_id, [])
