"""All SQL of the ledger, one module per object. Functions take the session first and never
commit.

State transitions put their precondition in the WHERE clause and return the rowcount, so a
concurrent change (another host, the reaper) can never be overwritten by a stale read.

The writer's hot path (grant, keepalive, release, revoke, reap) is the exception to "session
first": those functions take the writer's Connection, run Core statements built once at import
and return plain records (poold.ledger.views), because building a statement and running the ORM's
unit of work cost several times more than the SQL itself. Each module keeps the two apart: first
the ORM functions (session first), then the writer's statements and the functions that run them
(connection first). The table handles and the pieces several modules share are in `_tables`.

Callers import the package and name the object: `q.leases.renew_lease(...)`.
"""

from poold.ledger.queries import (
    claims,
    counters,
    devices,
    events,
    hosts,
    leases,
    pools,
    reclaims,
    scrubs,
    sessions,
    tenants,
)

__all__ = ["claims", "counters", "devices", "events", "hosts", "leases", "pools", "reclaims",
           "scrubs", "sessions", "tenants"]
