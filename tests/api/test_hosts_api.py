"""GET /v1/hosts: the ledger's hosts, heartbeat age, claims and leases; this host's memory."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from poold.ledger.clock import ManualClock
from poold.ledger.ledger import Ledger
from poold.types import MiB
from tests.conftest import HOST, LedgerFactory


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    with TestClient(create_app(ledger), raise_server_exceptions=False) as test_client:
        yield test_client


def test_hosts_show_heartbeat_usage_and_memory(client: TestClient, clock: ManualClock) -> None:
    client.post("/v1/leases", json={"size": 4 * MiB})
    clock.advance(7)
    (host,) = client.get("/v1/hosts").json()
    assert host["id"] == HOST and host["state"] == "up"
    assert host["heartbeat_age_s"] == pytest.approx(7)
    assert (host["live_leases"], host["leased_bytes"]) == (1, 4 * MiB)
    assert host["claims"] == 1 and host["claimed_bytes"] == 64 * MiB
    assert host["memory"]["total"] == psutil.virtual_memory().total
    assert host["numa_nodes"] and host["numa_nodes"][0]["node"] == 0
    assert client.get(f"/v1/hosts/{HOST}").json()["id"] == HOST


def test_each_host_is_counted_apart(make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """Claims, leases, bytes and heartbeat age per host: a host with nothing shows zeros, an
    expired lease (not reaped yet) no longer counts as live."""
    here = make_ledger()
    with TestClient(create_app(here), raise_server_exceptions=False) as client:
        client.post("/v1/leases", json={"size": 4 * MiB, "ttl_s": 600})
        client.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 5})
        clock.advance(6)  # the second has expired; nobody reaped it
        make_ledger(host_id="host-idle", specs=[])  # registered (its first beat) at this instant
        hosts = {h["id"]: h for h in client.get("/v1/hosts").json()}
    assert set(hosts) == {HOST, "host-idle"}
    figures = ("claims", "claimed_bytes", "live_leases", "leased_bytes")
    assert [hosts[HOST][k] for k in figures] == [1, 64 * MiB, 1, 4 * MiB]
    assert [hosts["host-idle"][k] for k in figures] == [0, 0, 0, 0]
    assert hosts["host-idle"]["heartbeat_age_s"] == 0.0
    assert hosts[HOST]["heartbeat_age_s"] == pytest.approx(6)


def test_unknown_host_is_404(client: TestClient) -> None:
    r = client.get("/v1/hosts/nope")
    assert (r.status_code, r.json()["error"]) == (404, "UnknownHost")
