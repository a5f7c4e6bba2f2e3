"""Counters, for what belongs to no one object: the fencing-token counter every lease takes its
generation from, and the usage figures (bytes, count) summed over claims or leases.

Leaves a tenant's usage, which its quota locks, to `tenants`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, func, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import COUNTERS
from poold.ledger.queries.hot import HotStatement
from poold.models import Claim, Counter, Lease

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def live_usage(session: Session, model: type[Claim] | type[Lease], by: Literal["device", "host"],
               now: datetime | None, state: str = "active") -> dict[Any, tuple[int, int]]:
    """{device_id or host_id: (bytes, count)} of claims or leases in `state` (live ones by
    default); an active lease past expires_at (by `now`) no longer counts."""
    key = {"device": model.device_id, "host": model.host_id}[by]
    query = select(key, func.sum(model.length), func.count()).where(model.state == state)
    if model is Lease and now is not None:
        query = query.where(Lease.expires_at > now)
    rows = session.execute(query.group_by(key))
    return {group: (int(total or 0), int(count)) for group, total, count in rows}


def value(session: Session, name: str) -> int:
    """A counter's value, its row locked to the end of the transaction (two hosts deciding on
    it at once: one waits, then reads what the other wrote)."""
    query = select(Counter.value).where(Counter.name == name).with_for_update()
    return int(session.execute(query).scalar_one())


def set_value(session: Session, name: str, new: int) -> None:
    session.execute(update(Counter).where(Counter.name == name).values(value=new))


# PostgreSQL's fencing tokens (migration 0004)
GENERATION_SEQUENCE = "lease_generation"

# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_NEXT_GENERATION = HotStatement(
    update(COUNTERS)
    .where(COUNTERS.c.name == "generation")
    .values(value=COUNTERS.c.value + 1)
    .returning(COUNTERS.c.value)
)


def next_generation(conn: Connection) -> int:
    """Reserve the next fencing token of a SQLite ledger (its counters row). Tokens only ever
    grow. PostgreSQL draws its tokens from the `lease_generation` sequence (migration 0004),
    which takes no row lock, so hosts sharing the ledger neither queue nor deadlock on it: in
    the lease's own insert (queries.leases.insert_granted_lease), not here."""
    ((last,),) = _NEXT_GENERATION.rows(conn, {})
    return int(last)
