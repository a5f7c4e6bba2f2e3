"""api.hotpath on a real daemon with tokens (both databases): the four hot routes are answered
without FastAPI's router, everything else reaches FastAPI with its body as sent, and every
answer (a lease, a refusal of any kind) is the one FastAPI itself gives for the same request.

The comparison sends each request twice: to the daemon over HTTP (the hot path, as served) and
to an app built around the same daemon without it (`hot_routes=False`, FastAPI alone)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from api.app import create_app
from api.hotpath import HotRoutes
from api.metrics import Metrics
from poold.types import MiB
from tests.api.admin_served import Served

# Fields of a lease that differ between two grants of the same request.
VOLATILE = {"id", "offset", "generation", "granted_at", "expires_at", "ended_at", "map_path",
            "map_offset", "token", "used_at", "chardev"}


@pytest.fixture
def plain(served: Served) -> Iterator[TestClient]:
    """FastAPI alone, around the served daemon's ledger, auth, backing and metrics."""
    app = create_app(served.daemon.ledger, hot_routes=False)
    app.state._state.update(served.daemon.app.state._state)
    with TestClient(app, base_url=served.url, raise_server_exceptions=False) as client:
        yield client


def answers(served: Served, plain: TestClient, method: str, path: str,
            client: httpx.Client | None = None, **kwargs: Any
            ) -> tuple[httpx.Response, httpx.Response]:
    client = client or served.admin
    hot = client.request(method, path, **kwargs)
    headers = {**client.headers, **kwargs.pop("headers", {})}
    fastapi = plain.request(method, path, headers=headers, **kwargs)
    return hot, fastapi


def same_refusal(served: Served, plain: TestClient, status: int, method: str, path: str,
                 client: httpx.Client | None = None, **kwargs: Any) -> dict[str, Any]:
    hot, fastapi = answers(served, plain, method, path, client, **kwargs)
    assert (hot.status_code, hot.json()) == (fastapi.status_code, fastapi.json())
    assert hot.status_code == status, hot.text
    found: dict[str, Any] = hot.json()
    return found


def steady(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in VOLATILE}


def test_a_granted_renewed_and_released_lease_reads_as_fastapi_answers_it(
        served: Served, plain: TestClient) -> None:
    body = {"size": 3 * MiB, "ttl_s": 60, "labels": {"engine": "x"}}
    hot, fastapi = answers(served, plain, "POST", "/v1/leases", json=body)
    assert hot.status_code == fastapi.status_code == 201, (hot.text, fastapi.text)
    assert steady(hot.json()) == steady(fastapi.json())
    assert hot.json().keys() == fastapi.json().keys()
    for lease in (hot.json(), fastapi.json()):
        renewed = answers(served, plain, "POST", f"/v1/leases/{lease['id']}/keepalive",
                          json={"ttl_s": 30})
        assert [r.status_code for r in renewed] == [200, 200]
        assert steady(renewed[0].json()) == steady(renewed[1].json())
        bare = answers(served, plain, "POST", f"/v1/leases/{lease['id']}/keepalive")
        assert [r.status_code for r in bare] == [200, 200]
        # Released by one, then again by the other: idempotent, the same ended lease.
        first, again = answers(served, plain, "DELETE", f"/v1/leases/{lease['id']}")
        assert (first.status_code, again.status_code) == (200, 200)
        assert steady(first.json()) == steady(again.json())
        assert first.json()["state"] == "released"


@pytest.mark.parametrize(("status", "content", "headers"), [
    (422, b'{"size": ', {"content-type": "application/json"}),               # not JSON
    (422, b'{"size": 2097152}', {}),                                         # no content type
    (422, b'{"size": 2097152}', {"content-type": "text/plain"}),
    (422, b'{"size": 2097152, "bogus": 1}', {"content-type": "application/json"}),
    (422, b'{"size": "2097152"}', {"content-type": "application/json"}),    # strict int
    (422, b"", {"content-type": "application/json"}),                        # no body
    (422, b"null", {"content-type": "application/json"}),
    (422, b"[]", {"content-type": "application/json"}),
    (400, b"\xff\xfe\xfd", {"content-type": "application/json"}),           # not text
    (422, b'{"size": 1099511627776}', {"content-type": "application/json"}),  # LeaseTooLarge
    (404, b'{"size": 2097152, "pool": "nowhere"}', {"content-type": "application/json"}),
])
def test_a_refused_grant_is_refused_as_fastapi_refuses_it(
        served: Served, plain: TestClient, status: int, content: bytes,
        headers: dict[str, str]) -> None:
    before = served.rows()
    same_refusal(served, plain, status, "POST", "/v1/leases", content=content, headers=headers)
    assert served.rows() == before


