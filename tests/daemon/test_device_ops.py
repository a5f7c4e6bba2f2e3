"""Admin device operations through the API, on a daemon whose sysfs is a writable recorded tree
answered by a fake kernel: the ledger follows each change in the same step, new devices are
leasable without a restart, and every refusal is a 4xx that leaves sysfs and every ledger row
(devices, claims, leases, events) as they were."""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import OPEN
from drivers.daxctl import DaxControl
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon.devices import DeviceOps
from poold.ledger.fsck import fsck
from poold.models import Base, Claim, Device, Event, Lease, Pool
from poold.types import MiB
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
    daemon.app.state.auth = None  # everyone is an admin; test_admins_only puts tokens back on
    yield daemon
    daemon.close()


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


def lease(api: TestClient, device: str | None, size: int = 8 * MiB) -> Any:
    hint = {} if device is None else {"device": device}
    return api.post("/v1/leases", json={"size": size, "ttl_s": 600, **hint})


def ledger_rows(session: Session, _now: datetime) -> dict[str, list[tuple[Any, ...]]]:
    """Every row, every column, of the tables a device operation could change."""
    tables = [Base.metadata.tables[model.__tablename__]
              for model in (Pool, Device, Claim, Lease, Event)]
    return {table.name: [tuple(row) for row in session.execute(
                select(table).order_by(*table.primary_key))] for table in tables}


def unchanged(daemon: Daemon, kernel: FakeKernel) -> tuple[Any, ...]:
    """What a refusal must leave as it was: sysfs, and every ledger row (pools, devices, claims,
    leases, events)."""
    return kernel.snapshot(), daemon.ledger.read(ledger_rows)


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
    before = unchanged(daemon, kernel)
    r = api.delete("/v1/devices/dax0.2")
    assert r.status_code == 409 and r.json()["error"] == "DeviceBusy"
    assert "dax0.2" in r.json()["detail"] and held["id"] in r.json()["detail"]
    assert unchanged(daemon, kernel) == before

    drained = api.post("/v1/devices/dax0.2/drain")
    assert drained.status_code == 200 and drained.json()["device"]["state"] == "draining"
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


def test_a_drained_device_takes_no_new_lease_and_serves_its_live_one(
        api: TestClient, kernel: FakeKernel, daemon: Daemon) -> None:
    held = lease(api, "dax0.2").json()
    # Placement fills this host's claims first: unpinned, a lease lands in dax0.2's claim.
    probe = lease(api, None).json()
    assert probe["device"] == "dax0.2"
    api.delete(f"/v1/leases/{probe['id']}")
    assert api.post("/v1/devices/dax0.2/drain").json()["device"]["state"] == "draining"
    room = next(d for d in api.get("/v1/devices").json() if d["devname"] == "dax0.2")
    assert room["claimed_bytes"] - room["leased_bytes"] >= 200 * MiB  # room in its claim

    before = unchanged(daemon, kernel)
    pinned = lease(api, "dax0.2")
    assert pinned.status_code == 409, pinned.text
    assert pinned.json()["error"] == "DeviceDraining"
    assert "dax0.2" in pinned.json()["detail"] and "draining" in pinned.json()["detail"]
    assert unchanged(daemon, kernel) == before

    elsewhere = lease(api, None)
    assert elsewhere.status_code == 201 and elsewhere.json()["device"] in ("dax0.1", "dax0.3")

    renewed = api.post(f"/v1/leases/{held['id']}/keepalive", json={"ttl_s": 900})
    assert renewed.status_code == 200 and renewed.json()["expires_at"] > held["expires_at"]
    assert renewed.json()["device"] == "dax0.2" and renewed.json()["state"] == "active"
    released = api.delete(f"/v1/leases/{held['id']}")
    assert released.status_code == 200 and released.json()["state"] == "released"
    assert [e["kind"] for e in api.get("/v1/events", params={"lease_id": held["id"]}).json()
            ] == ["lease.released", "lease.renewed", "lease.granted"]

    for other in ("dax0.1", "dax0.3"):  # only draining devices could hold it now
        api.post(f"/v1/devices/{other}/drain")
    anywhere = lease(api, None)
    assert anywhere.status_code == 409 and anywhere.json()["error"] == "DeviceDraining"
    assert all(d in anywhere.json()["detail"] for d in ("dax0.1", "dax0.2", "dax0.3"))
    assert daemon.ledger.read(fsck).clean


