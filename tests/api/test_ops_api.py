"""/readyz and /metrics on a real ledger (both databases): readiness follows the ledger and its
writer, and the metrics count what the edge answered and show the capacity the ledger holds."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from api.metrics import lease_operation
from poold.errors import LedgerUnavailable
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.types import MiB


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    with TestClient(create_app(ledger), raise_server_exceptions=False) as test_client:
        yield test_client


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics by (name, labels)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_readyz_when_the_ledger_answers(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_readyz_503_when_the_writer_stopped(client: TestClient, ledger: Ledger) -> None:
    ledger.writer.stop()
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json() == {"error": "LedgerUnavailable",
                        "detail": "the ledger writer is not running"}
    assert value(samples(client), "poold_ledger_errors_total", source="probe") == 1


def test_readyz_503_when_the_writer_is_wedged(client: TestClient, ledger: Ledger) -> None:
    patient = client.app.state.probe_timeout_s  # type: ignore[attr-defined]
    client.app.state.probe_timeout_s = 0.3  # type: ignore[attr-defined]
    release = threading.Event()

    def stuck(_tx: Tx) -> None:
        release.wait(30)

    blocked = ledger.submit(stuck)
    try:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["error"] == "LedgerUnavailable"
        assert "did not answer within 0.3 s" in r.json()["detail"]
    finally:
        release.set()
    blocked.result(10)
    # Unwedged, it answers again: within the configured timeout, not the 0.3 s that a loaded
    # machine may take for a read and a write even when nothing is wrong.
    client.app.state.probe_timeout_s = patient  # type: ignore[attr-defined]
    assert client.get("/readyz").status_code == 200


def test_lease_operations_are_counted_by_outcome(client: TestClient) -> None:
    lease = client.post("/v1/leases", json={"size": 4 * MiB, "ttl_s": 30}).json()
    client.post(f"/v1/leases/{lease['id']}/keepalive")
    client.post("/v1/leases/nope/keepalive")
    client.post("/v1/leases", json={"size": 1 << 40})
    client.post("/v1/leases", json={"size": -1})
    client.delete(f"/v1/leases/{lease['id']}")
    client.post(f"/v1/leases/{lease['id']}/revoke")
    client.get(f"/v1/leases/{lease['id']}")  # reads are not lease operations
    found = samples(client)
    counts = {(op, outcome): value(found, "poold_lease_operations_total", operation=op,
                                   outcome=outcome)
              for op, outcome in [("grant", "ok"), ("grant", "LeaseTooLarge"),
                                  ("grant", "ValidationError"), ("keepalive", "ok"),
                                  ("keepalive", "UnknownLease"), ("release", "ok"),
                                  ("revoke", "ok")]}
    assert set(counts.values()) == {1.0}, counts
    assert value(found, "poold_lease_operation_duration_seconds_count", operation="grant") == 3
    assert value(found, "poold_lease_operation_duration_seconds_count", operation="revoke") == 1


def test_capacity_is_the_ledgers(client: TestClient) -> None:
    client.post("/v1/leases", json={"size": 6 * MiB})
    found = samples(client)
    (pool,) = client.get("/v1/pools").json()
    for state in ("size", "claimed", "leased", "free", "available"):
        key = "size" if state == "size" else f"{state}_bytes"
        assert value(found, "poold_pool_bytes", pool=pool["name"], state=state) == pool[key]
    assert value(found, "poold_pool_live_leases", pool=pool["name"]) == 1
    (device,) = client.get("/v1/devices").json()
    labels = {"host": device["host"], "pool": device["pool"], "device": device["devname"]}
    assert value(found, "poold_device_bytes", state="leased", **labels) == 6 * MiB
    assert value(found, "poold_device_bytes", state="size", **labels) == device["size"]
    assert value(found, "poold_device_online", **labels) == 1
    assert value(found, "poold_ledger_up") == 1


def test_ledger_unavailable_is_counted_at_the_edge(client: TestClient, ledger: Ledger) -> None:
    ledger.writer.stop()
    r = client.post("/v1/leases", json={"size": MiB})
    assert r.status_code == 503
    found = samples(client)
    assert value(found, "poold_ledger_errors_total", source="api") == 1
    assert value(found, "poold_lease_operations_total", operation="grant",
                 outcome="LedgerUnavailable") == 1


def test_metrics_answer_when_the_ledger_cannot_be_read(client: TestClient, ledger: Ledger,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*_args: object) -> None:
        raise LedgerUnavailable("ledger read failed: OperationalError")

    monkeypatch.setattr(ledger, "read", unreadable)
    found = samples(client)
    assert value(found, "poold_ledger_up") == 0
    assert value(found, "poold_ledger_errors_total", source="metrics") == 1
    assert not [k for k in found if k[0] == "poold_pool_bytes"]


@pytest.mark.parametrize(("method", "path", "operation"), [
    ("POST", "/v1/leases", "grant"), ("POST", "/v1/leases/", "grant"),
    ("POST", "/v1/leases/abc/keepalive", "keepalive"), ("POST", "/v1/leases/abc/revoke", "revoke"),
    ("DELETE", "/v1/leases/abc", "release"), ("GET", "/v1/leases", None),
    ("GET", "/v1/leases/abc", None), ("POST", "/v1/leases/abc/other", None),
    ("DELETE", "/v1/leases", None), ("POST", "/v1/leasesx", None), ("GET", "/metrics", None),
])
def test_lease_operation_names(method: str, path: str, operation: str | None) -> None:
    assert lease_operation(method, path) == operation


def test_the_writers_group_commit_is_counted(client: TestClient, ledger: Ledger) -> None:
    before = samples(client)
    assert client.post("/v1/leases", json={"size": MiB}).status_code == 201
    found = samples(client)
    stats = ledger.writer.stats
    assert value(found, "poold_ledger_batches_total") == stats.batches
    assert value(found, "poold_ledger_batch_commands_total") == stats.commands
    assert value(found, "poold_ledger_batch_seconds_total") == stats.busy_s > 0
    assert value(found, "poold_ledger_batch_commands_total") > value(
        before, "poold_ledger_batch_commands_total")  # the grant was one
