"""Elastic leases asked back on the real ledger (SQLite file and PostgreSQL), with a manual
ledger clock: whom a waiting grant asks (coldest first, enough bytes, never twice), what the
holder hears, and the revocation of what is kept past the deadline."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from poold import errors
from poold.ledger import leases, reads, reclaims, sessions
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.sessions import OpenRequest
from poold.ledger.views import LeaseView, SessionView
from poold.types import EventKind, LeaseState, MiB
from tests.conftest import LedgerFactory, emulated_spec

GRACE_S = 5.0


def open_(ledger: Ledger, tenant: str | None = None) -> SessionView:
    return ledger.run(partial(sessions.open_session,
                              request=OpenRequest(actor="test", ttl_s=60, tenant=tenant)))


def grant(ledger: Ledger, size: int, **kwargs: object) -> LeaseView:
    request = GrantRequest(size=size, actor="test", **kwargs)  # type: ignore[arg-type]
    return ledger.run(partial(leases.grant, request=request))


def ask(ledger: Ledger, size: int, pool: str | None = None) -> reclaims.Asked:
    return ledger.run(partial(reclaims.ask, pool_name=pool, size=size, actor="waiting-grant",
                              grace_s=GRACE_S))


def lease(ledger: Ledger, lease_id: str) -> LeaseView:
    return ledger.read(lambda s, now: reads.lease(s, lease_id, now))


def asked_events(ledger: Ledger) -> list[dict[str, object]]:
    found = ledger.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_RECLAIM_ASKED,
                                                  limit=1000))
    return [dict(e.details, lease=e.lease_id, actor=e.actor, host=e.host, device=e.device_id)
            for e in reversed(found)]


def test_the_coldest_elastic_leases_are_asked_for_enough_bytes(ledger: Ledger,
                                                              clock: ManualClock) -> None:
    held = open_(ledger)
    elastic = []
    for _ in range(4):
        elastic.append(grant(ledger, 8 * MiB, session_id=held.id, elastic=True))
        clock.advance(1)
    plain = grant(ledger, 8 * MiB, session_id=held.id)
    # The holder says the first two are in use and the last two sat idle, the last longest.
    idle = {elastic[0].id: 0.0, elastic[1].id: 0.0, elastic[2].id: 30.0, elastic[3].id: 60.0}
    ledger.run(partial(sessions.keepalive, session_id=held.id, actor="test", idle_s=idle))
    asked = ask(ledger, 12 * MiB)
    assert asked == reclaims.Asked(asked_bytes=16 * MiB, pending_bytes=0)
    by = clock.now()
    assert [lease(ledger, e.id).reclaim_by is not None for e in elastic] == \
        [False, False, True, True]
    assert lease(ledger, plain.id).reclaim_by is None  # not elastic: never asked
    events = asked_events(ledger)
    assert [e["lease"] for e in events] == [elastic[3].id, elastic[2].id]  # coldest first
    assert all(e["actor"] == "waiting-grant" and e["for_bytes"] == 12 * MiB
               and e["length"] == 8 * MiB and e["session"] == held.id for e in events)
    deadline = lease(ledger, elastic[3].id).reclaim_by
    assert deadline is not None and (deadline - by).total_seconds() == GRACE_S
    # On record under the holder's host (whose reaper revokes), with the deadline it was given.
    assert all(e["host"] == ledger.host_id and e["by"] == deadline.isoformat()
               and e["device"] == elastic[0].device_id for e in events)
    # The holder hears it in its keepalive's answer, soonest deadline first.
    answer = ledger.run(partial(sessions.keepalive, session_id=held.id, actor="test"))
    assert {a.lease for a in answer.reclaim} == {elastic[2].id, elastic[3].id}
    assert all(a.length == 8 * MiB and a.by == deadline for a in answer.reclaim)
    # So does anyone reading the session, and closing it now would give back those bytes.
    read = ledger.read(lambda s, now: reads.client_session(s, held.id, now))
    assert read.reclaim == answer.reclaim
    assert ledger.run(partial(reclaims.asked_bytes_of, session_id=held.id)) == 16 * MiB
    assert ledger.read(fsck).clean


def test_reports_under_a_second_apart_still_order_the_coldest(ledger: Ledger) -> None:
    held = open_(ledger)
    pair = sorted((grant(ledger, 8 * MiB, session_id=held.id, elastic=True) for _ in range(2)),
                  key=lambda x: x.id)
    # The colder is the one a tie would not pick (ties go to the smaller id).
    idle = {pair[0].id: 0.0, pair[1].id: 0.5}
    ledger.run(partial(sessions.keepalive, session_id=held.id, actor="test", idle_s=idle))
    assert ask(ledger, 2 * MiB).asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [pair[1].id]


def test_without_reports_coldness_is_the_last_renewal_whatever_the_ttl(
        ledger: Ledger, clock: ManualClock) -> None:
    """A long-lived lease renewed long ago is colder than a short one granted since: the
    ledger's last renewal (expires_at - ttl_s), not the expiry, says which was used last."""
    long_lived = grant(ledger, 8 * MiB, elastic=True, ttl_s=600)
    clock.advance(1)
    grant(ledger, 8 * MiB, elastic=True, ttl_s=10)
    assert ask(ledger, 2 * MiB).asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [long_lived.id]


