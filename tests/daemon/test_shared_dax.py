"""A CXL dax device that several hosts reach is one ledger device when `shared_devices` names it:
two daemons over the recorded tree of a real kernel (each as its own host, one ledger) register
it once, owned by no host, and lease disjoint extents of it through their claims. Without the
setting the first host to register it keeps it; hmem devices, which no other host reaches, are
each host's own even where identical machines name them alike. (How two hosts come to name one
device alike: tests/inventory/test_identity.py.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest

from poold.config import Settings
from poold.daemon import Daemon
from poold.errors import LeaseTooLarge
from poold.ledger import leases, reads
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.types import MiB
from tests.sysfs_trees import extract


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return extract("sysfs-b-cxl1-region-devdax", tmp_path) / "sys"


@contextmanager
def hosts(tmp_path: Path, tree: Path, ledger_url: str, shared: list[str]
          ) -> Iterator[list[Daemon]]:
    with ExitStack() as stack:
        daemons = []
        for name in ("host-a", "host-b"):
            # The tree has no /dev/dax0.0 to zero, so the pool does not scrub here.
            daemon = Daemon(Settings(
                state_dir=tmp_path / name, database_url=ledger_url, host_id=name,
                sysfs_root=tree, watch_udev=False, shared_devices=shared,
                unscrubbed_pools=["default"], claim_slice=32 * MiB))
            stack.callback(daemon.close)
            daemons.append(daemon)
        yield daemons


def grant(daemon: Daemon, size: int) -> leases.LeaseView:
    request = GrantRequest(size=size, actor="test", ttl_s=600)
    return daemon.ledger.run(partial(leases.grant, request=request))


def test_a_shared_cxl_device_is_one_ledger_device_both_hosts_lease_from(
        tmp_path: Path, tree: Path, ledger_url: str) -> None:
    with hosts(tmp_path, tree, ledger_url, shared=["cxl:*"]) as (a, b):
        (device,) = a.ledger.read(reads.devices)
        assert device.uid.startswith("cxl:") and device.host is None
        x, y = grant(a, 64 * MiB), grant(b, 64 * MiB)
        assert x.device_id == y.device_id == device.id
        assert x.offset + x.length <= y.offset or y.offset + y.length <= x.offset
        assert a.ledger.read(fsck).violations == []


def test_hosts_that_do_not_agree_to_share_it_do_not_both_get_it(
        tmp_path: Path, tree: Path, ledger_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), \
            hosts(tmp_path, tree, ledger_url, shared=[]) as (a, b):
        (device,) = a.ledger.read(reads.devices)
        assert device.host == "host-a"  # the first to register it; the same bytes, not twice
        assert "inventory.device_conflict" in caplog.text
        with pytest.raises(LeaseTooLarge):  # host-b has no device to grant from
            grant(b, 64 * MiB)
        grant(a, 64 * MiB)


def test_identical_machines_keep_their_own_local_devices(tmp_path: Path,
                                                        ledger_url: str) -> None:
    """hmem devices are named by kernel path and physical address, which identical machines
    share; each host's are its own memory all the same."""
    hmem = extract("sysfs-d-hmem-subdivided", tmp_path) / "sys"
    with hosts(tmp_path, hmem, ledger_url, shared=[]) as (a, b):
        devices = a.ledger.read(reads.devices)
        by_host = {h: sorted(d.devname for d in devices if d.host == h)
                   for h in ("host-a", "host-b")}
        assert by_host == {"host-a": ["dax0.1", "dax0.2", "dax0.3"],
                           "host-b": ["dax0.1", "dax0.2", "dax0.3"]}
        x, y = grant(a, 64 * MiB), grant(b, 64 * MiB)
        assert x.device_id != y.device_id
        assert a.ledger.read(fsck).violations == []
