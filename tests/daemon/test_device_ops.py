"""Admin device operations through the API, on a daemon whose sysfs is a writable recorded tree
answered by a fake kernel: the ledger follows each change in the same step, new devices are
leasable without a restart, and every refusal is a 4xx that leaves sysfs and the ledger as they
were."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import OPEN
from drivers.daxctl import DaxControl
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon.devices import DeviceOps
from poold.ledger import reads
from poold.ledger.fsck import fsck
from poold.types import MiB, Principal, Role
from tests.drivers.fake_kernel import FakeKernel


@pytest.fixture
def kernel(tmp_path: Path) -> FakeKernel:
    return FakeKernel("sysfs-d-hmem-subdivided", tmp_path)


@pytest.fixture
def daemon(tmp_path: Path, kernel: FakeKernel, ledger_url: str) -> Iterator[Daemon]:
    settings = Settings(state_dir=tmp_path / "state", database_url=ledger_url,
                        host_id="ops-host", sysfs_root=kernel.root, watch_udev=False,
                        **NO_SCRUB)
    daemon = Daemon(settings)
    ops = daemon.app.state.device_admin
    assert isinstance(ops, DeviceOps)
    ops.dax = DaxControl(kernel)  # the same tree, with writes answered as the kernel would
    daemon.app.state.auth = None  # everyone is an admin; test_admins_only puts a tenant here
    yield daemon
    daemon.ledger.close()


@pytest.fixture
def api(daemon: Daemon) -> Iterator[TestClient]:
    with TestClient(daemon.app, raise_server_exceptions=False) as client:
        yield client


def devices(api: TestClient) -> dict[str, tuple[str, str, int]]:
    """Present devices: devname -> (kind, state, size)."""
    return {d["devname"]: (d["kind"], d["state"], d["size"]) for d in api.get("/v1/devices").json()
            if d["state"] != "missing"}


def kinds(api: TestClient) -> list[str]:
    return [e["kind"] for e in api.get("/v1/events", params={"limit": 1000}).json()]


def lease(api: TestClient, device: str, size: int = 8 * MiB) -> Any:
    return api.post("/v1/leases", json={"size": size, "device": device, "ttl_s": 600})


def unchanged(api: TestClient, kernel: FakeKernel) -> tuple[Any, ...]:
    """What a refusal must leave as it was: sysfs, the ledger's devices, the audit log."""
    return kernel.snapshot(), api.get("/v1/devices").json(), kinds(api)


ONLINE = ("devdax", "online", 256 * MiB)
# The fake tree has no /dev/dax*: a pool that scrubs on release could never zero a lease's bytes
# (a device holding a lease being scrubbed is refused like one with a live lease).
NO_SCRUB: dict[str, Any] = (
    {"unscrubbed_pools": ["default"]} if "unscrubbed_pools" in Settings.model_fields else {})


def test_create_is_leasable_at_once(api: TestClient, daemon: Daemon) -> None:
    r = api.post("/v1/devices", json={"region": 0, "size": 128 * MiB})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["devname"] == "dax0.4" and body["kernel"]["mode"] == "devdax"
    assert body["device"]["size"] == 128 * MiB and body["device"]["state"] == "online"
    assert devices(api)["dax0.4"] == ("devdax", "online", 128 * MiB)
    granted = lease(api, "dax0.4")
    assert granted.status_code == 201 and granted.json()["chardev"] == "/dev/dax0.4"
    assert {"device.added", "device.created"} <= set(kinds(api))
    created = next(e for e in api.get("/v1/events").json() if e["kind"] == "device.created")
    assert created["actor"] == OPEN.actor and created["details"]["size"] == 128 * MiB
    assert daemon.ledger.read(fsck).clean


def test_destroy_refused_while_leased_then_drained_lease_runs_out(
        api: TestClient, kernel: FakeKernel, daemon: Daemon) -> None:
    held = lease(api, "dax0.2").json()
    before = unchanged(api, kernel)
    r = api.delete("/v1/devices/dax0.2")
    assert r.status_code == 409 and r.json()["error"] == "DeviceBusy"
    assert "dax0.2" in r.json()["detail"] and held["id"] in r.json()["detail"]
    assert unchanged(api, kernel) == before

    drained = api.post("/v1/devices/dax0.2/drain")
    assert drained.status_code == 200 and drained.json()["device"]["state"] == "draining"
    refused = lease(api, "dax0.2")
    assert refused.status_code == 422 and refused.json()["error"] == "LeaseTooLarge"
    assert api.post(f"/v1/leases/{held['id']}/keepalive").status_code == 200  # still served
    assert api.delete(f"/v1/leases/{held['id']}").json()["state"] in ("released", "scrubbing")
    deadline = time.monotonic() + 20  # a pool that scrubs on release zeroes the bytes first
    while api.get(f"/v1/leases/{held['id']}").json()["state"] == "scrubbing":
        assert time.monotonic() < deadline, "the scrub never finished"
        time.sleep(0.05)

    gone = api.delete("/v1/devices/dax0.2")
    assert gone.status_code == 200, gone.text
    assert gone.json()["kernel"] is None and gone.json()["device"]["state"] == "missing"
    assert "dax0.2" not in devices(api)
    assert "dax0.2" not in [d.chardev for d in DaxControl(kernel).region(0).devices]
    assert {"device.drained", "claim.released", "device.missing", "device.destroyed"} <= set(
        kinds(api))
    assert daemon.ledger.read(fsck).clean


