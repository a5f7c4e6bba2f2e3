"""Client sessions on the real ledger (SQLite file and PostgreSQL), with a manual ledger clock:
one keepalive renews every lease in a session, and ending the session ends them."""

from __future__ import annotations

import re
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
from poold.types import EventKind, LeaseState, MiB, SessionState
from tests.conftest import HOST, LedgerFactory, emulated_spec


def open_(ledger: Ledger, ttl_s: int = 10, tenant: str | None = None) -> SessionView:
    return ledger.run(partial(sessions.open_session,
                              request=OpenRequest(actor="test", ttl_s=ttl_s, tenant=tenant)))


def grant(ledger: Ledger, size: int, **kwargs: object) -> LeaseView:
    request = GrantRequest(size=size, actor="test", **kwargs)  # type: ignore[arg-type]
    return ledger.run(partial(leases.grant, request=request))


def lease(ledger: Ledger, lease_id: str) -> LeaseView:
    return ledger.read(lambda s, now: reads.lease(s, lease_id, now))


def session(ledger: Ledger, session_id: str) -> SessionView:
    return ledger.read(lambda s, now: reads.client_session(s, session_id, now))


def kinds(ledger: Ledger) -> list[str]:
    return [e.kind for e in reversed(ledger.read(lambda s, _: reads.events(s, limit=1000)))]


def assert_clean(ledger: Ledger) -> None:
    report = ledger.read(fsck)
    assert report.clean, report.violations


def test_one_keepalive_renews_every_lease_in_the_session(ledger: Ledger,
                                                         clock: ManualClock) -> None:
    opened = open_(ledger, ttl_s=10)
    granted = [grant(ledger, 2 * MiB, session_id=opened.id) for _ in range(3)]
    plain = grant(ledger, 2 * MiB, ttl_s=10)
    assert {g.expires_at for g in granted} == {opened.expires_at}
    assert all(g.session_id == opened.id and g.ttl_s == 10 for g in granted)
    clock.advance(8)
    renewed = ledger.run(partial(sessions.keepalive, session_id=opened.id, actor="test"))
    assert sorted(renewed.leases) == sorted(g.id for g in granted)
    assert (renewed.expires_at - clock.now()).total_seconds() == 10
    assert {lease(ledger, g.id).expires_at for g in granted} == {renewed.expires_at}
    assert lease(ledger, plain.id).expires_at == plain.expires_at  # not in the session
    clock.advance(5)  # 13 s after the grants: the session's leases live on, the plain one not
    assert {lease(ledger, g.id).state for g in granted} == {LeaseState.ACTIVE}
    assert lease(ledger, plain.id).state is LeaseState.EXPIRED
    # One event for the session's renewal, none per lease; it says whose and until when.
    (event,) = ledger.read(lambda s, _: reads.events(s, kind=EventKind.SESSION_RENEWED))
    assert (event.actor, event.host) == ("test", HOST)
    assert event.details == {"session": opened.id, "expires_at": renewed.expires_at.isoformat(),
                             "leases": 3}
    assert EventKind.LEASE_RENEWED not in kinds(ledger)
    assert session(ledger, opened.id).leases == renewed.leases
    assert_clean(ledger)


def test_keepalive_of_one_lease_renews_its_session_and_siblings(ledger: Ledger,
                                                                clock: ManualClock) -> None:
    opened = open_(ledger, ttl_s=10)
    first, second = (grant(ledger, 2 * MiB, session_id=opened.id) for _ in range(2))
    clock.advance(6)
    renewed = ledger.run(partial(leases.keepalive, lease_id=first.id, ttl_s=None, actor="test"))
    assert (renewed.expires_at - clock.now()).total_seconds() == 10
    assert (renewed.ttl_s, renewed.state) == (10, LeaseState.ACTIVE)
    assert lease(ledger, second.id).expires_at == renewed.expires_at
    assert session(ledger, opened.id).expires_at == renewed.expires_at


def test_an_expired_session_expires_its_leases_and_frees_their_bytes(
        ledger: Ledger, clock: ManualClock) -> None:
    opened = open_(ledger, ttl_s=10)
    granted = [grant(ledger, 16 * MiB, session_id=opened.id) for _ in range(4)]  # the device
    with pytest.raises(errors.NoCapacity):
        grant(ledger, 2 * MiB)
    clock.advance(10)
    assert session(ledger, opened.id).state is SessionState.EXPIRED  # computed on read
    assert session(ledger, opened.id).leases == []
    assert {lease(ledger, g.id).state for g in granted} == {LeaseState.EXPIRED}
    said = f"session {opened.id} expired at {opened.expires_at.isoformat()}"
    with pytest.raises(errors.SessionExpired, match=f"^{re.escape(said)}$"):
        ledger.run(partial(sessions.keepalive, session_id=opened.id, actor="test"))
    with pytest.raises(errors.SessionExpired, match=f"^{re.escape(said)}$"):
        grant(ledger, 2 * MiB, session_id=opened.id)
    assert ledger.run(sessions.reap) == 1
    assert ledger.run(sessions.reap) == 0
    for g in granted:
        ended = lease(ledger, g.id)
        assert (ended.state, ended.ended_at) == (LeaseState.EXPIRED, clock.now())
    assert kinds(ledger).count(EventKind.LEASE_EXPIRED) == 4
    assert kinds(ledger).count(EventKind.SESSION_EXPIRED) == 1
    assert grant(ledger, 64 * MiB).length == 64 * MiB  # every byte back
    assert_clean(ledger)


