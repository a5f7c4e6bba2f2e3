"""Scrub on release in the ledger (SQLite file and PostgreSQL): an ended lease in a scrubbing pool
keeps its extent as `scrubbing` until finish_scrub, whatever way it ended, and the database
itself refuses a grant over it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from poold import errors
from poold.ledger import leases, reads
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.models import Lease
from poold.types import DeviceKind, EventKind, LeaseState, MiB
from tests.conftest import HOST, LedgerFactory, emulated_spec


@pytest.fixture
def scrubbing(make_ledger: LedgerFactory) -> Ledger:
    """A scrubbing pool on one 16 MiB device: a 16 MiB lease fills it."""
    return make_ledger([emulated_spec(16 * MiB)], scrub=True)


def grant(ledger: Ledger, size: int = 16 * MiB, **kwargs: object) -> LeaseView:
    request = GrantRequest(size=size, actor="test", ttl_s=30, **kwargs)  # type: ignore[arg-type]
    return ledger.run(partial(leases.grant, request=request))


def finish(ledger: Ledger, lease_id: str) -> LeaseView | None:
    return ledger.run(partial(leases.finish_scrub, lease_id=lease_id))


@pytest.mark.parametrize("end", ["release", "revoke", "expire"])
def test_an_ended_lease_holds_its_bytes_until_scrubbed(scrubbing: Ledger, clock: ManualClock,
                                                       end: str) -> None:
    first = grant(scrubbing)
    if end == "expire":
        clock.advance(31)
        assert scrubbing.run(leases.reap) == 1
        ended_as = LeaseState.EXPIRED
    else:
        command = leases.release if end == "release" else leases.revoke
        ended = scrubbing.run(partial(command, lease_id=first.id, actor="test"))
        assert ended.state is LeaseState.SCRUBBING and ended.scrubbed_bytes == 0
        ended_as = LeaseState.RELEASED if end == "release" else LeaseState.REVOKED
    with pytest.raises(errors.NoCapacity):
        grant(scrubbing)
    # Release stays idempotent meanwhile; the lease is nobody's to renew.
    again = scrubbing.run(partial(leases.release, lease_id=first.id, actor="test"))
    assert again.state is LeaseState.SCRUBBING
    with pytest.raises(errors.LeaseNotActive):
        scrubbing.run(partial(leases.keepalive, lease_id=first.id, ttl_s=None, actor="test"))
    pool = scrubbing.read(reads.pools)[0]
    assert (pool.scrubbing_bytes, pool.leased_bytes, pool.available_bytes) == (16 * MiB, 0, 0)
    assert scrubbing.read(fsck).clean

    scrubbing.run(partial(leases.scrub_progress, lease_id=first.id, done=8 * MiB))
    assert scrubbing.read(lambda s, now: reads.lease(s, first.id, now)).scrubbed_bytes == 8 * MiB
    done = finish(scrubbing, first.id)
    assert done is not None and done.state is ended_as and done.scrubbed_bytes == 16 * MiB
    assert finish(scrubbing, first.id) is None  # once only
    second = grant(scrubbing)
    assert (second.offset, second.length) == (first.offset, first.length)
    kinds = [e.kind for e in scrubbing.read(lambda s, _now: reads.events(s, lease_id=first.id))]
    assert kinds[0] == EventKind.LEASE_SCRUBBED  # newest first
    assert scrubbing.read(fsck).clean


def test_an_unscrubbed_pool_frees_at_once(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(16 * MiB)], scrub=False)
    first = grant(ledger)
    assert ledger.run(partial(leases.release, lease_id=first.id, actor="t")).state == "released"
    assert grant(ledger).offset == first.offset


def test_the_database_refuses_a_lease_over_a_scrubbing_one(scrubbing: Ledger) -> None:
    """Invariant 6 is the database's too: the overlap guard covers scrubbing leases."""
    first = grant(scrubbing)
    scrubbing.run(partial(leases.release, lease_id=first.id, actor="test"))
    def copy(session: Session, _now: object) -> dict[str, object]:
        row = session.get(Lease, first.id)
        assert row is not None
        return {c.name: getattr(row, c.name) for c in Lease.__table__.columns}

    values = scrubbing.read(copy)
    values.update(id="intruder", state="active", idempotency_key=None, ended_as=None)

    def intrude(tx: leases.Tx) -> None:
        tx.conn.execute(insert(Lease.__table__).values(**values))

    with pytest.raises(errors.LedgerUnavailable, match="IntegrityError"):
        scrubbing.run(intrude)  # the writer reports the database's refusal


