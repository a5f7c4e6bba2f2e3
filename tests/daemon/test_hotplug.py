"""Hotplug: a fake udev monitor drives the daemon's watcher while the sysfs tree under it is
swapped between recorded real-kernel states; the ledger and its events follow."""

from __future__ import annotations

import queue
import shutil
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon.hotplug import HotplugWatcher
from poold.ledger import leases, reads
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.types import LeaseState, MiB
from tests.sysfs_trees import extract


class FakeMonitor:
    """Stands in for pyudev at the drivers.udev seam."""

    def __init__(self) -> None:
        self.events: queue.Queue[str] = queue.Queue()

    def poll(self, timeout_s: float) -> str | None:
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None


class Machine:
    """A sysfs root that is a symlink, so a test can swap the whole tree at once."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "sysfs"

    def show(self, tree: str) -> None:
        target = extract(tree, self.base / "trees") / "sys"
        tmp = self.base / "sysfs.new"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(self.root)


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


@pytest.fixture
def daemon(tmp_path: Path, machine: Machine, ledger_url: str) -> Iterator[Daemon]:
    machine.show("sysfs-a-cxl1-before-region")
    settings = Settings(state_dir=tmp_path / "state", database_url=ledger_url,
                        host_id="hotplug-host", sysfs_root=machine.root, watch_udev=False)
    daemon = Daemon(settings, monitor=FakeMonitor())
    yield daemon
    daemon.close()


def wait_for_rescan(watcher: HotplugWatcher, done: int) -> None:
    deadline = time.monotonic() + 10
    while watcher.rescans < done:
        assert time.monotonic() < deadline, "no rescan after the udev events"
        time.sleep(0.02)


def devices(daemon: Daemon) -> dict[str, tuple[str, str, int]]:
    return {d.devname: (d.kind, d.state, d.size) for d in daemon.ledger.read(reads.devices)}


def event_kinds(daemon: Daemon) -> list[str]:
    return [e.kind for e in daemon.ledger.read(lambda s, _now: reads.events(s, limit=1000))]


def grant(daemon: Daemon, device: str) -> str:
    request = GrantRequest(size=8 * MiB, actor="test", ttl_s=600, device=device)
    return daemon.ledger.run(partial(leases.grant, request=request)).id


def test_region_appears_then_vanishes_while_leased(daemon: Daemon, machine: Machine) -> None:
    assert devices(daemon) == {}
    monitor = FakeMonitor()
    watcher = HotplugWatcher(monitor, daemon.rescan, debounce_s=0.1)
    watcher.start()
    try:
        machine.show("sysfs-b-cxl1-region-devdax")  # cxl create-region + ndctl create-namespace
        for subsystem in ("cxl", "nd", "dax", "dax"):
            monitor.events.put(subsystem)
        wait_for_rescan(watcher, 1)
        assert devices(daemon) == {"dax0.0": ("devdax", "online", 266338304)}
        lease_id = grant(daemon, "dax0.0")

        machine.show("sysfs-a-cxl1-before-region")  # the region is destroyed under the lease
        monitor.events.put("dax")
        wait_for_rescan(watcher, 2)
    finally:
        watcher.stop()
    assert devices(daemon)["dax0.0"][1] == "missing"
    lease = daemon.ledger.read(lambda s, now: reads.lease(s, lease_id, now))
    assert lease.state is LeaseState.LOST
    kinds = event_kinds(daemon)
    assert {"device.added", "device.missing", "lease.lost"} <= set(kinds)
    assert daemon.ledger.read(fsck).clean


def test_device_onlined_as_system_ram_loses_its_leases(daemon: Daemon, machine: Machine) -> None:
    machine.show("sysfs-d-hmem-subdivided")
    daemon.rescan()
    assert devices(daemon) == {name: ("devdax", "online", 256 * MiB)
                               for name in ("dax0.1", "dax0.2", "dax0.3")}
    on_ram, elsewhere = grant(daemon, "dax0.1"), grant(daemon, "dax0.2")

    machine.show("sysfs-e-hmem-kmem")  # daxctl reconfigure-device dax0.1 -m system-ram
    daemon.rescan()
    assert devices(daemon)["dax0.1"] == ("system-ram", "online", 256 * MiB)
    states = {i: daemon.ledger.read(lambda s, now, i=i: reads.lease(s, i, now)).state
              for i in (on_ram, elsewhere)}
    assert states == {on_ram: LeaseState.LOST, elsewhere: LeaseState.ACTIVE}
    assert "device.changed" in event_kinds(daemon)
    # Leasable again, as NUMA node memory (a node-bound memfd handed out by the daemon).
    on_node = grant(daemon, "dax0.1")
    assert daemon.ledger.read(lambda s, now: reads.lease(s, on_node, now)).device == "dax0.1"
    assert daemon.ledger.read(fsck).clean


def test_rescans_are_idempotent(daemon: Daemon, machine: Machine) -> None:
    machine.show("sysfs-b-cxl1-region-devdax")
    daemon.rescan()
    before = len(event_kinds(daemon))
    daemon.rescan()
    daemon.rescan()
    assert len(event_kinds(daemon)) == before


def test_unreadable_tree_changes_nothing(daemon: Daemon, machine: Machine, tmp_path: Path
                                         ) -> None:
    machine.show("sysfs-b-cxl1-region-devdax")
    daemon.rescan()
    lease_id = grant(daemon, "dax0.0")
    size_attr = next((machine.root / "bus/dax/devices/dax0.0").resolve().glob("size"))
    broken = tmp_path / "broken"
    shutil.copytree(machine.root.resolve().parent, broken, symlinks=True)
    (broken / "sys" / size_attr.relative_to(machine.root.resolve())).write_text("garbage\n")
    machine.root.unlink()
    machine.root.symlink_to(broken / "sys")
    with pytest.raises(Exception, match="not an integer"):
        daemon.rescan()
    assert devices(daemon)["dax0.0"][1] == "online"
    assert daemon.ledger.read(lambda s, now: reads.lease(s, lease_id, now)).state \
        is LeaseState.ACTIVE


def test_devices_join_pools_by_rule(tmp_path: Path, machine: Machine) -> None:
    machine.show("sysfs-d-hmem-subdivided")
    settings = Settings(state_dir=tmp_path / "rules", host_id="rules-host",
                        sysfs_root=machine.root, watch_udev=False, emulate_size=4 * MiB,
                        device_pools={"dax0.[12]": "fast", "emu*": "demo"})
    daemon = Daemon(settings, monitor=FakeMonitor())
    try:
        placed = {d.devname: d.pool for d in daemon.ledger.read(reads.devices)}
        assert placed == {"dax0.1": "fast", "dax0.2": "fast", "dax0.3": "default",
                          "emu0": "demo"}
        assert {p.name for p in daemon.ledger.read(reads.pools)} == {"default", "fast", "demo"}
    finally:
        daemon.close()
