"""Elastic leases and grants that wait for room, on a real daemon with tokens (both databases):
a full pool asks the holders of elastic leases, coldest first, on their session's feed; what
they give back goes to the waiting grants in order of arrival; what they keep past the deadline
is revoked; another tenant reads nothing of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.reclaim import CROSS_HOST_POLL_S
from poold.ledger import reclaims
from poold.types import MiB
from tests.api.admin_served import Served
from tests.daemon_fixtures import serving_daemon
from tests.timing import patience, until

# The holder's deadline where a test lets it pass (what it kept is revoked).
GRACE_S = 1.0
# Where the holder answers: it must hear the ask and give back before its deadline, however slow
# a loaded machine makes the daemon (under mutation testing's instrumentation, a feed's re-read
# after the ask came past a 1 s deadline: the lease was revoked, and the feed never saw an ask).
PATIENT_GRACE_S = 60.0
SIZE = 32 * MiB  # four of them fill the 128 MiB pool


def _serve(tmp_path: Path, ledger_url: str, grace_s: float) -> Iterator[Served]:
    with serving_daemon(tmp_path, auth="token", database_url=ledger_url,
                        emulate_size=128 * MiB, unscrubbed_pools=["default"],
                        reclaim_grace_s=grace_s) as (daemon, url):
        s = Served(daemon, url, tmp_path)
        try:
            yield s
        finally:
            s.admin.close()


@pytest.fixture
def served(tmp_path: Path, ledger_url: str) -> Iterator[Served]:
    yield from _serve(tmp_path, ledger_url, GRACE_S)


@pytest.fixture
def patient(tmp_path: Path, ledger_url: str) -> Iterator[Served]:
    """A daemon whose holders' deadlines do not pass during a test: for the tests where the
    holder gives back what it was asked."""
    yield from _serve(tmp_path, ledger_url, PATIENT_GRACE_S)


class Background:
    """A request sent from a thread of its own; its answer once it came."""

    def __init__(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> None:
        self.answer: httpx.Response | None = None
        self._thread = threading.Thread(target=self._send, args=(client, method, path),
                                        kwargs=kwargs, daemon=True)
        self._thread.start()

    def _send(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> None:
        self.answer = client.request(method, path, **kwargs)

    def result(self, timeout_s: float) -> httpx.Response:
        self._thread.join(timeout_s)
        assert self.answer is not None, "no answer in time"
        return self.answer


def metric(served: Served, name: str) -> float:
    """A sample of the daemon's /metrics by name (with its labels, if it has any)."""
    for line in served.admin.get("/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def fill_with_elastic(client: httpx.Client, count: int = 4, pool: str = "default"
                      ) -> tuple[str, list[str]]:
    session = client.post("/v1/sessions", json={"ttl_s": 60}).json()["id"]
    leases = []
    for _ in range(count):
        granted = client.post("/v1/leases", json={"size": SIZE, "session_id": session,
                                                   "elastic": True, "pool": pool})
        assert granted.status_code == 201 and granted.json()["elastic"], granted.text
        leases.append(granted.json()["id"])
    return session, leases


def test_a_waiting_grant_gets_what_an_elastic_holder_gives_back(patient: Served) -> None:
    alice, bob = patient.tenant("alice"), patient.tenant("bob")
    session, held = fill_with_elastic(alice)
    # Alice says which lease she used least recently: that one is asked first.
    alice.post(f"/v1/sessions/{session}/keepalive",
               json={"idle_s": {held[0]: 1.0, held[1]: 90.0, held[2]: 5.0, held[3]: 0.0}})
    feed = Background(alice, "GET", f"/v1/sessions/{session}/reclaims",
                      params={"wait_s": 30})
    started = time.monotonic()
    waiting = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "wait_s": 30})
    asks = feed.result(patience(GRACE_S)).json()
    assert [a["lease"] for a in asks] == [held[1]] and asks[0]["length"] == SIZE
    assert alice.get(f"/v1/leases/{held[1]}").json()["reclaim_by"] == asks[0]["by"]
    assert alice.get(f"/v1/sessions/{session}").json()["reclaim"] == asks
    released = alice.delete(f"/v1/leases/{held[1]}")
    assert released.status_code == 200
    granted = waiting.result(patience(GRACE_S))
    waited_at_most = time.monotonic() - started
    assert granted.status_code == 201, granted.text
    lease = granted.json()
    assert (lease["tenant"], lease["length"], lease["elastic"]) == ("bob", SIZE, False)
    # Nothing else of alice's was asked or taken; her given-back lease ended as released.
    assert alice.get(f"/v1/leases/{held[1]}").json()["state"] == "released"
    others = [alice.get(f"/v1/leases/{x}").json() for x in held if x != held[1]]
    assert {(x["state"], x["reclaim_by"]) for x in others} == {("active", None)}
    assert alice.post(f"/v1/sessions/{session}/keepalive").json()["reclaim"] == []
    assert metric(patient, "poold_reclaim_asked_bytes_total") == SIZE
    assert metric(patient, "poold_reclaim_given_bytes_total") == SIZE
    alice.delete(f"/v1/leases/{held[1]}")  # released again: counted once
    assert metric(patient, "poold_reclaim_given_bytes_total") == SIZE
    assert metric(patient, "poold_grant_wait_seconds_count") == 1
    # The wait it observed lies within the request as the test saw it.
    assert 0 < metric(patient, "poold_grant_wait_seconds_sum") <= waited_at_most


