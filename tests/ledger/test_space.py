"""The writer's in-memory picture of this host's claims (poold.ledger.space), on its own: a
reload keeps what it knew of unchanged claims only, and a rebuild keeps every live lease's bytes
out of reach even when the ledger files a lease under the wrong claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from poold.ledger.space import HostSpace
from poold.models import Claim, Lease
from poold.types import Extent, MiB

DEV, OTHER_DEV = 1, 2
T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDLE_S = 60.0


def space_of(*claims: tuple[int, int, Extent]) -> HostSpace:
    space = HostSpace()
    for claim_id, device_id, extent in claims:
        space.add_claim(claim_id, device_id, extent, 2 * MiB)
    return space


def lease(claim_id: int, device_id: int, offset: int, length: int) -> Lease:
    return Lease(id=f"L{claim_id}-{device_id}-{offset}", claim_id=claim_id, device_id=device_id,
                 offset=offset, length=length)


def claim(claim_id: int, device_id: int, offset: int) -> Claim:
    return Claim(id=claim_id, device_id=device_id, offset=offset, length=16 * MiB)


def test_a_reload_keeps_when_an_unchanged_claim_went_idle_and_no_more() -> None:
    space = space_of((1, DEV, Extent(0, 16 * MiB)), (2, DEV, Extent(16 * MiB, 16 * MiB)))
    assert space.idle_claims(T0, IDLE_S) == []  # both seen idle from T0
    # Rebuilt from the ledger: claim 1 as it was, claim 2 trimmed by another host, claim 3 new.
    space.reload(space_of((1, DEV, Extent(0, 16 * MiB)), (2, DEV, Extent(16 * MiB, 8 * MiB)),
                          (3, DEV, Extent(32 * MiB, 16 * MiB))))
    later = T0 + timedelta(seconds=IDLE_S)
    assert [c.claim_id for c in space.idle_claims(later, IDLE_S)] == [1]
    assert [c.claim_id for c in space.idle_claims(later + timedelta(seconds=IDLE_S), IDLE_S)] \
        == [1, 2, 3]


def test_a_rebuild_reserves_every_live_lease_where_its_bytes_are() -> None:
    claims = [claim(1, DEV, 0), claim(2, DEV, 16 * MiB), claim(3, OTHER_DEV, 0)]
    filed = lease(1, DEV, 0, 4 * MiB)
    misfiled = lease(1, DEV, 16 * MiB, 4 * MiB)  # says claim 1, lies in claim 2
    unknown_claim = lease(99, DEV, 20 * MiB, 4 * MiB)  # a claim this host does not hold
    nowhere = lease(98, DEV, 40 * MiB, 4 * MiB)  # in no claim of this host: nothing to keep
    space = HostSpace.rebuild(claims, [filed, misfiled, unknown_claim, nowhere],
                              {DEV: 2 * MiB, OTHER_DEV: 2 * MiB})
    assert space.fingerprint() == (frozenset({1, 2, 3}), 12 * MiB)
    # What is left to place: claim 1 from 4 MiB, claim 2 from 24 MiB; the other device's claim
    # is whole (a lease on DEV at offset 0 reserves nothing there).
    assert space.place(DEV, 12 * MiB) == (1, Extent(4 * MiB, 12 * MiB))
    assert space.place(DEV, 8 * MiB) == (2, Extent(24 * MiB, 8 * MiB))
    assert space.place(DEV, 2 * MiB) is None
    assert space.place(OTHER_DEV, 16 * MiB) == (3, Extent(0, 16 * MiB))


def test_a_place_takes_the_tightest_hole_of_the_devices_claims_the_older_on_a_tie() -> None:
    """Best fit across claims; between equal fits the claim added first, so newer claims are
    the ones left idle to be given back. Another device's claims are never used."""
    space = space_of((1, DEV, Extent(0, 16 * MiB)), (2, DEV, Extent(16 * MiB, 16 * MiB)),
                     (3, OTHER_DEV, Extent(0, 4 * MiB)))
    assert space.place(DEV, 2 * MiB) == (1, Extent(0, 2 * MiB))  # a tie: the older claim
    assert space.place(DEV, 2 * MiB) == (1, Extent(2 * MiB, 2 * MiB))  # now the tighter one
    space.free(1, Extent(0, 2 * MiB))
    space.free(1, Extent(2 * MiB, 2 * MiB))
    space.place(DEV, 14 * MiB)  # claim 1 keeps a 2 MiB hole, claim 2 a whole 16 MiB one
    assert space.place(DEV, 2 * MiB) == (1, Extent(14 * MiB, 2 * MiB))
    assert space.place(OTHER_DEV, 4 * MiB) == (3, Extent(0, 4 * MiB))
    assert space.place(OTHER_DEV, 2 * MiB) is None
