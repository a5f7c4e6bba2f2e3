"""Device identity: the name under which the ledger knows a device, on every host that reaches it.

A CXL device reached by several hosts (multi-headed, or behind a switch) shows up on each with its
own PCI address and at its own host physical address; the identity must not depend on either, or
the hosts would register one device twice and the same bytes could be granted twice. Built on the
recorded tree of a real kernel, with a second host's view derived from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from drivers.topology import Topology, scan
from poold.inventory.specs import specs_from_topology
from tests.sysfs_trees import extract

HPA_SHIFT = 0x40_0000_0000  # where the second host's address map puts the same region


@pytest.fixture(scope="module")
def cxl_host(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return scan(extract("sysfs-b-cxl1-region-devdax", tmp_path_factory.mktemp("t")) / "sys")


def other_host(topology: Topology, *, dpa_shift: int = 0) -> Topology:
    """The same memory seen from another host: another PCI address for the memdev, the region
    and its dax devices at other host physical addresses (and, with dpa_shift, the region made
    from another part of the memdev)."""
    cxl = topology.cxl
    memdevs = tuple(replace(m, host="0000:e1:00.0") for m in cxl.memdevs)
    regions = tuple(replace(r, resource=None if r.resource is None else r.resource + HPA_SHIFT)
                    for r in cxl.regions)
    decoders = tuple(replace(d, resource=None if d.resource is None else d.resource + HPA_SHIFT,
                             dpa_resource=None if d.dpa_resource is None
                             else d.dpa_resource + dpa_shift) for d in cxl.decoders)
    dax_regions = tuple(replace(region, devices=tuple(
        replace(dev, resource=None if dev.resource is None else dev.resource + HPA_SHIFT,
                mappings=tuple(replace(m, start=m.start + HPA_SHIFT, end=m.end + HPA_SHIFT)
                               for m in dev.mappings))
        for dev in region.devices)) for region in topology.dax_regions)
    return replace(topology, cxl=replace(cxl, memdevs=memdevs, regions=regions,
                                         decoders=decoders), dax_regions=dax_regions)


def uids(topology: Topology) -> list[str]:
    return [spec.uid for spec in specs_from_topology(topology)]


def test_a_cxl_device_is_named_by_serial_and_device_address(cxl_host: Topology) -> None:
    (memdev,) = cxl_host.cxl.memdevs
    (uid,) = uids(cxl_host)
    assert uid.startswith(f"cxl:{memdev.serial:#x}/0x")
    assert memdev.host not in uid  # the PCI address is this host's name for it


def test_two_hosts_reaching_one_device_name_it_alike(cxl_host: Topology) -> None:
    assert uids(other_host(cxl_host)) == uids(cxl_host)
    # ...and the name is not the physical address either host sees.
    (device,) = (d for r in cxl_host.dax_regions for d in r.devices if d.size)
    assert f"{device.mappings[0].start:#x}" not in uids(cxl_host)[0]


def test_another_part_of_the_device_is_another_device(cxl_host: Topology) -> None:
    assert uids(other_host(cxl_host, dpa_shift=0x1000_0000)) != uids(cxl_host)


def test_serials_that_are_not_unique_fall_back_to_a_name_of_this_host(
        cxl_host: Topology) -> None:
    (memdev,) = cxl_host.cxl.memdevs
    twin = replace(memdev, memdev="mem1", host="0000:0e:00.0", endpoint=None)
    doubled = replace(cxl_host, cxl=replace(cxl_host.cxl, memdevs=(memdev, twin)))
    (uid,) = uids(doubled)
    assert uid.startswith("dax:") and uid != uids(cxl_host)[0]
    # Seen from another host, such a device is not taken for the same one.
    assert uids(other_host(doubled)) != [uid]


def test_devices_no_other_host_reaches_keep_a_host_local_name(tmp_path: Path) -> None:
    hmem = scan(extract("sysfs-d-hmem-subdivided", tmp_path) / "sys")
    names = uids(hmem)
    assert names and all(name.startswith("dax:/platform/hmem.0:0x") for name in names)
    assert len(set(names)) == len(names)