def test_a_waiting_grant_asks_the_holders_in_its_own_pool(patient: Served) -> None:
    """The pool's one device moved to pool "other" and filled there with elastic leases: a grant
    waiting in "other" asks their holder (not the default pool's, which holds nothing)."""
    patient.admin.post("/v1/pools", json={"name": "other", "scrub_on_release": False}
                      ).raise_for_status()
    (device,) = patient.admin.get("/v1/devices").json()
    patient.admin.post("/v1/pools/other/devices", json={"device_id": device["id"]}
                      ).raise_for_status()
    alice, bob = patient.tenant("alice"), patient.tenant("bob")
    session, held = fill_with_elastic(alice, pool="other")
    feed = Background(alice, "GET", f"/v1/sessions/{session}/reclaims", params={"wait_s": 30})
    waiting = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "pool": "other",
                                                          "wait_s": 30})
    (asked,) = [a["lease"] for a in feed.result(patience(GRACE_S)).json()]
    assert asked in held
    assert alice.delete(f"/v1/leases/{asked}").status_code == 200
    granted = waiting.result(patience(GRACE_S))
    assert (granted.status_code, granted.json()["pool"]) == (201, "other"), granted.text


def test_a_waiting_grant_never_asks_its_own_sessions_leases(served: Served) -> None:
    """Its holder is the one waiting: asking it would only make it give back to itself. With
    nobody else's elastic leases in the pool, the wait ends in vain and nobody was asked."""
    alice = served.tenant("alice")
    session, held = fill_with_elastic(alice)
    refused = alice.post("/v1/leases", json={"size": SIZE, "session_id": session,
                                             "wait_s": 1.0})
    assert (refused.status_code, refused.json()["error"]) == (507, "NoCapacity"), refused.text
    assert served.admin.get("/v1/events", params={"kind": "lease.reclaim_asked"}).json() == []
    assert {alice.get(f"/v1/leases/{x}").json()["reclaim_by"] for x in held} == {None}


def test_without_wait_a_full_pool_refuses_at_once_and_asks_nothing(served: Served) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    fill_with_elastic(alice)
    # The ledger's own refusal, not a wait of no time that found nothing.
    assert served.refused(507, "NoCapacity", "POST", "/v1/leases", bob, json={"size": SIZE}) == (
        f"no free extent of {SIZE} bytes in pool 'default' now")
    assert served.admin.get("/v1/events", params={"kind": "lease.reclaim_asked"}).json() == []


@pytest.mark.parametrize("wait_s", [0.5, 1.5])  # under a second waits too
def test_a_grant_waits_in_vain_when_nothing_comes_back(served: Served, wait_s: float) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    for _ in range(4):  # plain leases: nobody is asked
        assert alice.post("/v1/leases", json={"size": SIZE, "ttl_s": 600}).status_code == 201
    sent = time.monotonic()
    refused = bob.post("/v1/leases", json={"size": SIZE, "wait_s": wait_s})
    # Not before its wait is over (a loaded machine only makes the answer later).
    assert time.monotonic() - sent >= wait_s
    assert (refused.status_code, refused.json()["error"]) == (507, "NoCapacity"), refused.text
    assert refused.json()["detail"] == (
        f"no free extent of {SIZE} bytes in pool 'default' within {wait_s:g} s of waiting "
        "(elastic leases asked back, and leases ending, did not make room)")


