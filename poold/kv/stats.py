"""What a store reports: counters (`KVStats`) and the record of each lease it lost."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LostLease:
    """A lease the store stopped using because it expired or was revoked under it."""

    lease_id: str
    reason: str
    blocks: int  # committed blocks that went with it


@dataclass(frozen=True)
class BlockLocation:
    """Where a block's bytes are, for another process that maps the same lease.

    The block is at `map_offset + slot_offset` in `map_path` (the lease's map_path: its devdax
    chardev, or its daemon's memfd of an emulated lease, which root may open); map the lease
    (`map_offset`, `lease_length`, `align`) with poold.client.Mapping and read `block_size`
    bytes at `slot_offset`. Valid until the block is evicted or the lease lost.
    """

    lease_id: str
    map_path: str | None
    map_offset: int
    lease_length: int
    align: int
    slot_offset: int
    block_size: int


@dataclass(frozen=True)
class KVStats:
    """A snapshot of a store's counters; every count is in blocks unless it says bytes."""

    hits: int = 0
    misses: int = 0
    stored: int = 0  # blocks written by put
    already_present: int = 0  # puts of a key the store already held (content keys: same bytes)
    rejected: int = 0  # puts that found no room: budget spent and every block pinned
    evictions: int = 0
    evictions_by_priority: dict[str, int] = field(default_factory=dict)
    lost: int = 0  # blocks dropped with a lost lease
    reclaimed: int = 0  # blocks dropped with a lease the daemon asked back (elastic)
    discarded: int = 0
    blocks_used: int = 0
    blocks_capacity: int = 0
    pinned: int = 0
    sessions: int = 0
    leases: int = 0
    leases_granted: int = 0
    leases_released: int = 0
    leases_lost: int = 0
    leases_reclaimed: int = 0  # elastic leases given back because the daemon asked
    grow_failures: int = 0  # the daemon refused a lease (no capacity, unreachable)
    budget_refusals: int = 0  # growth refused because budget_bytes was reached
    leased_bytes: int = 0
    budget_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0
