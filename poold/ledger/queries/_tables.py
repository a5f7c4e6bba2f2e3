"""The tables and the few pieces of statements that several query modules share.

Table handles (`cast(Table, Model.__table__)`) are what the writer's Core statements are built
from; the ORM reads use the mapped classes themselves. Nothing here runs a query.
"""

from __future__ import annotations

from dataclasses import fields
from typing import cast

from sqlalchemy import Table, select

from poold.ledger.views import LEASE_COLUMNS, DeviceRecord
from poold.models import (
    Claim,
    ClientSession,
    Counter,
    Device,
    Event,
    Host,
    Lease,
    Pool,
    PoolQuota,
)
from poold.types import HOLDING_STATES, LeaseState

POOLS, DEVICES, CLAIMS, LEASES, EVENTS, COUNTERS, HOSTS, POOL_QUOTAS, SESSIONS = (
    cast(Table, model.__table__)
    for model in (Pool, Device, Claim, Lease, Event, Counter, Host, PoolQuota, ClientSession)
)
ACTIVE = LeaseState.ACTIVE.value
HOLDING = list(HOLDING_STATES)

# A lease in any other state still holds its bytes (active, or being scrubbed after its end).
ENDED = (LeaseState.RELEASED, LeaseState.EXPIRED, LeaseState.REVOKED, LeaseState.LOST)

SELECT_DEVICES = select(*(DEVICES.c[f.name] for f in fields(DeviceRecord)))
# Devices several hosts reach (no owning host): what another host may take over from a lost one.
SHARED_DEVICE_IDS = select(DEVICES.c.id).where(DEVICES.c.host_id.is_(None))
# Every column of a lease, in LeaseRecord's order (LeaseRecord(*row) builds it).
SELECT_LEASE = select(*(LEASES.c[name] for name in LEASE_COLUMNS))
