"""Claims: the extents of a device a host holds to place its leases in.

Placing a claim, ending idle ones, trimming another host's (poold.ledger.sharing) and adopting
a lost host's. Leaves the leases inside a claim to `leases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.orm import Session

from poold.ledger.queries._tables import CLAIMS, ENDED, HOLDING, LEASES, SHARED_DEVICE_IDS
from poold.ledger.queries.hot import HotStatement
from poold.models import Claim, Lease
from poold.types import ClaimState, Extent

# --- ORM, the session first: off the hot path, building each query per call is affordable ---


def live_claims(session: Session, *, device_id: int | None = None, host_id: str | None = None
                ) -> Sequence[Claim]:
    query = select(Claim).where(Claim.state == ClaimState.ACTIVE).order_by(Claim.offset)
    if device_id is not None:
        query = query.where(Claim.device_id == device_id)
    if host_id is not None:
        query = query.where(Claim.host_id == host_id)
    return session.scalars(query).all()


def all_claims(session: Session) -> Sequence[Claim]:
    return session.scalars(select(Claim).order_by(Claim.device_id, Claim.offset)).all()


def release_idle_claims(session: Session, device_id: int, host_id: str, now: datetime
                        ) -> list[tuple[int, int, int]]:
    """End this host's live claims on the device that hold no active lease; (id, offset,
    length) of each."""
    busy = select(Lease.id).where(Lease.claim_id == Claim.id, Lease.state.not_in(ENDED))
    rows = session.execute(
        update(Claim)
        .where(Claim.device_id == device_id, Claim.host_id == host_id,
               Claim.state == ClaimState.ACTIVE, ~busy.exists())
        .values(state=ClaimState.RELEASED, ended_at=now)
        .returning(Claim.id, Claim.offset, Claim.length)
        .execution_options(synchronize_session=False)
    )
    return [(int(i), int(o), int(n)) for i, o, n in rows]


# --- the writer's hot path: Core, built once at import (building costs more than running) ----

_CLAIM_EXTENTS = (
    select(CLAIMS.c.offset, CLAIMS.c.length)
    .where(CLAIMS.c.device_id == bindparam("device_id"),
           CLAIMS.c.state == ClaimState.ACTIVE.value)
    .order_by(CLAIMS.c.offset)
)
_INSERT_CLAIM = insert(CLAIMS).returning(CLAIMS.c.id)

# Sharing devices between hosts (poold.ledger.sharing).
# Locks: a host's writer takes FOR SHARE on each own claim it places a lease in; another host
# that trims or releases that claim takes FOR UPDATE (SKIP LOCKED: a claim in use by its owner's
# open transaction is skipped, not waited for, so two writers never deadlock over claims), then
# reads the claim's leases in a new statement, which sees everything its owner committed.
_OWN_CLAIM = HotStatement(
    select(CLAIMS.c.id)
    .where(CLAIMS.c.id == bindparam("claim_id"), CLAIMS.c.host_id == bindparam("host_id"),
           CLAIMS.c.state == ClaimState.ACTIVE.value)
    .with_for_update(read=True)
)
_LOCK_CLAIMS_ON_DEVICE = (
    select(CLAIMS.c.id, CLAIMS.c.host_id, CLAIMS.c.offset, CLAIMS.c.length)
    .where(CLAIMS.c.device_id == bindparam("device_id"),
           CLAIMS.c.state == ClaimState.ACTIVE.value)
    .order_by(CLAIMS.c.offset)
    .with_for_update(skip_locked=True)
)
_END_CLAIM = (
    update(CLAIMS)
    .where(CLAIMS.c.id == bindparam("claim_id"), CLAIMS.c.state == ClaimState.ACTIVE.value)
    .values(state=ClaimState.RELEASED.value, ended_at=bindparam("now"))
)
# Only on shared devices: a host's own device (hmem, legacy pmem) is reached by no other host, so
# another could neither place leases there nor zero its bytes (its chardev there names another
# device, maybe the adopter's own). They stay the lost host's until it comes back.
_ADOPT_CLAIMS = (
    update(CLAIMS)
    .where(CLAIMS.c.host_id == bindparam("from_host"),
           CLAIMS.c.state == ClaimState.ACTIVE.value,
           CLAIMS.c.device_id.in_(SHARED_DEVICE_IDS))
    .values(host_id=bindparam("to_host"))
    .returning(CLAIMS.c.id, CLAIMS.c.device_id, CLAIMS.c.offset, CLAIMS.c.length)
)
_RELEASE_IF_IDLE = (
    update(CLAIMS)
    .where(CLAIMS.c.id == bindparam("claim_id"), CLAIMS.c.host_id == bindparam("owner"),
           CLAIMS.c.state == ClaimState.ACTIVE.value,
           ~select(LEASES.c.id).where(LEASES.c.claim_id == CLAIMS.c.id,
                                      LEASES.c.state.in_(HOLDING)).exists())
    .values(state=ClaimState.RELEASED.value, ended_at=bindparam("now"))
)


def live_claim_extents(conn: Connection, device_id: int) -> list[Extent]:
    """Every host's live claims on the device."""
    rows = conn.execute(_CLAIM_EXTENTS, {"device_id": device_id})
    return [Extent(offset, length) for offset, length in rows]


def insert_claim(conn: Connection, *, device_id: int, host_id: str, extent: Extent,
                 now: datetime) -> int:
    return int(conn.execute(_INSERT_CLAIM, {
        "device_id": device_id, "host_id": host_id, "offset": extent.offset,
        "length": extent.length, "state": ClaimState.ACTIVE.value, "created_at": now,
        "ended_at": None,
    }).scalar_one())


def own_claim_is_live(conn: Connection, claim_id: int, host_id: str) -> bool:
    """The claim is live and `host_id`'s; locked FOR SHARE to the end of the transaction, so no
    other host can trim or take it before a lease placed in it commits."""
    return bool(_OWN_CLAIM.rows(conn, {"claim_id": claim_id, "host_id": host_id}))


def lock_claims_on_device(conn: Connection, device_id: int) -> list[tuple[int, str, Extent]]:
    """Live claims of every host on the device, locked FOR UPDATE; claims another transaction
    holds are skipped."""
    rows = conn.execute(_LOCK_CLAIMS_ON_DEVICE, {"device_id": device_id})
    return [(int(i), str(h), Extent(int(o), int(n))) for i, h, o, n in rows]


def end_claim(conn: Connection, claim_id: int, now: datetime) -> int:
    return conn.execute(_END_CLAIM, {"claim_id": claim_id, "now": now}).rowcount


def adopt_claims(conn: Connection, from_host: str, to_host: str
                 ) -> list[tuple[int, int, Extent]]:
    rows = conn.execute(_ADOPT_CLAIMS, {"from_host": from_host, "to_host": to_host})
    return [(int(i), int(d), Extent(int(o), int(n))) for i, d, o, n in rows]


def release_claim_if_idle(conn: Connection, claim_id: int, host_id: str, now: datetime) -> int:
    """End `host_id`'s live claim if no lease holds bytes in it (only its owner places leases
    there, so the NOT EXISTS cannot race with a grant)."""
    return conn.execute(_RELEASE_IF_IDLE, {"claim_id": claim_id, "owner": host_id,
                                           "now": now}).rowcount
