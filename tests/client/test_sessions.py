"""The SDK's sessions against a real daemon: one keepalive for many leases, leases the ledger
ended reported lost from the keepalive's answer, a lost session losing them all, closing it
releasing them all."""

from __future__ import annotations

import threading

import httpx
import pytest

import poold.client
from poold import errors
from poold.client import PooldClient, Session
from poold.types import MiB
from tests.client.conftest import REAP_INTERVAL_S
from tests.timing import patience, until

# Sessions that must stay alive through a test have a TTL of 6 s: renewed every 2 s, a loaded
# machine (a CI run, mutation testing beside it) may hold one keepalive back by seconds without
# the session expiring under the test. (A TTL of 2 s has expired so, once.)


def keepalives(client: PooldClient, kind: str, **filters: str) -> int:
    return len(client.events(kind=kind, **filters))


def test_one_keepalive_renews_every_lease_past_their_ttl(client: PooldClient) -> None:
    ttl = 6
    with client.session(ttl_s=ttl, labels={"engine": "test"}) as session:
        leases = [session.lease(2 * MiB) for _ in range(4)]
        # One thread renews them all, named for the session; none per lease.
        names = [t.name for t in threading.enumerate()]
        assert names.count(f"poold-session-{session.id[:8]}") == 1
        assert not {f"poold-keepalive-{lease.id[:8]}" for lease in leases} & set(names)
        assert {lease.info.session_id for lease in leases} == {session.id}
        until("three session renewals",
              lambda: len(client.events(kind="session.renewed")) >= 3, patience(3 * ttl))
        for lease in leases:
            lease.check()
            assert client.get_lease(lease.id).state == "active"
        # The leases were renewed by the session alone: not one lease keepalive was sent.
        assert client.events(kind="lease.renewed") == []
        renewed = client.events(kind="session.renewed")
        assert all(e.details["leases"] == 4 for e in renewed), renewed
    assert client.pools()[0].leased_bytes == 0
    assert client.get_session(session.id).state == "closed"
    assert {client.get_lease(lease.id).state for lease in leases} <= {"released", "scrubbing"}


def test_a_lease_the_ledger_ended_is_lost_at_the_next_keepalive(client: PooldClient) -> None:
    ttl = 6
    with client.session(ttl_s=ttl) as session:
        kept, revoked = session.lease(2 * MiB), session.lease(2 * MiB)
        client.raw("POST", f"/v1/leases/{revoked.id}/revoke")
        until("the session's keepalive hears of it", lambda: revoked.lost, patience(ttl))
        with pytest.raises(errors.LeaseLost, match="revoked in the ledger: not renewed by"):
            revoked.check()
        with pytest.raises(errors.LeaseLost):
            revoked.map()
        kept.check()
        session.check()
        assert client.get_lease(kept.id).state == "active"