def test_closing_releases_its_leases_and_is_idempotent(ledger: Ledger) -> None:
    opened = open_(ledger)
    granted = [grant(ledger, 2 * MiB, session_id=opened.id) for _ in range(2)]
    plain = grant(ledger, 2 * MiB)
    closed = ledger.run(partial(sessions.close, session_id=opened.id, actor="test"))
    assert (closed.state, closed.leases) == (SessionState.CLOSED, [])
    assert {lease(ledger, g.id).state for g in granted} == {LeaseState.RELEASED}
    assert lease(ledger, plain.id).state is LeaseState.ACTIVE
    again = ledger.run(partial(sessions.close, session_id=opened.id, actor="test"))
    assert (again.state, again.ended_at) == (closed.state, closed.ended_at)
    assert kinds(ledger).count(EventKind.SESSION_CLOSED) == 1
    assert kinds(ledger).count(EventKind.LEASE_RELEASED) == 2
    with pytest.raises(errors.SessionNotActive, match=f"^session {opened.id} is closed$"):
        ledger.run(partial(sessions.keepalive, session_id=opened.id, actor="test"))
    with pytest.raises(errors.SessionNotActive, match=f"^session {opened.id} is closed$"):
        grant(ledger, 2 * MiB, session_id=opened.id)
    assert_clean(ledger)


def test_revoking_revokes_its_leases(ledger: Ledger) -> None:
    opened = open_(ledger)
    granted = grant(ledger, 2 * MiB, session_id=opened.id)
    revoked = ledger.run(partial(sessions.revoke, session_id=opened.id, actor="admin"))
    assert revoked.state is SessionState.REVOKED
    assert lease(ledger, granted.id).state is LeaseState.REVOKED
    with pytest.raises(errors.LeaseNotActive, match=rf"^lease {granted.id} is revoked$"):
        ledger.run(partial(leases.keepalive, lease_id=granted.id, ttl_s=None, actor="test"))


def test_keepalive_names_only_the_leases_still_live(ledger: Ledger) -> None:
    """A lease revoked on its own leaves the session: the holder learns from the keepalive."""
    opened = open_(ledger)
    kept, revoked = (grant(ledger, 2 * MiB, session_id=opened.id) for _ in range(2))
    ledger.run(partial(leases.revoke, lease_id=revoked.id, actor="admin"))
    renewed = ledger.run(partial(sessions.keepalive, session_id=opened.id, actor="test"))
    assert renewed.leases == [kept.id]


def test_closing_after_expiry_finalises_as_expired(ledger: Ledger, clock: ManualClock) -> None:
    opened = open_(ledger, ttl_s=5)
    granted = grant(ledger, 2 * MiB, session_id=opened.id)
    clock.advance(6)
    ended = ledger.run(partial(sessions.close, session_id=opened.id, actor="test"))
    assert (ended.state, ended.ended_at) == (SessionState.EXPIRED, clock.now())
    assert lease(ledger, granted.id).state is LeaseState.EXPIRED
    assert ledger.run(sessions.reap) == 0
    assert_clean(ledger)


def test_another_tenants_session_does_not_exist_for_it(ledger: Ledger) -> None:
    mine = open_(ledger, tenant="a")
    granted = grant(ledger, 2 * MiB, tenant="a", session_id=mine.id)
    for call in (partial(sessions.keepalive, session_id=mine.id, actor="b", tenant_only="b"),
                 partial(sessions.close, session_id=mine.id, actor="b", tenant_only="b")):
        with pytest.raises(errors.UnknownSession):
            ledger.run(call)
    with pytest.raises(errors.UnknownSession) as unknown:
        grant(ledger, 2 * MiB, tenant="b", session_id=mine.id)
    assert str(unknown.value) == f"no session {mine.id!r}"  # as of an id nobody opened
    with pytest.raises(errors.UnknownSession):
        grant(ledger, 2 * MiB, session_id=mine.id)  # nor to an admin granting for no tenant
    with pytest.raises(errors.UnknownSession):
        ledger.read(lambda s, now: reads.client_session(s, mine.id, now, tenant_only="b"))
    assert [x.id for x in ledger.read(lambda s, now: reads.sessions(s, now, tenant="b"))] == []
    assert [x.id for x in ledger.read(lambda s, now: reads.sessions(s, now, tenant="a"))] == [
        mine.id]
    assert session(ledger, mine.id).leases == [granted.id]  # all still there


