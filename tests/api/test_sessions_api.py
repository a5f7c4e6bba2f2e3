"""/v1/sessions on a real daemon with tokens (both databases): a tenant opens a session, grants
leases in it, renews them all with one keepalive and ends them by closing it; another tenant
can neither see nor touch it, nor grant into it; an admin revokes it."""

from __future__ import annotations

import httpx

from poold.types import MiB
from tests.api.admin_served import Served


def test_a_session_carries_its_leases(served: Served) -> None:
    alice = served.tenant("alice")
    opened = alice.post("/v1/sessions", json={"ttl_s": 30, "labels": {"engine": "x"}})
    assert opened.status_code == 201, opened.text
    session = opened.json()
    assert (session["state"], session["tenant"], session["leases"]) == ("active", "alice", [])
    granted = [alice.post("/v1/leases", json={"size": 2 * MiB, "session_id": session["id"]})
               .json() for _ in range(3)]
    assert {g["session_id"] for g in granted} == {session["id"]}
    assert {g["expires_at"] for g in granted} == {session["expires_at"]}
    renewed = alice.post(f"/v1/sessions/{session['id']}/keepalive")
    assert renewed.status_code == 200, renewed.text
    assert sorted(renewed.json()["leases"]) == sorted(g["id"] for g in granted)
    listed = alice.get("/v1/sessions").json()
    assert [s["id"] for s in listed] == [session["id"]]
    closed = alice.delete(f"/v1/sessions/{session['id']}")
    assert (closed.status_code, closed.json()["state"]) == (200, "closed")
    states = {alice.get(f"/v1/leases/{g['id']}").json()["state"] for g in granted}
    assert states == {"released"}
    served.refused(409, "SessionNotActive", "POST", "/v1/leases", alice,
                   json={"size": 2 * MiB, "session_id": session["id"]})
    served.refused(409, "SessionNotActive", "POST", f"/v1/sessions/{session['id']}/keepalive",
                   alice)


def test_another_tenants_session_is_unknown_to_it(served: Served) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    session = alice.post("/v1/sessions", json={"ttl_s": 30}).json()
    alice.post("/v1/leases", json={"size": 2 * MiB, "session_id": session["id"]})
    path = f"/v1/sessions/{session['id']}"
    for method, where, body in (("GET", path, None), ("POST", f"{path}/keepalive", None),
                                ("DELETE", path, None),
                                ("POST", "/v1/leases", {"size": 2 * MiB,
                                                        "session_id": session["id"]})):
        served.refused(404, "UnknownSession", method, where, bob, json=body)
    assert bob.get("/v1/sessions", params={"tenant": "alice"}).json() == []
    assert served.refused(403, "Forbidden", "POST", "/v1/sessions", bob,
                          json={"tenant": "alice"}
                          ) == "tenant:bob may open sessions only for tenant 'bob'"
    served.refused(403, "Forbidden", "POST", f"{path}/revoke", alice)
    assert alice.get(path).json()["state"] == "active"


def test_an_admin_revokes_a_session_and_its_leases(served: Served) -> None:
    alice = served.tenant("alice")
    session = alice.post("/v1/sessions", json={"ttl_s": 30}).json()
    lease = alice.post("/v1/leases", json={"size": 2 * MiB, "session_id": session["id"]}).json()
    revoked = served.admin.post(f"/v1/sessions/{session['id']}/revoke")
    assert (revoked.status_code, revoked.json()["state"]) == (200, "revoked")
    assert alice.get(f"/v1/leases/{lease['id']}").json()["state"] == "revoked"
    served.refused(409, "LeaseNotActive", "POST", f"/v1/leases/{lease['id']}/keepalive", alice)


def test_bad_session_requests_get_clear_errors(served: Served) -> None:
    alice = served.tenant("alice")
    for body in ({"ttl_s": 0}, {"ttl_s": "30"}, {"ttl_s": 86_401}, {"what": 1}):
        served.refused(422, "ValidationError", "POST", "/v1/sessions", alice, json=body)
    served.refused(404, "UnknownSession", "GET", "/v1/sessions/nope", alice)
    served.refused(422, "ValidationError", "POST", "/v1/leases", alice,
                   json={"size": 2 * MiB, "session_id": "nope"})
    session = alice.post("/v1/sessions", json={"ttl_s": 30}).json()
    served.refused(422, "InvalidRequest", "POST", "/v1/leases", alice,
                   json={"size": 2 * MiB, "ttl_s": 60, "session_id": session["id"]})


def test_every_session_operation_needs_a_credential(served: Served) -> None:
    """A local user without a token (or with a wrong one) opens, reads, renews, closes and
    revokes nothing."""
    session = served.tenant("alice").post("/v1/sessions", json={"ttl_s": 30}).json()
    path = f"/v1/sessions/{session['id']}"
    for headers in ({}, {"Authorization": "Bearer nonsense"}):
        anonymous = httpx.Client(base_url=served.url, timeout=30, headers=headers)
        for method, where in (("POST", "/v1/sessions"), ("GET", "/v1/sessions"), ("GET", path),
                              ("POST", f"{path}/keepalive"), ("DELETE", path),
                              ("POST", f"{path}/revoke")):
            served.refused(401, "Unauthenticated", method, where, anonymous)
        anonymous.close()
    assert served.admin.get(path).json()["state"] == "active"