def test_a_device_held_for_an_operation_takes_no_grant(api: TestClient, daemon: Daemon) -> None:
    # What the writer sees between an operation's hold and its end (DeviceOps holds the lock,
    # so the API cannot otherwise be asked mid-operation).
    device_id = next(d["id"] for d in api.get("/v1/devices").json() if d["devname"] == "dax0.2")
    daemon.ledger.writer.held_devices.add(device_id)
    pinned = lease(api, "dax0.2")
    assert (pinned.status_code, pinned.json()["error"]) == (409, "DeviceBusy")
    assert "dax0.2" in pinned.json()["detail"] and "admin operation" in pinned.json()["detail"]
    assert all(lease(api, None).json()["device"] != "dax0.2" for _ in range(3))
    daemon.ledger.writer.held_devices.discard(device_id)
    assert lease(api, "dax0.2").status_code == 201


def test_undrain_makes_it_leasable_again(api: TestClient) -> None:
    api.post("/v1/devices/dax0.1/drain")
    assert lease(api, "dax0.1").status_code == 409
    assert api.post("/v1/devices/dax0.1/undrain").json()["device"]["state"] == "online"
    assert lease(api, "dax0.1").status_code == 201
    assert {"device.drained", "device.undrained"} <= set(kinds(api))


@pytest.mark.parametrize(("method", "path", "body", "status", "error", "words"), [
    # the region's first device
    ("DELETE", "/v1/devices/dax0.0", None, 409, "DeviceBusy", ("dax0.0", "first", "EBUSY")),
    ("POST", "/v1/devices", {"region": 0, "size": 512 * MiB}, 409, "RegionFull",
     ("region0", "available", "ENOSPC")),
    ("POST", "/v1/devices", {"region": 0, "size": 3 * MiB}, 422, "InvalidRequest",
     ("region0", "multiple", "EINVAL")),
    ("POST", "/v1/devices", {"region": 7, "size": 64 * MiB}, 404, "UnknownDevice",
     ("region7", "ENODEV")),
    ("POST", "/v1/devices/dax0.1/resize", {"size": 768 * MiB}, 409, "RegionFull",
     ("dax0.1", "ENOSPC")),
    ("DELETE", "/v1/devices/dax0.9", None, 404, "UnknownDevice", ("dax0.9", "ENODEV")),
    ("DELETE", "/v1/devices/sda1", None, 422, "ValidationError", ()),
])
def test_refusals_change_nothing(daemon: Daemon, api: TestClient, kernel: FakeKernel,
                                 method: str, path: str, body: dict[str, int] | None,
                                 status: int, error: str, words: tuple[str, ...]) -> None:
    lease(api, "dax0.1")  # a claim and a lease the refusal must leave alone
    before = unchanged(daemon, kernel)
    r = api.request(method, path, json=body)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert all(w in str(r.json()["detail"]) for w in words), r.json()
    assert unchanged(daemon, kernel) == before


def test_kernel_refusal_half_way_is_undone_in_sysfs_and_ledger(
        daemon: Daemon, api: TestClient, kernel: FakeKernel) -> None:
    lease(api, None)  # some ledger state besides the devices
    idle = lease(api, "dax0.3").json()
    api.delete(f"/v1/leases/{idle['id']}")  # dax0.3 keeps an idle claim the hold must not end
    before = unchanged(daemon, kernel)
    kernel.fail["dax_region/delete"] = errno.EBUSY  # after unbind and size 0
    r = api.delete("/v1/devices/dax0.3")
    assert r.status_code == 409 and r.json()["error"] == "DeviceBusy"
    assert "dax0.3" in r.json()["detail"] and "EBUSY" in r.json()["detail"]
    assert unchanged(daemon, kernel) == before  # no drained/undrained events, the claim kept
    assert lease(api, "dax0.3").status_code == 201  # the hold is gone with the operation