def test_undrain_makes_it_leasable_again(api: TestClient) -> None:
    api.post("/v1/devices/dax0.1/drain")
    assert lease(api, "dax0.1").status_code == 422
    assert api.post("/v1/devices/dax0.1/undrain").json()["device"]["state"] == "online"
    assert lease(api, "dax0.1").status_code == 201
    assert {"device.drained", "device.undrained"} <= set(kinds(api))


@pytest.mark.parametrize(("method", "path", "body", "status", "error"), [
    ("DELETE", "/v1/devices/dax0.0", None, 409, "DeviceBusy"),  # the region's first device
    ("POST", "/v1/devices", {"region": 0, "size": 512 * MiB}, 409, "RegionFull"),
    ("POST", "/v1/devices", {"region": 0, "size": 3 * MiB}, 422, "InvalidRequest"),
    ("POST", "/v1/devices", {"region": 7, "size": 64 * MiB}, 404, "UnknownDevice"),
    ("POST", "/v1/devices/dax0.1/resize", {"size": 768 * MiB}, 409, "RegionFull"),
    ("DELETE", "/v1/devices/dax0.9", None, 404, "UnknownDevice"),
    ("DELETE", "/v1/devices/sda1", None, 422, "ValidationError"),
])
def test_refusals_change_nothing(api: TestClient, kernel: FakeKernel, method: str, path: str,
                                 body: dict[str, int] | None, status: int, error: str) -> None:
    before = unchanged(api, kernel)
    r = api.request(method, path, json=body)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert unchanged(api, kernel) == before


def test_kernel_refusal_half_way_is_undone_in_sysfs_and_ledger(api: TestClient,
                                                               kernel: FakeKernel) -> None:
    before = unchanged(api, kernel)
    kernel.fail["dax_region/delete"] = 16  # EBUSY
    r = api.delete("/v1/devices/dax0.3")
    assert r.status_code == 409 and "dax0.3" in r.json()["detail"] and "EBUSY" in r.json()[
        "detail"]
    sysfs, ledger, events = unchanged(api, kernel)
    assert (sysfs, ledger) == before[:2]
    assert events[:2] == ["device.undrained", "device.drained"]  # the hold, audited and undone
    assert devices(api)["dax0.3"] == ONLINE


def test_resize_follows_in_the_ledger(api: TestClient) -> None:
    held = lease(api, "dax0.3").json()
    assert api.post("/v1/devices/dax0.3/resize", json={"size": 128 * MiB}).status_code == 409
    api.delete(f"/v1/leases/{held['id']}")
    r = api.post("/v1/devices/dax0.3/resize", json={"size": 512 * MiB})
    assert r.status_code == 200, r.text
    assert devices(api)["dax0.3"] == ("devdax", "online", 512 * MiB)
    assert lease(api, "dax0.3", 400 * MiB).status_code == 201


def test_reconfigure_to_system_ram_and_back(api: TestClient, kernel: FakeKernel) -> None:
    held = lease(api, "dax0.2").json()
    assert api.post("/v1/devices/dax0.2/reconfigure",
                    json={"mode": "system-ram"}).status_code == 409
    api.delete(f"/v1/leases/{held['id']}")
    r = api.post("/v1/devices/dax0.2/reconfigure", json={"mode": "system-ram"})
    assert r.status_code == 200, r.text
    assert r.json()["online_blocks"] == [34, 35] and r.json()["kernel"]["movable"] is True
    assert devices(api)["dax0.2"] == ("system-ram", "online", 256 * MiB)
    on_node = lease(api, "dax0.2")  # NUMA node memory, accounted like any device's bytes
    assert on_node.status_code == 201, on_node.text
    assert api.post("/v1/devices/dax0.2/reconfigure",
                    json={"mode": "devdax"}).status_code == 409  # held by that lease
    api.delete(f"/v1/leases/{on_node.json()['id']}")

    kernel.stuck.add(35)
    stuck = api.post("/v1/devices/dax0.2/reconfigure", json={"mode": "devdax"})
    assert stuck.status_code == 409 and "memory35" in stuck.json()["detail"]
    kernel.stuck.clear()
    back = api.post("/v1/devices/dax0.2/reconfigure", json={"mode": "devdax"})
    assert back.status_code == 200 and back.json()["online_blocks"] == []
    assert devices(api)["dax0.2"] == ONLINE
    assert lease(api, "dax0.2").status_code == 201
    assert "device.reconfigured" in kinds(api)


class Tenant:
    def authenticate(self, _request: object) -> Principal:
        return Principal(name="t1", role=Role.TENANT, tenant="t1")


def test_admins_only(api: TestClient, daemon: Daemon, kernel: FakeKernel) -> None:
    daemon.app.state.auth = Tenant()
    before = kernel.snapshot()
    for method, path, body in (("POST", "/v1/devices", {"region": 0, "size": 64 * MiB}),
                               ("DELETE", "/v1/devices/dax0.1", None),
                               ("POST", "/v1/devices/dax0.1/drain", None)):
        assert api.request(method, path, json=body).status_code == 403
    assert kernel.snapshot() == before
    assert [d.state for d in daemon.ledger.read(reads.devices)] == ["online"] * 3
