"""ORM models of the ledger. Schema changes go through an Alembic revision in migrations/."""

from poold.models.base import Base, UTCDateTime
from poold.models.ledger import (
    Claim,
    ClientSession,
    Counter,
    Device,
    Event,
    Host,
    Lease,
    Pool,
    PoolQuota,
    PoolRule,
    Tenant,
    Token,
)

__all__ = ["Base", "Claim", "ClientSession", "Counter", "Device", "Event", "Host", "Lease",
           "Pool", "PoolQuota", "PoolRule", "Tenant", "Token", "UTCDateTime"]