def test_a_lease_in_a_session_takes_the_sessions_ttl(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()  # the pool's max_ttl_s is 3600
    opened = open_(ledger, ttl_s=10)
    with pytest.raises(errors.InvalidRequest, match="lives as long as the session"):
        grant(ledger, 2 * MiB, ttl_s=20, session_id=opened.id)
    assert grant(ledger, 2 * MiB, ttl_s=10, session_id=opened.id).ttl_s == 10
    long = open_(ledger, ttl_s=7200)
    with pytest.raises(errors.InvalidRequest, match="ttl_s must be between 1 and 3600"):
        grant(ledger, 2 * MiB, session_id=long.id)
    for bad in (0, -1, sessions.MAX_SESSION_TTL_S + 1):
        with pytest.raises(errors.InvalidRequest):
            open_(ledger, ttl_s=bad)
    for bad_id in ("nope", "0" * 32):
        with pytest.raises(errors.UnknownSession):
            grant(ledger, 2 * MiB, session_id=bad_id)


def test_live_sessions_per_tenant_are_bounded(ledger: Ledger, clock: ManualClock,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "MAX_LIVE_SESSIONS", 2)
    first = open_(ledger, tenant="a")
    open_(ledger, tenant="a")
    with pytest.raises(errors.QuotaExceeded, match="2 live sessions"):
        open_(ledger, tenant="a")
    open_(ledger, tenant="b")  # another tenant's count
    ledger.run(partial(sessions.close, session_id=first.id, actor="test"))
    open_(ledger, tenant="a")  # a closed one no longer counts
    clock.advance(11)
    open_(ledger, tenant="a")  # nor expired ones


def test_sessions_are_listed_by_host_and_state_by_the_ledger_clock_up_to_the_limit(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """Each with its live leases and the asks pending on them; newest first."""
    shared = replace(emulated_spec(64 * MiB, "shared0"), shared=True)
    a = make_ledger([shared], host_id="host-a", claim_slice=16 * MiB)
    b = make_ledger([shared], host_id="host-b", claim_slice=16 * MiB)
    mine = open_(a, ttl_s=60)
    held = grant(a, 8 * MiB, session_id=mine.id, elastic=True)
    a.run(partial(reclaims.ask, pool_name=None, size=2 * MiB, actor="waiting-grant",
                  grace_s=5.0))
    clock.advance(1)
    theirs = open_(b, ttl_s=5)
    clock.advance(5)  # theirs is past its expiry; nobody reaped it

    def listed(**filters: object) -> list[SessionView]:
        return a.read(lambda s, now: reads.sessions(s, now, **filters))  # type: ignore[arg-type]
    (only,) = listed(host="host-a")
    assert (only.id, only.leases, [x.lease for x in only.reclaim]) == (mine.id, [held.id],
                                                                     [held.id])
    assert [x.id for x in listed(state=SessionState.ACTIVE)] == [mine.id]
    assert [x.id for x in listed(state=SessionState.EXPIRED)] == [theirs.id]
    assert [x.id for x in listed()] == [theirs.id, mine.id]
    assert [x.id for x in listed(limit=1)] == [theirs.id]


def test_a_lease_of_a_session_renewed_at_its_expiry_instant_has_expired(
        ledger: Ledger, clock: ManualClock) -> None:
    """As a plain lease: at expires_at it is expired (by the ledger clock), and renewing it is
    refused saying when; the session is not renewed by it."""
    opened = open_(ledger, ttl_s=10)
    granted = grant(ledger, 2 * MiB, session_id=opened.id)
    clock.advance(10)
    expected = f"lease {granted.id} expired at {granted.expires_at.isoformat()}"
    with pytest.raises(errors.LeaseExpired, match=f"^{re.escape(expected)}$"):
        ledger.run(partial(leases.keepalive, lease_id=granted.id, ttl_s=None, actor="test"))
    assert session(ledger, opened.id).expires_at == granted.expires_at


def test_an_unknown_session_is_refused_by_name(ledger: Ledger) -> None:
    """What the caller sent, quoted; a string too long to be an id cut at 64 characters."""
    absent = open_(ledger).id[:-4] + "0000"
    long = "s" * 100
    for session_id, said in (("nope", "'nope'"), (long, repr("s" * 64)), (absent, repr(absent))):
        for call in (partial(sessions.keepalive, actor="t"), partial(sessions.close, actor="t")):
            with pytest.raises(errors.UnknownSession) as refused:
                ledger.run(partial(call, session_id=session_id))
            assert str(refused.value) == f"no session {said}"
        with pytest.raises(errors.UnknownSession) as refused:
            session(ledger, session_id)
        assert str(refused.value) == f"no session {said}"