def test_without_reports_the_oldest_grants_are_asked_first(ledger: Ledger,
                                                           clock: ManualClock) -> None:
    first = grant(ledger, 8 * MiB, elastic=True)
    clock.advance(1)
    grant(ledger, 8 * MiB, elastic=True)
    assert ask(ledger, 2 * MiB).asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [first.id]


def test_without_reports_a_lease_renewed_lately_is_asked_after_one_left_alone(
        ledger: Ledger, clock: ManualClock) -> None:
    older = grant(ledger, 8 * MiB, elastic=True, ttl_s=60)
    clock.advance(1)
    newer = grant(ledger, 8 * MiB, elastic=True, ttl_s=60)
    clock.advance(5)
    ledger.run(partial(leases.keepalive, lease_id=older.id, ttl_s=None, actor="holder"))
    assert ask(ledger, 2 * MiB).asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [newer.id]


def test_bytes_on_their_way_back_are_not_asked_twice(ledger: Ledger) -> None:
    first, second = (grant(ledger, 8 * MiB, elastic=True) for _ in range(2))
    assert ask(ledger, 8 * MiB).asked_bytes == 8 * MiB
    assert ask(ledger, 8 * MiB) == reclaims.Asked(asked_bytes=0, pending_bytes=8 * MiB)
    assert ask(ledger, 10 * MiB) == reclaims.Asked(asked_bytes=8 * MiB, pending_bytes=8 * MiB)
    assert ask(ledger, 64 * MiB) == reclaims.Asked(asked_bytes=0, pending_bytes=16 * MiB)
    assert len(asked_events(ledger)) == 2
    assert {lease(ledger, x.id).reclaim_by is not None for x in (first, second)} == {True}


def test_one_byte_short_asks_a_whole_lease(ledger: Ledger) -> None:
    grant(ledger, 8 * MiB, elastic=True)
    assert ask(ledger, 1) == reclaims.Asked(asked_bytes=8 * MiB, pending_bytes=0)


def test_nothing_elastic_nothing_asked(ledger: Ledger) -> None:
    grant(ledger, 8 * MiB)
    assert ask(ledger, 8 * MiB) == reclaims.Asked(0, 0)
    assert asked_events(ledger) == []


def test_an_unknown_pool_is_refused(ledger: Ledger) -> None:
    with pytest.raises(errors.UnknownPool):
        ask(ledger, 8 * MiB, pool="nope")


def test_what_is_kept_past_the_deadline_is_revoked_and_what_is_given_back_is_not(
        ledger: Ledger, clock: ManualClock) -> None:
    kept, given = (grant(ledger, 8 * MiB, elastic=True, ttl_s=600) for _ in range(2))
    ask(ledger, 16 * MiB)
    ledger.run(partial(leases.release, lease_id=given.id, actor="holder"))
    clock.advance(GRACE_S - 0.5)
    assert ledger.run(reclaims.revoke_overdue) == 0  # not due yet
    assert lease(ledger, kept.id).state is LeaseState.ACTIVE
    clock.advance(0.5)
    assert ledger.run(reclaims.revoke_overdue) == 1
    assert lease(ledger, kept.id).state is LeaseState.REVOKED
    assert lease(ledger, given.id).state is LeaseState.RELEASED
    revoked = ledger.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_REVOKED, limit=10))
    assert [(e.lease_id, e.actor) for e in revoked] == [(kept.id, reclaims.RECLAIMER)]
    assert ledger.run(reclaims.revoke_overdue) == 0  # once
    # The bytes are free again: a grant of the whole device fits.
    grant(ledger, 64 * MiB)
    assert ledger.read(fsck).clean


def test_overdue_leases_of_another_host_are_left_to_it(make_ledger: LedgerFactory,
                                                      clock: ManualClock) -> None:
    spec = replace(emulated_spec(64 * MiB, name="shared0"), shared=True)
    here = make_ledger(host_id="host-a", specs=[spec], claim_slice=8 * MiB)
    there = make_ledger(host_id="host-b", specs=[spec], claim_slice=8 * MiB)
    theirs = grant(there, 8 * MiB, elastic=True, ttl_s=600)
    ask(here, 8 * MiB)
    clock.advance(GRACE_S)
    assert here.run(reclaims.revoke_overdue) == 0
    assert lease(here, theirs.id).state is LeaseState.ACTIVE
    assert there.run(reclaims.revoke_overdue) == 1
    assert lease(here, theirs.id).state is LeaseState.REVOKED


