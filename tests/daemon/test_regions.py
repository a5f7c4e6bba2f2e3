"""Dynamic dax regions carved per lease, by default, on a writable fake kernel (the sysfs writes
answered as Linux 6.1 answers them; the real kernel tier proves the same on a real one, and
that the device's destruction faults its old mappings).

The recorded tree is an hmem region of 1 GiB; made pristine (its devices emptied) it becomes one
ledger device, dax0, and each lease a dax device of exactly the lease's physical range; a lease
that ends is zeroed through its device, which is then destroyed, before its extent is free."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from drivers.daxctl import DaxControl
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon import app as app_module
from poold.ledger import reads
from poold.ledger.fsck import fsck
from poold.ledger.views import ScrubJob
from poold.types import MiB
from tests.drivers.fake_kernel import FakeKernel

REGION_START = 0x100000000
REGION = 1024 * MiB


@pytest.fixture
def kernel(tmp_path: Path) -> FakeKernel:
    """The recorded region with its three devices destroyed: only dax0.0, size 0."""
    kernel = FakeKernel("sysfs-d-hmem-subdivided", tmp_path)
    for name in ("dax0.1", "dax0.2", "dax0.3"):
        DaxControl(kernel).destroy_device(name)
    return kernel


def make_daemon(tmp_path: Path, kernel: FakeKernel, ledger_url: str, **extra: Any) -> Daemon:
    settings = Settings(**{
        "state_dir": tmp_path / "state", "database_url": ledger_url, "host_id": "carve-host",
        "sysfs_root": kernel.root, "watch_udev": False, "auth": "off", "reap_interval_s": 3600,
        **extra})
    return Daemon(settings, sysfs=kernel)


@pytest.fixture
def daemon(tmp_path: Path, kernel: FakeKernel, ledger_url: str) -> Iterator[Daemon]:
    daemon = make_daemon(tmp_path, kernel, ledger_url)
    yield daemon
    daemon.close()


@pytest.fixture
def zeroed(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scrubber's zeroing seam: the fake kernel has no /dev/daxN.M to map."""
    done: list[str] = []
    monkeypatch.setattr(daemon.scrubber, "_zero",
                        lambda job, _maps: done.append(f"{job.chardev}@{job.offset}"))
    return done


async def no_background_scrubber(*_args: object) -> None:
    await asyncio.Event().wait()  # until the lifespan cancels it


