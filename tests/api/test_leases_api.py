"""The REST API on a real ledger (both databases): shapes, status codes, and that no input a
client can send produces a 500."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from poold.ledger.clock import ManualClock
from poold.ledger.ledger import Ledger
from poold.types import MiB

LEASE_KEYS = {"id", "pool", "device", "chardev", "offset", "length", "align", "generation",
              "ttl_s", "expires_at", "state"}


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    with TestClient(create_app(ledger), raise_server_exceptions=False) as test_client:
        yield test_client


def test_grant_get_keepalive_release(client: TestClient, clock: ManualClock) -> None:
    r = client.post("/v1/leases", json={"size": 3 * MiB, "ttl_s": 30, "labels": {"a": "b"}})
    assert r.status_code == 201, r.text
    lease = r.json()
    assert lease.keys() >= LEASE_KEYS
    assert lease["length"] == 4 * MiB and lease["state"] == "active"
    assert client.get(f"/v1/leases/{lease['id']}").json()["id"] == lease["id"]
    clock.advance(20)
    renewed = client.post(f"/v1/leases/{lease['id']}/keepalive").json()
    assert renewed["expires_at"] > lease["expires_at"]
    assert client.get("/v1/pools").json()[0]["leased_bytes"] == 4 * MiB
    for _ in range(2):  # idempotent
        r = client.delete(f"/v1/leases/{lease['id']}")
        assert r.status_code == 200 and r.json()["state"] == "released"
    assert client.get("/v1/pools").json()[0]["leased_bytes"] == 0
    kinds = [e["kind"] for e in client.get("/v1/events", params={"lease_id": lease["id"]}).json()]
    assert kinds == ["lease.released", "lease.renewed", "lease.granted"]


def test_lease_answers_say_they_are_json(client: TestClient) -> None:
    """The lease routes write their JSON bytes themselves: the header is theirs to set (an
    SDK or a proxy that goes by it would otherwise take the body for something else)."""
    granted = client.post("/v1/leases", json={"size": MiB})
    lease_id = granted.json()["id"]
    answers = [granted, client.get(f"/v1/leases/{lease_id}"), client.get("/v1/leases"),
               client.post(f"/v1/leases/{lease_id}/keepalive"),
               client.delete(f"/v1/leases/{lease_id}")]
    assert [(r.status_code, r.headers["content-type"]) for r in answers] == [
        (201, "application/json"), *[(200, "application/json")] * 4]


def test_lists_and_filters(client: TestClient) -> None:
    a = client.post("/v1/leases", json={"size": MiB}).json()
    b = client.post("/v1/leases", json={"size": MiB}).json()
    client.delete(f"/v1/leases/{b['id']}")
    assert [x["id"] for x in client.get("/v1/leases", params={"state": "active"}).json()] == \
        [a["id"]]
    assert len(client.get("/v1/leases").json()) == 2
    (device,) = client.get("/v1/devices").json()
    assert device["leased_bytes"] == 2 * MiB and device["devname"] == "emu0"
    assert client.get("/healthz").json()["status"] == "ok"
    assert "/v1/leases" in client.get("/openapi.json").json()["paths"]


def test_expired_lease_reads_expired_and_cannot_be_renewed(client: TestClient,
                                                           clock: ManualClock) -> None:
    lease = client.post("/v1/leases", json={"size": MiB, "ttl_s": 5}).json()
    clock.advance(5)
    assert client.get(f"/v1/leases/{lease['id']}").json()["state"] == "expired"
    r = client.post(f"/v1/leases/{lease['id']}/keepalive")
    assert r.status_code == 410 and r.json()["error"] == "LeaseExpired"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"size": 0}, 422, "ValidationError"),
        ({"size": -1}, 422, "ValidationError"),
        ({"size": "64MiB"}, 422, "ValidationError"),
        ({"size": 1.5}, 422, "ValidationError"),
        ({"size": True}, 422, "ValidationError"),
        ({"size": None}, 422, "ValidationError"),
        ({}, 422, "ValidationError"),
        ({"size": 10**30}, 422, "ValidationError"),
        ({"size": 2**62}, 422, "LeaseTooLarge"),
        ({"size": 65 * MiB}, 422, "LeaseTooLarge"),
        ({"size": MiB, "pool": "nope"}, 404, "UnknownPool"),
        ({"size": MiB, "ttl_s": 0}, 422, "ValidationError"),
        ({"size": MiB, "ttl_s": 10**7}, 422, "InvalidRequest"),
        ({"size": MiB, "surprise": 1}, 422, "ValidationError"),
        ({"size": MiB, "labels": {"k": 5}}, 422, "ValidationError"),
        ([1, 2], 422, "ValidationError"),
    ],
)
def test_bad_grants_get_clear_4xx(client: TestClient, body: object, status: int,
                                  error: str) -> None:
    r = client.post("/v1/leases", json=body)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert r.json()["detail"]
    assert client.get("/v1/leases").json() == []


def test_non_json_bodies_are_refused_with_a_hint(client: TestClient) -> None:
    r = client.post("/v1/leases", content=b"size=5",
                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 422 and "application/json" in r.json()["detail"]
    r = client.post("/v1/leases", content=b"{not json",
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == "ValidationError"


def test_no_capacity_is_507(client: TestClient) -> None:
    assert client.post("/v1/leases", json={"size": 64 * MiB}).status_code == 201
    r = client.post("/v1/leases", json={"size": MiB})
    assert (r.status_code, r.json()["error"]) == (507, "NoCapacity")


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("GET", "/v1/leases/nope", 404, "UnknownLease"),
        ("DELETE", "/v1/leases/nope", 404, "UnknownLease"),
        ("POST", "/v1/leases/nope/keepalive", 404, "UnknownLease"),
        ("GET", "/v1/leases/" + "x" * 65, 422, "ValidationError"),
        ("GET", "/v1/nothing", 404, "NotFound"),
        ("PUT", "/v1/leases", 405, "MethodNotAllowed"),
        ("GET", "/v1/leases?state=bogus", 422, "ValidationError"),
        ("GET", "/v1/leases?pool=nope", 404, "UnknownPool"),
        ("GET", "/v1/events?limit=-1", 422, "ValidationError"),
    ],
)
def test_unknown_and_malformed_paths(client: TestClient, method: str, path: str, status: int,
                                     error: str) -> None:
    r = client.request(method, path)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    if error == "UnknownLease":  # the id as the caller sent it
        assert r.json()["detail"] == "no lease 'nope'"


def test_keepalive_with_bad_ttl(client: TestClient) -> None:
    lease = client.post("/v1/leases", json={"size": MiB}).json()
    r = client.post(f"/v1/leases/{lease['id']}/keepalive", json={"ttl_s": "soon"})
    assert r.status_code == 422
    r = client.post(f"/v1/leases/{lease['id']}/keepalive", json={"ttl_s": 10**7})
    assert (r.status_code, r.json()["error"]) == (422, "InvalidRequest")


def test_device_extents_draw_the_memory_map(client: TestClient) -> None:
    a = client.post("/v1/leases", json={"size": 4 * MiB}).json()
    client.post("/v1/leases", json={"size": 2 * MiB})
    (device,) = client.get("/v1/devices").json()
    extents = client.get(f"/v1/devices/{device['id']}/extents").json()
    assert extents["device"]["id"] == device["id"]
    assert [(c["offset"], c["length"]) for c in extents["claims"]] == [(0, 64 * MiB)]
    assert sorted((x["offset"], x["length"]) for x in extents["leases"]) == \
        [(0, 4 * MiB), (4 * MiB, 2 * MiB)]
    client.delete(f"/v1/leases/{a['id']}")
    assert len(client.get(f"/v1/devices/{device['id']}/extents").json()["leases"]) == 1
    r = client.get("/v1/devices/999/extents")
    assert (r.status_code, r.json()["error"]) == (404, "UnknownDevice")


def test_topology_endpoint_is_discover(client: TestClient) -> None:
    topology = client.get("/v1/topology").json()
    assert {"memdevs", "regions", "dax_regions", "dax_devices", "numa_nodes"} <= topology.keys()
