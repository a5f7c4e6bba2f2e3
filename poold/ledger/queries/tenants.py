"""Tenants, on the writer's hot path: the quota a grant checks, locked, and the usage it checks
against; a tenant created on its first lease.

Leaves administering tenants and tokens (ORM objects) to poold.ledger.tenants.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, bindparam, func, insert, select

from poold.ledger.queries._tables import ACTIVE, LEASES
from poold.models import Tenant

# No ORM section: poold.ledger.tenants reads and changes tenants and tokens as ORM objects itself.

# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_QUOTA = (select(Tenant.max_bytes, Tenant.max_leases)
          .where(Tenant.name == bindparam("name")).with_for_update())
_TENANT_USAGE = (
    select(func.coalesce(func.sum(LEASES.c.length), 0), func.count())
    .where(LEASES.c.tenant == bindparam("name"), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at > bindparam("now"))
)
_POOL_USAGE = _TENANT_USAGE.where(LEASES.c.pool_id == bindparam("pool_id"))
_USAGE_BY_POOL = (
    select(LEASES.c.pool_id, LEASES.c.tenant, func.sum(LEASES.c.length), func.count())
    .where(LEASES.c.tenant.is_not(None), LEASES.c.state == ACTIVE,
           LEASES.c.expires_at > bindparam("now"))
    .group_by(LEASES.c.pool_id, LEASES.c.tenant)
)
_INSERT_TENANT = insert(Tenant)


def lock_tenant_quota(conn: Connection, name: str) -> tuple[int | None, int | None] | None:
    """(max_bytes, max_leases) of the tenant, its row locked until the transaction ends
    (PostgreSQL; on SQLite the writer holds the database), or None for an unknown tenant."""
    row = conn.execute(_QUOTA, {"name": name}).first()
    return None if row is None else (row[0], row[1])


def insert_tenant(conn: Connection, name: str, now: datetime, max_bytes: int | None,
                  max_leases: int | None) -> None:
    conn.execute(_INSERT_TENANT, {"name": name, "created_at": now, "max_bytes": max_bytes,
                                  "max_leases": max_leases})


def tenant_usage(conn: Connection, name: str, now: datetime) -> tuple[int, int]:
    """(bytes, count) of the tenant's valid leases."""
    row = conn.execute(_TENANT_USAGE, {"name": name, "now": now}).one()
    return int(row[0]), int(row[1])


def pool_usage(conn: Connection, name: str, pool_id: int, now: datetime) -> tuple[int, int]:
    """(bytes, count) of the tenant's valid leases in one pool (checked with the tenant's row
    locked, as `tenant_usage`)."""
    row = conn.execute(_POOL_USAGE, {"name": name, "pool_id": pool_id, "now": now}).one()
    return int(row[0]), int(row[1])


def usage_by_pool(conn: Connection, now: datetime) -> dict[tuple[int, str], tuple[int, int]]:
    """{(pool_id, tenant): (bytes, count)} of every tenant's valid leases."""
    return {(pool_id, tenant): (int(total or 0), int(count))
            for pool_id, tenant, total, count in conn.execute(_USAGE_BY_POOL, {"now": now})}