def test_refused_keepalives_releases_and_strangers_match_fastapi(
        served: Served, plain: TestClient) -> None:
    alice, bob = served.tenant("alice"), served.tenant("bob")
    lease = alice.post("/v1/leases", json={"size": 2 * MiB}).json()
    session = alice.post("/v1/sessions", json={"ttl_s": 30}).json()
    unknown = "0" * 32
    before = served.rows()
    refused: list[tuple[str, str, dict[str, Any], int]] = [
        ("POST", f"/v1/leases/{lease['id']}/keepalive", {"json": {"ttl_s": 0}}, 422),
        ("POST", f"/v1/leases/{lease['id']}/keepalive", {"json": {"ttl": 5}}, 422),
        ("POST", f"/v1/leases/{unknown}/keepalive", {}, 404),
        ("DELETE", f"/v1/leases/{unknown}", {}, 404),
        ("DELETE", "/v1/leases/not-a-lease", {}, 404),
        ("DELETE", f"/v1/leases/{'a' * 65}", {}, 422),
        ("POST", f"/v1/sessions/{session['id']}/keepalive", {"json": {"idle_s": {"x": 1}}},
         422),
        ("POST", f"/v1/sessions/{unknown}/keepalive", {}, 404),
    ]
    for method, path, kwargs, status in refused:
        same_refusal(served, plain, status, method, path, alice, **kwargs)
    # Another tenant's lease and session do not exist for bob, on either path.
    for method, path in [("DELETE", f"/v1/leases/{lease['id']}"),
                         ("POST", f"/v1/leases/{lease['id']}/keepalive"),
                         ("POST", f"/v1/sessions/{session['id']}/keepalive")]:
        refusal = same_refusal(served, plain, 404, method, path, bob)
        assert refusal["error"] in {"UnknownLease", "UnknownSession"}
    # No credential, a wrong one: refused before anything is read.
    for headers in ({}, {"Authorization": "Bearer pd_nope"}):
        anonymous = httpx.Client(base_url=served.url, headers=headers)
        same_refusal(served, plain, 401, "POST", "/v1/leases", anonymous,
                     json={"size": 2 * MiB})
        same_refusal(served, plain, 401, "DELETE", f"/v1/leases/{lease['id']}", anonymous)
    assert served.rows() == before
    renewed = answers(served, plain, "POST", f"/v1/sessions/{session['id']}/keepalive", alice,
                      json={"idle_s": {lease["id"]: 1.5}})
    assert [r.status_code for r in renewed] == [200, 200]
    assert steady(renewed[0].json()) == steady(renewed[1].json())


class _Behind:
    """What HotRoutes hands on: the requests that reached it, each with the body it read."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append((scope["method"], scope["path"], body))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _call(app: FastAPI, behind: _Behind, method: str, path: str, body: bytes = b"",
          content_type: bytes = b"application/json") -> int:
    """One request through HotRoutes(behind), as the daemon's app would pass it on."""
    scope: Scope = {"type": "http", "method": method, "path": path, "root_path": "",
                    "query_string": b"", "app": app,
                    "headers": [(b"content-type", content_type),
                                (b"authorization", app.state.test_bearer)]}
    chunks = [body[:3], body[3:]]
    sent: list[Message] = []

    async def receive() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(HotRoutes(behind)(scope, receive, send))
    return int(sent[0]["status"])


def test_the_hot_routes_skip_fastapi_and_the_rest_reach_it_with_their_body(
        served: Served) -> None:
    app = served.daemon.app
    app.state.test_bearer = served.admin.headers["Authorization"].encode()
    behind = _Behind()
    grant = b'{"size": 2097152, "ttl_s": 60}'
    assert _call(app, behind, "POST", "/v1/leases", grant) == 201
    lease = served.admin.get("/v1/leases").json()[0]["id"]
    session = served.admin.post("/v1/sessions", json={"ttl_s": 30}).json()["id"]
    assert _call(app, behind, "POST", f"/v1/leases/{lease}/keepalive", b'{"ttl_s": 9}') == 200
    assert _call(app, behind, "POST", f"/v1/leases/{lease}/keepalive") == 200
    assert _call(app, behind, "POST", f"/v1/sessions/{session}/keepalive") == 200
    assert _call(app, behind, "DELETE", f"/v1/leases/{lease}") == 200
    assert _call(app, behind, "DELETE", f"/v1/leases/{'0' * 32}") == 404  # answered, refused
    assert _call(app, behind, "POST", "/v1/leases", grant,
                 b"application/json; charset=utf-8") == 201
    assert behind.seen == []
    handed_on = [
        ("POST", "/v1/leases", b'{"size": 2097152, "bogus": 1}', b"application/json"),
        ("POST", "/v1/leases", b'{"size": ', b"application/json"),
        ("POST", "/v1/leases", grant, b"text/plain"),
        ("POST", "/v1/leases", b"", b"application/json"),
        ("GET", "/v1/leases", b"", b"application/json"),
        ("DELETE", "/v1/leases/not-a-lease", b"", b"application/json"),
        ("DELETE", f"/v1/sessions/{session}", b"", b"application/json"),
        ("POST", "/v1/sessions", b'{"ttl_s": 30}', b"application/json"),
        ("POST", f"/v1/leases/{lease}/keepalive/", b"", b"application/json"),
        ("GET", "/healthz", b"", b"application/json"),
    ]
    for method, path, body, content_type in handed_on:
        assert _call(app, behind, method, path, body, content_type) == 299
    assert behind.seen == [(method, path, body) for method, path, body, _ in handed_on]