def test_still_holding_names_the_leases_whose_memory_must_stay(scrubbing: Ledger,
                                                              clock: ManualClock) -> None:
    """What the scrubber asks once a pass before dropping memory objects: active leases not
    past their expiry and scrubbing ones hold their extent; released, expired (reaped or not)
    and unknown ids do not; nor does one at its expiry instant (it has expired)."""
    live, waits, done, due, at_expiry = (
        scrubbing.run(partial(leases.grant, request=GrantRequest(
            size=2 * MiB, actor="test", ttl_s=(600, 600, 600, 5, 6)[i]))) for i in range(5))
    scrubbing.run(partial(leases.release, lease_id=waits.id, actor="test"))  # scrubbing now
    scrubbing.run(partial(leases.release, lease_id=done.id, actor="test"))
    finish(scrubbing, done.id)  # released
    clock.advance(6)  # `due` is past its expiry, not yet reaped; `at_expiry` just at it
    asked = [live.id, waits.id, done.id, due.id, at_expiry.id, "L-unknown"]
    assert scrubbing.read(partial(reads.still_holding, lease_ids=asked)) == {live.id, waits.id}
    # More ids than one query takes, the live ones first and last in a batch of 500.
    many = [f"L-{i}" for i in range(1200)]
    many[499], many[500], many[1199] = live.id, waits.id, "L-last"
    many.append(at_expiry.id)
    assert scrubbing.read(partial(reads.still_holding, lease_ids=many)) == {live.id, waits.id}


def test_a_region_carved_per_lease_keeps_an_ended_lease_until_its_device_is_gone(
        make_ledger: LedgerFactory) -> None:
    """Whatever the pool says of scrubbing: the lease's own dax device must be gone before
    another is made over its range, so its extent waits in `scrubbing` (not zeroed)."""
    region = replace(emulated_spec(16 * MiB, name="region0"), kind=DeviceKind.DAX_REGION)
    ledger = make_ledger([region], scrub=False)
    first = grant(ledger, 4 * MiB)
    ended = ledger.run(partial(leases.release, lease_id=first.id, actor="t"))
    assert ended.state is LeaseState.SCRUBBING
    (released,) = ledger.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_RELEASED))
    assert released.details["scrub"] is True
    (job,) = ledger.read(partial(reads.scrubbing, host_id=HOST))
    assert (job.lease_id, job.kind, job.zero) == (first.id, DeviceKind.DAX_REGION, False)


def test_a_finished_scrub_is_recorded_with_the_extent_it_zeroed(scrubbing: Ledger) -> None:
    first = grant(scrubbing, 4 * MiB)
    scrubbing.run(partial(leases.release, lease_id=first.id, actor="t"))
    (job,) = scrubbing.read(partial(reads.scrubbing, host_id=HOST))
    assert (job.lease_id, job.chardev, job.offset, job.length, job.done, job.kind, job.zero) == (
        first.id, first.chardev, first.offset, first.length, 0, DeviceKind.EMULATED, True)
    finish(scrubbing, first.id)
    (event,) = scrubbing.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_SCRUBBED))
    assert (event.actor, event.host, event.device_id, event.lease_id) == (
        "scrubber", HOST, first.device_id, first.id)
    assert event.details == {"offset": first.offset, "length": first.length}
