"""Pools: reading them, and the catalog of pools and devices the writer keeps in memory.

Leaves creating a pool (an ORM object added by poold.ledger.registry) to its caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import DEVICES, POOLS, SELECT_DEVICES
from poold.ledger.views import DeviceRecord, PoolRecord
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
_ALL_DEVICES = SELECT_DEVICES.order_by(DEVICES.c.id)


def catalog(conn: Connection) -> tuple[list[PoolRecord], list[DeviceRecord]]:
    """Every pool and device, for the writer's cached snapshot."""
    pools = [PoolRecord(*row) for row in conn.execute(_SELECT_POOLS)]
    return pools, [DeviceRecord(*row) for row in conn.execute(_ALL_DEVICES)]