def _counts(metrics: Metrics) -> dict[tuple[str, ...], float]:
    """The edge's lease-operation counts and latency observations, by labels."""
    found: dict[tuple[str, ...], float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name in {"poold_lease_operations_total",
                               "poold_lease_operation_duration_seconds_count",
                               "poold_ledger_errors_total"} and sample.value:
                found[(sample.name, *sample.labels.values())] = sample.value
    return found


def test_the_edge_metrics_count_each_hot_answer_once_as_fastapi_s_path_counts_it(
        served: Served) -> None:
    own = Metrics()
    app = create_app(served.daemon.ledger, hot_routes=False, metrics=own)
    state = dict(served.daemon.app.state._state)
    state.pop("metrics")
    app.state._state.update(state)
    before = _counts(served.daemon.metrics)
    assert not any(key[0] == "poold_lease_operations_total" for key in before)

    def sequence(client: httpx.Client | TestClient) -> None:
        lease = client.post("/v1/leases", json={"size": 2 * MiB}).json()["id"]
        assert client.post(f"/v1/leases/{lease}/keepalive", json={"ttl_s": 9}).status_code == 200
        assert client.delete(f"/v1/leases/{lease}").status_code == 200
        assert client.delete(f"/v1/leases/{'0' * 32}").status_code == 404
        assert client.post("/v1/leases", json={"size": 2 * MiB, "pool": "x"}).status_code == 404
        assert client.post("/v1/leases", json={"size": -1}).status_code == 422  # handed on
        session = client.post("/v1/sessions", json={"ttl_s": 30}).json()["id"]
        assert client.post(f"/v1/sessions/{session}/keepalive").status_code == 200

    sequence(served.admin)
    with TestClient(app, base_url=served.url, headers=dict(served.admin.headers)) as plain:
        sequence(plain)
    hot = _counts(served.daemon.metrics)
    assert hot == _counts(own)
    assert hot[("poold_lease_operations_total", "grant", "ok")] == 1
    assert hot[("poold_lease_operations_total", "grant", "UnknownPool")] == 1
    assert hot[("poold_lease_operations_total", "grant", "ValidationError")] == 1
    assert hot[("poold_lease_operations_total", "release", "UnknownLease")] == 1
    assert hot[("poold_lease_operation_duration_seconds_count", "grant")] == 3


def test_a_hot_route_body_over_the_limit_is_refused_as_the_stack_refuses_it(
        served: Served) -> None:
    before = served.rows()
    limit = served.daemon.settings.max_body_bytes
    big = b'{"size": 2097152, "labels": {"x": "' + b"y" * limit + b'"}}'
    declared = served.admin.post("/v1/leases", content=big,
                                 headers={"content-type": "application/json"})
    streamed = served.admin.post("/v1/leases", content=iter([big[:100], big[100:]]),
                                 headers={"content-type": "application/json"})
    for answer in (declared, streamed):
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"] == "PayloadTooLarge"
    assert served.rows() == before


def test_a_streamed_body_past_the_limit_is_handed_on_whole() -> None:
    behind = _Behind()
    hot = HotRoutes(behind, max_body_bytes=8)
    scope: Scope = {"type": "http", "method": "POST", "path": "/v1/leases", "root_path": "",
                    "query_string": b"", "headers": [(b"content-type", b"application/json")]}
    chunks = [b'{"size": ', b"2097152", b"}"]
    sent: list[Message] = []

    async def receive() -> Message:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(hot(scope, receive, send))
    assert behind.seen == [("POST", "/v1/leases", b'{"size": 2097152}')]
    assert sent[0]["status"] == 299


def test_an_endpoint_crash_is_answered_as_starlette_answers_it_and_the_daemon_serves_on(
        served: Served, plain: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path is the app's outermost layer: a crash inside a hot endpoint still gets the
    server-error handler's answer, is counted, and leaves the daemon serving."""
    from api.routers import leases as lease_routes

    def crash(*_: object) -> str:
        raise RuntimeError("boom")

    before = served.rows()
    monkeypatch.setattr(lease_routes, "acting_tenant", crash)  # inside both apps' grant_lease
    hot, fastapi = answers(served, plain, "POST", "/v1/leases", json={"size": 2 * MiB})
    monkeypatch.undo()
    assert (hot.status_code, hot.text) == (fastapi.status_code, fastapi.text)
    assert (hot.status_code, hot.json()["error"]) == (500, "InternalError")
    assert hot.headers["content-type"] == fastapi.headers["content-type"]
    assert served.rows() == before
    counted = _counts(served.daemon.metrics)
    assert counted[("poold_lease_operations_total", "grant", "InternalError")] == 1
    assert served.admin.post("/v1/leases", json={"size": 2 * MiB}).status_code == 201
