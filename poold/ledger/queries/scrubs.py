"""Scrubs: an ended lease keeps its extent, as `scrubbing`, until its bytes are zeroed (in a pool
that scrubs on release); these follow it from its end to the state it ended as.

Leaves ending the lease to `leases`, and the zeroing itself to poold.daemon.scrub.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import LEASES
from poold.ledger.views import LEASE_COLUMNS, LeaseRecord
from poold.models import Lease
from poold.types import LeaseState

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def scrubbing_leases(session: Session, host_id: str) -> Sequence[Lease]:
    """This host's leases waiting to be zeroed, oldest first."""
    query = select(Lease).where(Lease.host_id == host_id, Lease.state == LeaseState.SCRUBBING)
    return session.scalars(query.order_by(Lease.ended_at, Lease.id)).all()


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_SCRUBBING = LeaseState.SCRUBBING.value
_START_SCRUB = (
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == bindparam("ended_as"))
    .values(state=_SCRUBBING, ended_as=bindparam("ended_as"), scrubbed_bytes=0)
)
_SCRUB_PROGRESS = (
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == _SCRUBBING)
    .values(scrubbed_bytes=bindparam("done"))
)
_FINISH_SCRUB = (
    update(LEASES)
    .where(LEASES.c.id == bindparam("lease_id"), LEASES.c.state == _SCRUBBING)
    .values(state=LEASES.c.ended_as, scrubbed_bytes=LEASES.c.length)
    .returning(*(LEASES.c[name] for name in LEASE_COLUMNS))
)


def start_scrub(conn: Connection, lease_id: str, ended_as: LeaseState) -> int:
    """A lease just ended as `ended_as` keeps its extent, as `scrubbing`, until zeroed."""
    return conn.execute(_START_SCRUB, {"lease_id": lease_id, "ended_as": ended_as.value}).rowcount


def scrub_progress(conn: Connection, lease_id: str, done: int) -> int:
    return conn.execute(_SCRUB_PROGRESS, {"lease_id": lease_id, "done": done}).rowcount


def finish_scrub(conn: Connection, lease_id: str) -> LeaseRecord | None:
    """The lease's bytes are zero: it takes the state it ended as; None if it was not
    scrubbing."""
    row = conn.execute(_FINISH_SCRUB, {"lease_id": lease_id}).one_or_none()
    return None if row is None else LeaseRecord(*row)