def test_a_holder_closing_its_session_gives_back_what_was_asked(patient: Served) -> None:
    alice, bob = patient.tenant("alice"), patient.tenant("bob")
    session, held = fill_with_elastic(alice)
    feed = Background(alice, "GET", f"/v1/sessions/{session}/reclaims", params={"wait_s": 30})
    waiting = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "wait_s": 30})
    (asked,) = [a["lease"] for a in feed.result(patience(GRACE_S)).json()]
    assert alice.delete(f"/v1/sessions/{session}").json()["state"] == "closed"
    assert waiting.result(patience(GRACE_S)).status_code == 201
    assert {alice.get(f"/v1/leases/{x}").json()["state"] for x in held} == {"released"}
    # Only the asked lease counts as given back (the others were not asked), and only once.
    assert metric(patient, "poold_reclaim_given_bytes_total") == SIZE
    alice.delete(f"/v1/sessions/{session}")
    assert metric(patient, "poold_reclaim_given_bytes_total") == SIZE
    assert asked in held


def test_what_a_holder_keeps_past_the_deadline_is_revoked(served: Served) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    session, _held = fill_with_elastic(alice)
    granted = bob.post("/v1/leases", json={"size": SIZE, "wait_s": 30})  # alice never answers
    assert granted.status_code == 201, granted.text
    asked = served.admin.get("/v1/events", params={"kind": "lease.reclaim_asked"}).json()
    (taken,) = [e["lease_id"] for e in asked]
    revoked = served.admin.get("/v1/events", params={"kind": "lease.revoked"}).json()
    assert [(e["lease_id"], e["actor"]) for e in revoked] == [(taken, "reclaimer")]
    assert alice.get(f"/v1/leases/{taken}").json()["state"] == "revoked"
    # Alice's keepalive no longer renews it: her SDK marks it lost.
    assert taken not in alice.post(f"/v1/sessions/{session}/keepalive").json()["leases"]
    until("the reclaim is counted", lambda: 'poold_lease_reclaims_total{reason="elastic"} 1.0'
          in served.admin.get("/metrics").text, patience(1.0))
    assert metric(served, "poold_reclaim_given_bytes_total") == 0  # taken, not given


def test_waiting_grants_are_answered_in_order_of_arrival(served: Served) -> None:
    alice, bob, carol = (served.tenant(name) for name in ("alice", "bob", "carol"))
    for _ in range(4):
        assert alice.post("/v1/leases", json={"size": SIZE, "ttl_s": 600}).status_code == 201
    plain = [x["id"] for x in alice.get("/v1/leases").json()]
    grants = served.daemon.app.state.waiting_grants
    first = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "wait_s": 30})
    until("bob waits", lambda: grants.waiting() == 1, patience(0))
    # Carol names the default pool, bob did not: one pool, one queue.
    second = Background(carol, "POST", "/v1/leases",
                        json={"size": SIZE, "wait_s": 30, "pool": "default"})
    until("carol waits behind him", lambda: grants.waiting("default") == 2, patience(0))
    assert waiting_metric(served) == 2
    alice.delete(f"/v1/leases/{plain[0]}")
    answered = first.result(patience(0))
    assert answered.status_code == 201 and answered.json()["tenant"] == "bob"
    assert second.answer is None and grants.waiting() == 1
    alice.delete(f"/v1/leases/{plain[1]}")
    answered = second.result(patience(0))
    assert answered.status_code == 201 and answered.json()["tenant"] == "carol"
    assert grants.waiting() == 0 and waiting_metric(served) == 0


def test_a_grant_waiting_behind_another_is_refused_when_its_own_wait_is_over(
        served: Served) -> None:
    """Its wait ends in the queue, before its turn came: the same refusal as one that had its
    turn, and the queue counts it no longer."""
    alice, bob, carol = (served.tenant(name) for name in ("alice", "bob", "carol"))
    for _ in range(4):  # plain leases: nobody is asked, nothing comes back
        assert alice.post("/v1/leases", json={"size": SIZE, "ttl_s": 600}).status_code == 201
    grants = served.daemon.app.state.waiting_grants
    first = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "wait_s": 30})
    until("bob waits", lambda: grants.waiting() == 1, patience(0))
    refused = carol.post("/v1/leases", json={"size": SIZE, "wait_s": 0.5})
    assert (refused.status_code, refused.json()["error"]) == (507, "NoCapacity"), refused.text
    assert refused.json()["detail"] == (
        f"no free extent of {SIZE} bytes in pool 'default' within 0.5 s of waiting "
        "(elastic leases asked back, and leases ending, did not make room)")
    assert first.answer is None and grants.waiting() == 1 and waiting_metric(served) == 1
    (held, *_) = [x["id"] for x in alice.get("/v1/leases").json()]
    alice.delete(f"/v1/leases/{held}")
    assert first.result(patience(0)).status_code == 201
    assert grants.waiting() == 0