def test_a_holder_reports_use_only_for_its_own_session(ledger: Ledger) -> None:
    mine, other = open_(ledger, tenant="a"), open_(ledger, tenant="b")
    theirs = grant(ledger, 8 * MiB, session_id=other.id, tenant="b", elastic=True)
    ours = grant(ledger, 8 * MiB, session_id=mine.id, tenant="a", elastic=True)
    # Tenant a claims b's lease is hot and its own is cold: only its own report counts.
    ledger.run(partial(sessions.keepalive, session_id=mine.id, actor="a", tenant_only="a",
                       idle_s={theirs.id: 0.0, ours.id: 3600.0}))
    ask(ledger, 8 * MiB)
    assert [e["lease"] for e in asked_events(ledger)] == [ours.id]


def test_a_released_lease_is_no_longer_asked_of_its_session(ledger: Ledger) -> None:
    held = open_(ledger)
    first = grant(ledger, 8 * MiB, session_id=held.id, elastic=True)
    ask(ledger, 8 * MiB)
    ledger.run(partial(leases.release, lease_id=first.id, actor="holder"))
    answer = ledger.run(partial(sessions.keepalive, session_id=held.id, actor="test"))
    assert answer.reclaim == []
    assert ledger.read(lambda s, now: reads.client_session(s, held.id, now)).reclaim == []


def test_elastic_is_part_of_the_idempotent_request(ledger: Ledger) -> None:
    grant(ledger, 8 * MiB, idempotency_key="k", elastic=True)
    with pytest.raises(errors.IdempotencyConflict):
        grant(ledger, 8 * MiB, idempotency_key="k")
    assert grant(ledger, 8 * MiB, idempotency_key="k", elastic=True).elastic


def test_bytes_being_zeroed_count_as_on_their_way_back(make_ledger: LedgerFactory,
                                                      clock: ManualClock) -> None:
    ledger = make_ledger(scrub=True)
    first = grant(ledger, 8 * MiB, elastic=True)
    clock.advance(1)  # the first is the colder one, the one asked (no tie left to the ids)
    grant(ledger, 8 * MiB, elastic=True)
    assert ask(ledger, 8 * MiB).asked_bytes == 8 * MiB
    assert lease(ledger, first.id).reclaim_by is not None
    ledger.run(partial(leases.release, lease_id=first.id, actor="holder"))
    assert lease(ledger, first.id).state is LeaseState.SCRUBBING
    assert ask(ledger, 8 * MiB) == reclaims.Asked(asked_bytes=0, pending_bytes=8 * MiB)
    ledger.run(partial(leases.finish_scrub, lease_id=first.id))
    assert ask(ledger, 8 * MiB) == reclaims.Asked(asked_bytes=8 * MiB, pending_bytes=0)


def test_a_grant_never_asks_its_own_session(ledger: Ledger) -> None:
    mine, other = open_(ledger), open_(ledger)
    own = grant(ledger, 8 * MiB, session_id=mine.id, elastic=True)
    theirs = grant(ledger, 8 * MiB, session_id=other.id, elastic=True)
    asked = ledger.run(partial(reclaims.ask, pool_name=None, size=16 * MiB, actor="t",
                               grace_s=GRACE_S, session_id=mine.id))
    assert asked.asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [theirs.id]
    assert lease(ledger, own.id).reclaim_by is None


def test_a_lease_just_granted_is_not_the_coldest(ledger: Ledger, clock: ManualClock) -> None:
    """A fresh elastic lease (granted, say, to a grant that waited for room) counts as used at
    its grant: its session's last renewal, older, does not make it the one asked back."""
    busy = open_(ledger)
    used = grant(ledger, 8 * MiB, session_id=busy.id, elastic=True)
    fresh_session = open_(ledger)  # renewed at its opening, never since
    clock.advance(10)
    ledger.run(partial(sessions.keepalive, session_id=busy.id, actor="test",
                       idle_s={used.id: 0.0}))  # in use 10 s after the other session opened
    clock.advance(5)
    fresh = grant(ledger, 8 * MiB, session_id=fresh_session.id, elastic=True)
    assert ask(ledger, MiB).asked_bytes == 8 * MiB
    assert [e["lease"] for e in asked_events(ledger)] == [used.id]
    assert lease(ledger, fresh.id).reclaim_by is None


def test_a_grant_is_on_record_with_what_was_asked_and_given(ledger: Ledger) -> None:
    """lease.granted says where the bytes are, what was asked for (before rounding to the
    device's align) and whether the lease is elastic (said only when it is)."""
    held = open_(ledger)
    plain = grant(ledger, 3 * MiB)
    elastic = grant(ledger, 5 * MiB, session_id=held.id, elastic=True)
    granted = {e.lease_id: e for e in ledger.read(
        lambda s, _: reads.events(s, kind=EventKind.LEASE_GRANTED))}
    for lease_, asked, extra in ((plain, 3 * MiB, {}), (elastic, 5 * MiB, {"elastic": True})):
        event = granted[lease_.id]
        assert (event.actor, event.host, event.device_id) == ("test", ledger.host_id,
                                                              lease_.device_id)
        assert event.details == {"offset": lease_.offset, "length": lease_.length,
                                 "generation": lease_.generation, "ttl_s": lease_.ttl_s,
                                 "requested": asked, **extra}
