"""What a lease's memory is made of at its grant, and where it is mapped from (`map_path`) in
every answer about the lease: on a daemon that holds the memory of its emulated leases (the
API's own `served` daemon), and through the LeaseBacking seam for each kind of device."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from poold.errors import NoCapacity
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.types import DeviceKind, MiB
from tests.api.admin_served import Served
from tests.conftest import LedgerFactory, emulated_spec


def test_every_answer_about_a_held_lease_says_where_to_map_it(served: Served) -> None:
    granted = served.admin.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 30})
    assert granted.status_code == 201, granted.text
    lease = granted.json()
    path = lease["map_path"]
    assert path is not None
    renewed = served.admin.post(f"/v1/leases/{lease['id']}/keepalive", json={"ttl_s": 60})
    assert renewed.status_code == 200, renewed.text  # 200, not the grant's 201
    assert renewed.json()["map_path"] == path
    assert served.admin.get(f"/v1/leases/{lease['id']}").json()["map_path"] == path
    listed = served.admin.get("/v1/leases", params={"state": "active"}).json()
    assert [(x["id"], x["map_path"]) for x in listed] == [(lease["id"], path)]


class RecordingBacking:
    """The daemon's LeaseBacking seam (api.lease_backing), recording what the grant route asks
    it to make, and where: on the event loop (inline) or in a worker thread. `refuse`: make
    raises NoCapacity, as a region with no room for the lease's device does."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.made: list[tuple[str, DeviceKind, str]] = []

    def make(self, view: LeaseView) -> None:
        try:
            asyncio.get_running_loop()
            where = "inline"
        except RuntimeError:
            where = "thread"
        self.made.append((view.id, DeviceKind(view.kind), where))
        if self.refuse:
            raise NoCapacity(f"nothing to make lease {view.id} of")

    def where(self, view: LeaseView) -> str | None:
        return f"/made/{view.id}" if any(m[0] == view.id for m in self.made) else None


SPECS = [emulated_spec(16 * MiB, "emu0"),
         replace(emulated_spec(16 * MiB, "region0"), kind=DeviceKind.DAX_REGION),
         replace(emulated_spec(16 * MiB, "dax0"), kind=DeviceKind.DEVDAX)]


def backed_client(ledger: Ledger, backing: RecordingBacking) -> TestClient:
    app = create_app(ledger)
    app.state.lease_backing = backing
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(("device", "made"), [
    ("emu0", [(DeviceKind.EMULATED, "inline")]),        # a memfd: microseconds
    ("region0", [(DeviceKind.DAX_REGION, "thread")]),   # sysfs writes: off the event loop
    ("dax0", []),                                       # the device's chardev: nothing to make
])
def test_a_grant_makes_its_lease_of_what_its_device_needs(
        make_ledger: LedgerFactory, device: str, made: list[tuple[DeviceKind, str]]) -> None:
    backing = RecordingBacking()
    with backed_client(make_ledger(SPECS), backing) as client:
        granted = client.post("/v1/leases", json={"size": 2 * MiB, "device": device})
        assert granted.status_code == 201, granted.text
        lease = granted.json()
        assert lease["device"] == device
        assert [(kind, where) for _id, kind, where in backing.made] == made
        assert all(id_ == lease["id"] for id_, _kind, _where in backing.made)
        # Made: its map path is the backing's; a devdax lease maps its device's chardev.
        assert lease["map_path"] == (f"/made/{lease['id']}" if made else "/nonexistent/dax0")


@pytest.mark.parametrize(("device", "ended"), [
    ("emu0", "released"),
    ("region0", "scrubbing"),  # a region's bytes are zeroed before reuse, whatever the pool says
])
def test_a_lease_nothing_can_be_made_of_is_refused_and_released(
        make_ledger: LedgerFactory, device: str, ended: str) -> None:
    with backed_client(make_ledger(SPECS), RecordingBacking(refuse=True)) as client:
        refused = client.post("/v1/leases", json={"size": 2 * MiB, "device": device})
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"] == "NoCapacity"
        assert client.get("/v1/leases", params={"state": "active"}).json() == []
        (lease,) = client.get("/v1/leases").json()
        assert (lease["device"], lease["state"]) == (device, ended)
        (release,) = client.get("/v1/events", params={"kind": "lease.released"}).json()
        assert (release["lease_id"], release["actor"]) == (lease["id"], "daemon")