@pytest.fixture
def api(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    # The test runs the scrubber itself: a background pass would race the test's own.
    monkeypatch.setattr(app_module, "when_woken", no_background_scrubber)
    with TestClient(daemon.app, raise_server_exceptions=False) as client:
        yield client


def kernel_devices(kernel: FakeKernel) -> dict[str, tuple[int, int, str | None]]:
    """Sized devices: name -> (start, size, driver)."""
    return {d.chardev: (d.mappings[0].start, d.size, d.driver)
            for d in DaxControl(kernel).region(0).devices if d.size}


def grant(api: TestClient, size: int, **body: Any) -> dict[str, Any]:
    answer = api.post("/v1/leases", json={"size": size, "ttl_s": 600, **body})
    assert answer.status_code == 201, answer.text
    lease: dict[str, Any] = answer.json()
    return lease


def test_a_pristine_region_is_one_device_and_each_lease_gets_its_own(
        api: TestClient, kernel: FakeKernel) -> None:
    (device,) = api.get("/v1/devices").json()
    assert (device["devname"], device["kind"], device["size"]) == ("dax0", "dax-region", REGION)
    first, second = grant(api, 64 * MiB), grant(api, 31 * MiB)  # rounded up to the align
    found = kernel_devices(kernel)
    assert len(found) == 2
    for lease in (first, second):
        assert lease["kind"] == "dax-region" and lease["map_offset"] == 0
        devname = lease["map_path"].removeprefix("/dev/")
        # Exactly the lease's bytes of the region: its offset in the ledger is its place there.
        assert found[devname] == (REGION_START + lease["offset"], lease["length"], "device_dax")
    assert second["length"] == 32 * MiB
    assert api.get(f"/v1/leases/{first['id']}").json()["map_path"] == first["map_path"]


def test_an_ended_lease_is_zeroed_through_its_device_then_the_device_goes(
        api: TestClient, daemon: Daemon, kernel: FakeKernel, zeroed: list[str]) -> None:
    lease = grant(api, 64 * MiB)
    devname = lease["map_path"].removeprefix("/dev/")
    released = api.delete(f"/v1/leases/{lease['id']}").json()
    assert released["state"] == "scrubbing"
    assert devname in kernel_devices(kernel)  # not before it is zeroed
    assert daemon.scrubber.run_once() == 1
    assert zeroed == [f"/dev/{devname}@0"]
    assert kernel_devices(kernel) == {}
    assert api.get(f"/v1/leases/{lease['id']}").json()["state"] == "released"
    again = grant(api, 64 * MiB)  # the same bytes, a new device
    assert again["offset"] == lease["offset"]
    assert daemon.ledger.read(fsck).clean


def test_in_a_pool_that_does_not_scrub_the_device_still_goes_first(
        tmp_path: Path, kernel: FakeKernel, ledger_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = make_daemon(tmp_path, kernel, ledger_url, unscrubbed_pools=["default"])
    monkeypatch.setattr(app_module, "when_woken", no_background_scrubber)
    zeroed: list[ScrubJob] = []
    monkeypatch.setattr(daemon.scrubber, "_zero", lambda job, _maps: zeroed.append(job))
    try:
        with TestClient(daemon.app) as api:
            lease = grant(api, 64 * MiB)
            # Held until its device is gone: no other device can be made over its range.
            assert api.delete(f"/v1/leases/{lease['id']}").json()["state"] == "scrubbing"
            assert daemon.scrubber.run_once() == 1
            assert zeroed == [] and kernel_devices(kernel) == {}
            assert api.get(f"/v1/leases/{lease['id']}").json()["state"] == "released"
    finally:
        daemon.close()


def test_a_device_that_cannot_be_made_refuses_the_grant_and_keeps_nothing(
        api: TestClient, kernel: FakeKernel) -> None:
    kernel.fail["/mapping"] = 12  # ENOMEM: the range is taken
    answer = api.post("/v1/leases", json={"size": 64 * MiB})
    assert answer.status_code == 507 and answer.json()["error"] == "NoCapacity"
    assert kernel_devices(kernel) == {}
    assert [d.size for d in DaxControl(kernel).region(0).devices] == [0]  # no leftover device
    leases = api.get("/v1/leases").json()
    assert [x["state"] for x in leases] in ([], ["released"], ["scrubbing"])
    assert api.get("/v1/pools").json()[0]["leased_bytes"] == 0


def test_admins_cannot_carve_a_region_poold_carves(api: TestClient) -> None:
    made = api.post("/v1/devices", json={"region": 0, "size": 64 * MiB})
    assert made.status_code == 409 and "manual_regions" in made.json()["detail"]
    resized = api.post("/v1/devices/dax0.0/resize", json={"size": 64 * MiB})
    assert resized.status_code == 409


def test_a_restart_finds_each_lease_its_device_and_drops_what_is_nobodys(
        tmp_path: Path, kernel: FakeKernel, ledger_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_daemon(tmp_path, kernel, ledger_url)
    with TestClient(first.app) as api:
        kept, gone = grant(api, 64 * MiB), grant(api, 64 * MiB)
    first.close()
    dax = DaxControl(kernel)
    dax.destroy_device(gone["map_path"].removeprefix("/dev/"))  # as a reboot would
    stray = dax.create_device_at(0, REGION_START + 512 * MiB, 64 * MiB, 2 * MiB)  # nobody's
    second = make_daemon(tmp_path, kernel, ledger_url)
    zeroed: list[str] = []
    monkeypatch.setattr(second.scrubber, "_zero",
                        lambda job, _maps: zeroed.append(f"{job.chardev}@{job.offset}"))
    try:
        with TestClient(second.app) as api:
            assert api.get(f"/v1/leases/{kept['id']}").json()["map_path"] == kept["map_path"]
            # Lost (its device went) at start: its bytes may still be in that memory, so the
            # scrubber's first pass makes a device over its range again, zeroes through it and
            # destroys it.
            deadline = time.monotonic() + 20
            while api.get(f"/v1/leases/{gone['id']}").json()["state"] != "lost":
                assert time.monotonic() < deadline, "the lost lease was never scrubbed"
                time.sleep(0.05)
            assert len(zeroed) == 1 and zeroed[0].endswith("@0")
            assert stray.chardev not in kernel_devices(kernel)
            assert set(kernel_devices(kernel)) == {kept["map_path"].removeprefix("/dev/")}
    finally:
        second.close()


def test_a_region_listed_manual_is_leased_device_by_device(
        tmp_path: Path, ledger_url: str) -> None:
    kernel = FakeKernel("sysfs-d-hmem-subdivided", tmp_path)
    daemon = make_daemon(tmp_path, kernel, ledger_url, manual_regions=["dax0"])
    try:
        with TestClient(daemon.app) as api:
            names = {d["devname"]: d["kind"] for d in api.get("/v1/devices").json()}
            assert names == {"dax0.1": "devdax", "dax0.2": "devdax", "dax0.3": "devdax"}
            lease = grant(api, 64 * MiB)
            assert lease["map_path"] == f"/dev/{lease['device']}"  # the device, shared
    finally:
        daemon.close()


def test_a_region_holding_devices_poold_did_not_make_is_left_as_it_is(
        tmp_path: Path, ledger_url: str, caplog: pytest.LogCaptureFixture) -> None:
    kernel = FakeKernel("sysfs-d-hmem-subdivided", tmp_path)
    before = kernel_devices(kernel)
    daemon = make_daemon(tmp_path, kernel, ledger_url)
    try:
        names = {d.devname for d in daemon.ledger.read(reads.devices)}
        assert names == {"dax0.1", "dax0.2", "dax0.3"}
        assert kernel_devices(kernel) == before  # nothing destroyed or emptied
        assert "regions.carved_by_hand region=dax0" in caplog.text
    finally:
        daemon.close()
