"""`Tx`: what a ledger command sees of its transaction, and the rules every command applies the
same way (when an ended lease's bytes wait to be scrubbed).

Its own module so that every ledger module (leases, sharing, registry, tenants, retention) takes
it from here, and none imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from poold.ledger import queries as q
from poold.ledger.space import Catalog, HostSpace
from poold.ledger.views import DeviceRecord, PoolRecord
from poold.types import DeviceKind, EventKind


@dataclass(slots=True, eq=False)
class Tx:
    """What a ledger command sees: the writer's connection inside this batch's transaction, the
    ledger clock's reading for it, this host's in-memory space and identity, and the writer's
    catalog snapshot (`catalog`, read on first use after being dropped).

    Lease commands queue their events with `event`; `flush` writes them before the commit.
    Commands off the hot path (registration, inventory) use `session`, an ORM session joined to
    the same transaction, made at first use (the hot path's Core statements need none); using it
    drops the catalog snapshot, since they change pools and devices.
    """

    conn: Connection
    now: datetime
    space: HostSpace
    host_id: str
    default_pool: str
    orm: Session | None = None
    snapshot: Catalog | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    session_used: bool = False
    # Multi-host (poold.ledger.liveness): this host is fenced (grants nothing, its leases are
    # lost); other hosts silent for lost_after_s are lost (None: never judge other hosts).
    fenced: bool = False
    lost_after_s: float | None = None
    checked_claims: set[int] = field(default_factory=set)  # own claims locked in this transaction
    # (max_bytes, max_leases) of a tenant created without quotas (Settings.default_tenant_*).
    tenant_defaults: tuple[int | None, int | None] = (None, None)
    # Devices an admin operation is changing in the kernel (poold.ledger.devices.hold): the
    # writer's own set, shared by every Tx, so no grant lands on them meanwhile.
    held: set[int] = field(default_factory=set)
    # Leases of this transaction's commands that ended, each with whether it waits for a scrub
    # (kept `scrubbing`); the writer hands them to the scrubber once the transaction committed:
    # their bytes or memfds wait for it.
    ended: dict[str, bool] = field(default_factory=dict)

    @property
    def session(self) -> Session:
        if self.orm is None:  # joins the connection's transaction; never commits or ends it
            self.orm = Session(bind=self.conn, expire_on_commit=False)
        if self.events:  # keep the audit log in command order
            self.orm.flush()
            self._insert_events()
        self.session_used = True
        self.snapshot = None
        return self.orm

    def close(self) -> None:
        """Close the ORM session if one was made (the writer, as the transaction ends)."""
        if self.orm is not None:
            self.orm.close()

    @property
    def catalog(self) -> Catalog:
        if self.snapshot is None:
            if self.session_used and self.orm is not None:
                self.orm.flush()  # what a registry command changed is part of the snapshot
            self.snapshot = Catalog(*q.pools.catalog(self.conn, self.host_id))
        return self.snapshot

    def device(self, device_id: int) -> DeviceRecord | None:
        """The device as the snapshot has it. One it lacks (another host's own device, one
        added since the snapshot) is read from the ledger and kept in the snapshot."""
        found = self.catalog.device(device_id)
        if found is None:
            found = q.devices.device_record(self.conn, device_id)
            if found is not None:
                self.catalog.remember(found)
        return found

    def refresh_catalog(self) -> None:
        """Read pools and devices again at next use (another host may have changed them)."""
        self.snapshot = None

    def event(self, kind: EventKind, actor: str, *, host_id: str | None = None,
              device_id: int | None = None, lease_id: str | None = None,
              **details: Any) -> None:
        self.events.append({"at": self.now, "kind": kind.value, "actor": actor,
                            "host_id": host_id, "device_id": device_id, "lease_id": lease_id,
                            "details": details})

    def command_done(self) -> None:
        """After each command: write what it did through the session, drop a snapshot it may
        have made stale."""
        if self.session_used and self.orm is not None:
            self.orm.flush()
            self.session_used = False
            self.snapshot = None

    def flush(self) -> None:
        """Write everything still pending; the writer calls this just before the commit."""
        self.command_done()
        self._insert_events()

    def _insert_events(self) -> None:
        q.events.insert_events(self.conn, self.events)
        self.events.clear()


def scrubs_before_reuse(tx: Tx, pool: PoolRecord, device_id: int) -> bool:
    """Whether an ended lease keeps its extent (`scrubbing`) until the daemon let it go: in a
    pool that scrubs (its bytes zeroed first), and on a region carved per lease whatever the
    pool (the lease's own dax device must be gone before another is made over its range)."""
    if pool.scrub_on_release:
        return True
    device = tx.device(device_id)
    return device is not None and device.kind == DeviceKind.DAX_REGION