def waiting_metric(served: Served) -> float:
    return metric(served, 'poold_grants_waiting{pool="default"}')


def test_another_tenant_reads_nothing_of_a_sessions_reclaims(served: Served) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    session, _held = fill_with_elastic(alice, count=1)
    served.refused(404, "UnknownSession", "GET", f"/v1/sessions/{session}/reclaims", bob)
    served.refused(404, "UnknownSession", "POST", f"/v1/sessions/{session}/keepalive", bob,
                   json={"idle_s": {_held[0]: 0.0}})
    assert alice.get(f"/v1/sessions/{session}/reclaims").json() == []
    alice.delete(f"/v1/sessions/{session}")
    served.refused(409, "SessionNotActive", "GET", f"/v1/sessions/{session}/reclaims", alice)


def test_wait_s_and_elastic_are_checked(served: Served) -> None:
    alice = served.tenant("alice")
    for body in ({"size": SIZE, "wait_s": -1}, {"size": SIZE, "wait_s": 61},
                 {"size": SIZE, "wait_s": "5"}, {"size": SIZE, "elastic": "yes"}):
        served.refused(422, "ValidationError", "POST", "/v1/leases", alice, json=body)


def test_long_polls_past_a_principals_share_are_answered_at_once(patient: Served) -> None:
    """A client cannot hold the daemon's connections with polls: past MAX_LISTENING (one here)
    open at once, a principal's poll is answered at once, not after its wait_s."""
    patient.daemon.app.state.reclaim_feed.max_listening = 1
    alice = patient.tenant("alice")
    session, held = fill_with_elastic(alice)
    feed = f"/v1/sessions/{session}/reclaims"
    first = Background(alice, "GET", feed, params={"wait_s": 60})
    until("alice's first poll is open",
          lambda: patient.daemon.app.state.reclaim_feed._listening.get("tenant:alice"), patience(0))
    began = time.monotonic()
    assert alice.get(feed, params={"wait_s": 60}).json() == []
    assert time.monotonic() - began < 30  # answered, not held for its 60 s (half of it, at most)
    # Bob's grant, waiting for room, asks for alice's lease: her open poll hears of it.
    bob = patient.tenant("bob")
    waiting = Background(bob, "POST", "/v1/leases", json={"size": SIZE, "wait_s": 30})
    (asked,) = [a["lease"] for a in first.result(patience(0)).json()]
    assert asked in held
    alice.delete(f"/v1/leases/{asked}")
    assert waiting.result(patience(0)).status_code == 201


def test_a_long_poll_with_nothing_asked_answers_empty_after_its_wait(served: Served) -> None:
    alice = served.tenant("alice")
    session, _held = fill_with_elastic(alice)
    answer = alice.get(f"/v1/sessions/{session}/reclaims", params={"wait_s": 0.3},
                       timeout=patience(0.3))
    assert (answer.status_code, answer.json()) == (200, [])


def test_a_long_poll_hears_an_ask_another_daemon_made_within_its_poll_period(
        served: Served) -> None:
    """Another host's daemon asks through the ledger, not through this daemon's feed: an open
    poll reads the ledger again every CROSS_HOST_POLL_S rather than only at its wait_s."""
    alice = served.tenant("alice")
    session, held = fill_with_elastic(alice)
    poll = Background(alice, "GET", f"/v1/sessions/{session}/reclaims", params={"wait_s": 60})
    until("the poll is open",
          lambda: served.daemon.app.state.reclaim_feed._listening.get("tenant:alice"), patience(0))
    served.daemon.ledger.run(partial(reclaims.ask, pool_name=None, size=SIZE,
                                     actor="waiting-grant", grace_s=30.0))
    (asked,) = [a["lease"] for a in poll.result(patience(CROSS_HOST_POLL_S)).json()]
    assert asked in held