def test_a_write_the_kernel_reads_back_otherwise_is_undone(
        daemon: Daemon, api: TestClient, kernel: FakeKernel) -> None:
    before = unchanged(daemon, kernel)
    kernel.misread["dax0.3/size"] = str(192 * MiB)
    r = api.post("/v1/devices/dax0.3/resize", json={"size": 128 * MiB})
    assert (r.status_code, r.json()["error"]) == (502, "DriverError"), r.text
    detail = r.json()["detail"]
    assert "bus/dax/devices/dax0.3/size: dax0.3: wrote 134217728, reads back 201326592" in detail
    assert "EIO" in detail
    assert unchanged(daemon, kernel) == before
    assert devices(api)["dax0.3"] == ONLINE


def test_resize_follows_in_the_ledger(api: TestClient) -> None:
    held = lease(api, "dax0.3").json()
    assert api.post("/v1/devices/dax0.3/resize", json={"size": 128 * MiB}).status_code == 409
    api.delete(f"/v1/leases/{held['id']}")
    r = api.post("/v1/devices/dax0.3/resize", json={"size": 512 * MiB})
    assert r.status_code == 200, r.text
    assert devices(api)["dax0.3"] == ("devdax", "online", 512 * MiB)
    assert lease(api, "dax0.3", 400 * MiB).status_code == 201


def test_reconfigure_to_system_ram_and_back(daemon: Daemon, api: TestClient,
                                            kernel: FakeKernel) -> None:
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
    before = unchanged(daemon, kernel)
    stuck = api.post("/v1/devices/dax0.2/reconfigure", json={"mode": "devdax"})
    assert stuck.status_code == 409 and stuck.json()["error"] == "DeviceBusy"
    assert "dax0.2" in stuck.json()["detail"] and "memory35 (EBUSY)" in stuck.json()["detail"]
    assert unchanged(daemon, kernel) == before
    kernel.stuck.clear()
    back = api.post("/v1/devices/dax0.2/reconfigure", json={"mode": "devdax"})
    assert back.status_code == 200 and back.json()["online_blocks"] == []
    assert devices(api)["dax0.2"] == ONLINE
    assert lease(api, "dax0.2").status_code == 201
    assert "device.reconfigured" in kinds(api)


# Every operation, with its body: admins only.
OPERATIONS = [
    ("POST", "/v1/devices", {"region": 0, "size": 64 * MiB}),
    ("DELETE", "/v1/devices/dax0.1", None),
    ("POST", "/v1/devices/dax0.1/resize", {"size": 128 * MiB}),
    ("POST", "/v1/devices/dax0.1/reconfigure", {"mode": "system-ram"}),
    ("POST", "/v1/devices/dax0.1/drain", None),
    ("POST", "/v1/devices/dax0.1/undrain", None),
]


def test_admins_only(api: TestClient, daemon: Daemon, kernel: FakeKernel) -> None:
    daemon.app.state.auth = daemon.auth  # tokens on, as the daemon serves them
    assert daemon.admin_credential is not None
    admin = {"Authorization": f"Bearer {daemon.admin_credential.read_text().strip()}"}
    bearers = {}
    for role, tenant in (("tenant", "team-a"), ("agent", None)):
        made = api.post("/v1/tokens", headers=admin,
                        json={"name": f"a-{role}", "role": role, "tenant": tenant})
        assert made.status_code == 201, made.text
        bearers[role] = made.json()["bearer"]
    api.post("/v1/devices/dax0.1/drain", headers=admin)  # so that undrain would change it
    before = unchanged(daemon, kernel)
    for role, bearer in bearers.items():
        for method, path, body in OPERATIONS:
            r = api.request(method, path, json=body, headers={"Authorization": f"Bearer {bearer}"})
            assert (r.status_code, r.json()["error"]) == (403, "Forbidden"), (role, path, r.text)
    assert unchanged(daemon, kernel) == before
    # The same requests from the admin are served: the 403s were about the role.
    assert api.post("/v1/devices/dax0.1/undrain", headers=admin).status_code == 200
