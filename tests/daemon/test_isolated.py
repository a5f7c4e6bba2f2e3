"""Isolated pools on a writable fake kernel: each lease gets a dax device of its own, sized to the
lease, made in the pool's dynamic region; the device is destroyed once the lease has ended and
its bytes were scrubbed, never before; a refused grant leaves no device behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from drivers.daxctl import DaxControl
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon import app as app_module
from poold.daemon.devices import DeviceOps
from poold.daemon.isolated import IsolatedLeases
from poold.ledger.fsck import fsck
from poold.ledger.views import ScrubJob
from poold.types import MiB
from tests.drivers.fake_kernel import FakeKernel


@pytest.fixture
def kernel(tmp_path: Path) -> FakeKernel:
    return FakeKernel("sysfs-d-hmem-subdivided", tmp_path)  # region 0: 256 MiB available


@pytest.fixture
def daemon(tmp_path: Path, kernel: FakeKernel, ledger_url: str) -> Iterator[Daemon]:
    settings = Settings(state_dir=tmp_path / "state", database_url=ledger_url,
                        host_id="iso-host", sysfs_root=kernel.root, watch_udev=False,
                        isolated_pools={"private": 0}, auth="off", reap_interval_s=3600)
    daemon = Daemon(settings)
    ops = daemon.app.state.device_admin
    assert isinstance(ops, DeviceOps) and isinstance(daemon.isolated, IsolatedLeases)
    ops.dax = DaxControl(kernel)  # the same tree, with writes answered as the kernel would
    yield daemon
    daemon.close()


@pytest.fixture
def api(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    # Background passes every hour (after the one at start, before any lease): the test runs
    # the scrubber and the sweep itself. The scrubber's own poll (0.1 s) would otherwise zero a
    # job at the same time as the test's pass.
    monkeypatch.setattr(app_module, "SCRUB_POLL_S", 3600.0)
    with TestClient(daemon.app, raise_server_exceptions=False) as client:
        yield client


def kernel_devices(kernel: FakeKernel) -> dict[str, tuple[int, str | None]]:
    return {d.chardev: (d.size, d.driver) for d in DaxControl(kernel).region(0).devices}


def ledger_devices(api: TestClient) -> dict[str, tuple[str, int, str]]:
    return {d["devname"]: (d["pool"], d["size"], d["state"]) for d in api.get("/v1/devices").json()
            if d["state"] != "missing"}


def grant(api: TestClient, size: int, **extra: Any) -> Any:
    return api.post("/v1/leases", json={"size": size, "pool": "private", "ttl_s": 600, **extra})


def kinds(api: TestClient) -> list[str]:
    return [e["kind"] for e in reversed(api.get("/v1/events", params={"limit": 1000}).json())]


def test_each_lease_gets_a_device_sized_to_it(api: TestClient, kernel: FakeKernel,
                                              daemon: Daemon) -> None:
    first = grant(api, 5 * MiB)
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["device"], body["chardev"], body["offset"], body["length"]) == (
        "dax0.4", "/dev/dax0.4", 0, 6 * MiB)  # rounded up to the region's 2 MiB align
    second = grant(api, 64 * MiB).json()
    assert (second["device"], second["offset"], second["length"]) == ("dax0.5", 0, 64 * MiB)
    assert kernel_devices(kernel)["dax0.4"] == (6 * MiB, "device_dax")
    assert kernel_devices(kernel)["dax0.5"] == (64 * MiB, "device_dax")
    assert ledger_devices(api)["dax0.4"] == ("private", 6 * MiB, "online")
    assert ledger_devices(api)["dax0.1"][0] == "default"  # other devices stay out of it
    created = [e for e in api.get("/v1/events").json() if e["kind"] == "device.created"]
    assert {e["details"]["pool"] for e in created} == {"private"}
    assert daemon.isolated is not None and daemon.isolated.sweep() == 0  # both are held
    assert daemon.ledger.read(fsck).clean


def test_destroyed_only_after_the_scrub(api: TestClient, kernel: FakeKernel, daemon: Daemon,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert daemon.isolated is not None
    lease = grant(api, 8 * MiB).json()
    assert api.delete(f"/v1/leases/{lease['id']}").json()["state"] == "scrubbing"
    # The fake kernel has no /dev/dax0.4: the scrubber cannot zero it yet, so it stays held.
    assert daemon.scrubber.run_once() == 0
    assert daemon.isolated.sweep() == 0
    assert "dax0.4" in kernel_devices(kernel)
    assert api.get(f"/v1/leases/{lease['id']}").json()["state"] == "scrubbing"

    zeroed: list[str] = []
    monkeypatch.setattr(daemon.scrubber, "_zero", lambda job, _maps: zeroed.append(job.chardev))
    assert daemon.scrubber.run_once() == 1 and zeroed == ["/dev/dax0.4"]
    assert api.get(f"/v1/leases/{lease['id']}").json()["state"] == "released"
    assert daemon.isolated.sweep() == 1
    assert "dax0.4" not in kernel_devices(kernel) and "dax0.4" not in ledger_devices(api)
    events = kinds(api)
    assert events.index("lease.scrubbed") < events.index("device.destroyed")
    destroyed = next(e for e in api.get("/v1/events").json() if e["kind"] == "device.destroyed")
    assert destroyed["actor"] == "isolation" and destroyed["details"]["reason"] == "lease ended"
    assert daemon.ledger.read(fsck).clean


def test_expiry_ends_the_device_too(api: TestClient, kernel: FakeKernel, daemon: Daemon,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert daemon.isolated is not None
    monkeypatch.setattr(daemon.scrubber, "_zero", lambda job, _maps: None)
    lease = grant(api, 2 * MiB, ttl_s=1).json()
    time.sleep(1.2)
    daemon.tick()  # the reaper: expired, then scrubbing
    daemon.scrubber.run_once()
    assert api.get(f"/v1/leases/{lease['id']}").json()["state"] == "expired"
    assert daemon.isolated.sweep() == 1 and lease["device"] not in kernel_devices(kernel)


@pytest.mark.parametrize(("extra", "size", "status", "error"), [
    ({"ttl_s": 100_000}, 8 * MiB, 422, "InvalidRequest"),  # refused by the ledger, after create
    ({}, 512 * MiB, 507, "NoCapacity"),  # the region has 256 MiB available
    ({"device": "dax0.1"}, 8 * MiB, 422, "InvalidRequest"),  # isolated: no device to ask for
])
def test_refused_grants_leave_no_device(api: TestClient, kernel: FakeKernel, daemon: Daemon,
                                        extra: dict[str, Any], size: int, status: int,
                                        error: str) -> None:
    sysfs, devices = kernel.snapshot(), ledger_devices(api)
    r = grant(api, size, **extra)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert kernel.snapshot() == sysfs and ledger_devices(api) == devices
    assert daemon.ledger.read(fsck).clean


def test_a_new_device_at_a_gone_isolated_ones_address_is_not_isolated(
        api: TestClient, kernel: FakeKernel, daemon: Daemon,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert daemon.isolated is not None
    monkeypatch.setattr(daemon.scrubber, "_zero", lambda job, _maps: None)
    lease = grant(api, 8 * MiB).json()
    api.delete(f"/v1/leases/{lease['id']}")
    daemon.scrubber.run_once()
    assert daemon.isolated.sweep() == 1
    # An admin's device at the same physical address: the same identity in the ledger, which
    # must not bring back the isolated pool (whose sweep would destroy it).
    created = api.post("/v1/devices", json={"region": 0, "size": 8 * MiB})
    assert created.status_code == 201, created.text
    assert ledger_devices(api)[created.json()["devname"]] == ("default", 8 * MiB, "online")
    assert daemon.isolated.sweep() == 0
    assert created.json()["devname"] in kernel_devices(kernel)


def test_scrub_jobs_name_their_kind() -> None:
    assert ScrubJob("l", "/dev/dax0.1", 0, 1, 0).kind == "devdax"


@pytest.mark.parametrize("clash", [{"default_pool": "private"},
                                   {"device_pools": {"dax*": "private"}}])
def test_an_isolated_pool_holds_nothing_else(tmp_path: Path, clash: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="isolated pools"):
        Settings(state_dir=tmp_path, isolated_pools={"private": 0}, **clash)
