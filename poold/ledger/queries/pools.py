"""Pools: reading them, and the catalog of pools and devices the writer keeps in memory.

Leaves creating a pool (an ORM object added by poold.ledger.registry) to its caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime

from sqlalchemy import Connection, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.orm import Session

from poold.db import first_statement
from poold.ledger.queries._tables import COUNTERS, DEVICES, POOL_QUOTAS, POOLS, SELECT_DEVICES
from poold.ledger.queries.hot import HotStatement
from poold.ledger.views import DeviceRecord, PoolRecord, Quota
from poold.models import Pool

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def get_pool_by_name(session: Session, name: str) -> Pool | None:
    return session.scalars(select(Pool).where(Pool.name == name)).one_or_none()


def list_pools(session: Session) -> Sequence[Pool]:
    return session.scalars(select(Pool).order_by(Pool.id)).all()


def pool_names(session: Session) -> dict[int, str]:
    return {pid: name for pid, name in session.execute(select(Pool.id, Pool.name))}


def pools_by_id(session: Session) -> dict[int, Pool]:
    return {pool.id: pool for pool in session.scalars(select(Pool))}


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_SELECT_POOLS = select(*(POOLS.c[f.name] for f in fields(PoolRecord))).order_by(POOLS.c.id)
# A host's catalog holds the devices it can place leases on: its own and shared ones (no
# host). A big ledger holds thousands of other hosts' own devices; the few a command needs
# (describing an adopted lease) are read one at a time (q.devices.device_record).
_USABLE_DEVICES = (SELECT_DEVICES
                   .where(or_(DEVICES.c.host_id.is_(None), DEVICES.c.host_id == bindparam("me")))
                   .order_by(DEVICES.c.id))


_SELECT_QUOTAS = select(POOL_QUOTAS.c.pool_id, POOL_QUOTAS.c.tenant, POOL_QUOTAS.c.max_bytes,
                       POOL_QUOTAS.c.max_leases)
_IS_CATALOG = COUNTERS.c.name == "catalog"
_CATALOG_VERSION = HotStatement(select(COUNTERS.c.value).where(_IS_CATALOG))
_BUMP_CATALOG = update(COUNTERS).where(_IS_CATALOG).values(value=COUNTERS.c.value + 1)


def catalog(conn: Connection, host_id: str) -> tuple[list[PoolRecord], list[DeviceRecord],
                                                    dict[tuple[int, str], Quota], int]:
    """Every pool and per-pool quota, the devices `host_id` can use (its own, shared ones), and
    the catalog version they were read at, for the writer's cached snapshot. The version is
    read first: what follows is at least as new."""
    version = catalog_version(conn)
    pools = [PoolRecord(*row) for row in conn.execute(_SELECT_POOLS)]
    quotas = {(pool_id, tenant): (max_bytes, max_leases)
              for pool_id, tenant, max_bytes, max_leases in conn.execute(_SELECT_QUOTAS)}
    devices = [DeviceRecord(*row) for row in conn.execute(_USABLE_DEVICES, {"me": host_id})]
    return pools, devices, quotas, version


def catalog_version(conn: Connection) -> int:
    """How many admin changes pools have seen: a snapshot read at another version is stale.
    The one read every batch of the writer makes (on the driver's cursor)."""
    ((version,),) = _CATALOG_VERSION.rows(conn, {})
    return int(version)


# The first read of each writer batch on PostgreSQL: the catalog's version and the server's clock,
# in the round trip that also begins the transaction (poold.db.first_statement).
# Its values written into the SQL: BEGIN can go in the same query only without parameters.
_PG = PGDialect()  # type: ignore[no-untyped-call]  # untyped upstream
_BATCH_START = str(select(COUNTERS.c.value, func.clock_timestamp()).where(_IS_CATALOG)
                   .compile(dialect=_PG, compile_kwargs={"literal_binds": True}))


def batch_start(conn: Connection) -> tuple[int, datetime | None]:
    """The catalog's version and, on PostgreSQL, the server's clock (None on SQLite, whose
    ledger clock is the host's): read first in each of the writer's transactions."""
    if conn.dialect.name != "postgresql":
        return catalog_version(conn), None
    cursor = first_statement(conn, _BATCH_START)
    try:
        ((version, server_now),) = cursor.fetchall()
    finally:
        cursor.close()
    return int(version), server_now


def catalog_changed(conn: Connection) -> None:
    """Say that pools changed: every daemon of the ledger reads them again before its next
    command (the counter commits with the change, so none reads the old policy after it)."""
    conn.execute(_BUMP_CATALOG)
