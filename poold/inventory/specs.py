"""DeviceSpec: what the ledger needs to know about one leasable device, from any driver."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from drivers.dax import chardev_path
from drivers.emulated import EmulatedDevice
from drivers.topology import Topology
from poold.inventory.discovery import backing, identity, is_global, region_identity
from poold.types import DeviceKind


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    uid: str  # stable identity across restarts and hosts (serial, path, or configured)
    kind: DeviceKind
    devname: str
    chardev: str  # what a client opens and maps (devdax); memfd:<devname> for emulated
    size: int
    align: int
    numa_node: int | None = None
    # Reachable from several hosts: one ledger device, owned by no host, shared through claims.
    shared: bool = False
    # The uid names this memory on this host only (a kernel path and physical address, a local
    # file): another host may give its own, different memory the same uid.
    host_local: bool = False


def spec_from_emulated(device: EmulatedDevice) -> DeviceSpec:
    return DeviceSpec(
        uid=f"emulated:{device.key}/{device.devname}",
        kind=DeviceKind.EMULATED,
        devname=device.devname,
        chardev=device.chardev,
        size=device.size,
        align=device.align,
        host_local=True,
    )


def specs_from_topology(topology: Topology, per_lease: Collection[int] = ()
                        ) -> list[DeviceSpec]:
    """Every enabled dax device with memory: devdax ones are leased by mapping their chardev;
    system-ram ones are tracked (same identity) so a mode change is seen as a change, not as a
    device vanishing and another appearing. A dynamic region in `per_lease` (region ids) is one
    device instead, `daxN`, of the region's size: each of its leases gets a dax device of its
    own (poold.daemon.regions), which is no device of the ledger's."""
    specs = []
    for region in topology.dax_regions:
        back = backing(topology, region)
        if region.id in per_lease:
            uid = region_identity(region, back)
            node = next((d.target_node for d in region.devices if d.target_node is not None),
                        None)
            specs.append(DeviceSpec(
                uid=uid, kind=DeviceKind.DAX_REGION, devname=f"dax{region.id}",
                chardev=f"/dev/dax{region.id}.*", size=region.size,
                align=region.align or 2 * 2**20, numa_node=node, host_local=not is_global(uid)))
            continue
        for device in region.devices:
            if not device.enabled or device.size == 0:
                continue
            kind = DeviceKind.SYSTEM_RAM if device.mode == "system-ram" else DeviceKind.DEVDAX
            uid = identity(region, device, back)
            specs.append(DeviceSpec(
                uid=uid, kind=kind, devname=device.chardev, host_local=not is_global(uid),
                chardev=chardev_path(device), size=device.size,
                align=device.align or region.align or 4096, numa_node=device.target_node,
            ))
    return specs