def test_a_lost_lease_whose_ending_cannot_be_read_says_what_the_reading_met(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reason a lease was lost comes from one more read of it; when that read fails too
    (the daemon restarting, the lease pruned), the reason names what the read met."""
    ttl = 6
    with client.session(ttl_s=ttl) as session:
        revoked = session.lease(2 * MiB)

        def unreadable(lease_id: str) -> object:
            raise errors.TransportError(f"GET /v1/leases/{lease_id}: connection refused")

        monkeypatch.setattr(client, "get_lease", unreadable)
        client.raw("POST", f"/v1/leases/{revoked.id}/revoke")
        until("the session's keepalive hears of it", lambda: revoked.lost, patience(ttl))
        with pytest.raises(errors.LeaseLost,
                           match=r"ended in the ledger \(TransportError\): not renewed by"):
            revoked.check()


def test_a_lease_released_by_its_holder_is_forgotten_not_lost(client: PooldClient) -> None:
    ttl = 6
    with client.session(ttl_s=ttl) as session:
        with session.lease(2 * MiB) as first:
            pass
        second = session.lease(2 * MiB)
        assert session.leases == [second]
        start = keepalives(client, "session.renewed")
        until("two renewals", lambda: keepalives(client, "session.renewed") >= start + 2,
              patience(2 * ttl))
        assert not first.lost and not second.lost
        assert client.get_lease(first.id).state in ("released", "scrubbing")


def test_a_revoked_session_loses_every_lease(client: PooldClient) -> None:
    ttl = 6
    session = client.session(ttl_s=ttl)
    leases = [session.lease(2 * MiB) for _ in range(2)]
    client.raw("POST", f"/v1/sessions/{session.id}/revoke")
    until("the session is lost", lambda: session.lost, patience(ttl))
    with pytest.raises(errors.LeaseLost, match="SessionNotActive"):
        session.check()
    for lease in leases:
        with pytest.raises(errors.LeaseLost, match="session lost"):
            lease.check()
    with pytest.raises(errors.LeaseLost):
        session.lease(2 * MiB)  # a lost session grants nothing more
    session.close()  # idempotent, and asks the daemon nothing more
    assert {client.get_lease(lease.id).state for lease in leases} <= {"revoked", "scrubbing"}


def test_a_session_without_keepalive_expires_with_its_leases(client: PooldClient) -> None:
    ttl = 1
    session = client.session(ttl_s=ttl, keepalive=False)
    lease = session.lease(2 * MiB)
    until("the reaper expires the session", lambda: client.events(
        kind="session.expired"), patience(ttl, REAP_INTERVAL_S))
    assert client.get_lease(lease.id).state in ("expired", "scrubbing")
    assert client.get_session(session.id).state == "expired"


class RefusedSessionKeepalives(httpx.BaseTransport):
    """The seam between SDK and daemon: the next `count` session keepalives are refused as if
    the daemon were down; everything else reaches the real daemon."""

    def __init__(self, count: int) -> None:
        self._real = httpx.HTTPTransport()
        self.left = count

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/sessions/") and \
                request.url.path.endswith("/keepalive") and self.left > 0:
            self.left -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return self._real.handle_request(request)


def test_a_passing_outage_loses_no_lease_of_the_session(url: str) -> None:
    ttl = 6  # a period (2 s) and two retries 0.5 s apart still leave 2.5 s before expiry
    transport = RefusedSessionKeepalives(count=3)
    with PooldClient(url, transport=transport) as client, client.session(ttl_s=ttl) as session:
        lease = session.lease(2 * MiB)
        opened = session.info.expires_at
        until("a renewal after the outage",
              lambda: session.lost or session.info.expires_at > opened, patience(ttl))
        assert transport.left == 0
        session.check()
        lease.check()
        assert client.get_lease(lease.id).expires_at == session.info.expires_at


def test_a_lease_granted_during_a_keepalive_is_not_taken_for_lost(url: str) -> None:
    """The keepalive's answer names the leases live when it was made: one granted while it was
    on its way is absent from it, and must not be marked lost for that."""

    class GrantDuringKeepalive(httpx.BaseTransport):
        def __init__(self) -> None:
            self._real = httpx.HTTPTransport()
            self.session: Session | None = None
            self.granted: list[str] = []

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            answer = self._real.handle_request(request)
            if request.url.path.endswith("/keepalive") and self.session is not None \
                    and not self.granted:
                answer.read()  # the answer is made; now a lease is granted before it lands
                self.granted.append(self.session.lease(2 * MiB).id)
            return answer

    transport = GrantDuringKeepalive()
    ttl = 6
    with PooldClient(url, transport=transport) as client, client.session(ttl_s=ttl) as session:
        transport.session = session
        until("a lease granted during a keepalive", lambda: transport.granted, patience(ttl))
        (late,) = [lease for lease in session.leases if lease.id in transport.granted]
        start = keepalives(client, "session.renewed")
        until("the next renewal", lambda: keepalives(client, "session.renewed") > start,
              patience(ttl))
        late.check()


def test_an_elastic_lease_needs_someone_to_give_it_back(client: PooldClient) -> None:
    with client.session() as session, pytest.raises(errors.ClientError, match="on_reclaim"):
        session.lease(2 * MiB, elastic=True)
    assert client.leases(state="active") == []


def test_on_reclaim_hears_the_coldest_lease_asked_and_giving_it_back_makes_room(
        url: str) -> None:
    asked: list[list[str]] = []
    leases: dict[str, poold.client.Lease] = {}

    def give_back(asks: list[poold.client.ReclaimAsk]) -> None:
        asked.append([ask.lease for ask in asks])
        for ask in asks:
            leases[ask.lease].release()

    idle: dict[str, float] = {}
    ttl = 6  # the session outlives the waiting grant on a loaded machine (see below)
    with PooldClient(url) as holder, PooldClient(url) as other, \
            holder.session(ttl_s=ttl, on_reclaim=give_back, idle_s=lambda: idle) as session:
        for _ in range(4):  # the whole 64 MiB device
            lease = session.lease(16 * MiB, elastic=True)
            leases[lease.id] = lease
        coldest = list(leases)[2]
        idle.update({lease_id: 0.0 for lease_id in leases} | {coldest: 120.0})
        start = keepalives(holder, "session.renewed")
        until("the holder reported its use",
              lambda: keepalives(holder, "session.renewed") > start, patience(ttl))
        granted = other.grant(16 * MiB, wait_s=30)
        assert asked == [[coldest]]
        assert granted.length == 16 * MiB
        assert holder.get_lease(coldest).state == "released"
        assert not any(lease.lost for lease in session.leases)
        assert len(session.leases) == 3
        other.release(granted.id)


def test_a_failing_on_reclaim_stops_neither_renewals_nor_the_feed(url: str) -> None:
    """The holder's handler raises at every ask: the session keeps renewing, the daemon
    revokes what was not given back by the deadline, and the next ask still reaches it."""
    calls: list[list[str]] = []

    def broken(asks: list[poold.client.ReclaimAsk]) -> None:
        calls.append([ask.lease for ask in asks])
        raise RuntimeError("the holder's bug")

    # The session must outlive two reclaim graces (5 s each) on a loaded machine: a keepalive
    # period of 2 s and 6 s before expiry, so one late renewal does not end it.
    ttl = 6
    with PooldClient(url) as holder, PooldClient(url) as other, \
            holder.session(ttl_s=ttl, on_reclaim=broken) as session:
        held = {session.lease(16 * MiB, elastic=True).id: None for _ in range(4)}  # all 64 MiB
        first = other.grant(16 * MiB, wait_s=30)  # served once the asked lease is revoked
        second = other.grant(16 * MiB, wait_s=30)  # asks again: the handler hears it again
        # Heard through the long poll or the next keepalive's answer, which on a loaded
        # machine may come after the grant it made room for was answered.
        until("the second ask reaches the handler", lambda: len(calls) >= 2, patience(ttl))
        assert len(calls) == 2 and all(len(c) == 1 and c[0] in held for c in calls)
        assert calls[0] != calls[1]
        lost = [lease for lease in session.leases if lease.id in (calls[0][0], calls[1][0])]
        until("the revoked leases are lost", lambda: all(lease.lost for lease in lost),
              patience(ttl))
        session.check()  # renewals went on
        for granted in (first, second):
            other.release(granted.id)
