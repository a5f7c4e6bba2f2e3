"""DeviceSpec: what the ledger needs to know about one leasable device, from any driver."""

from __future__ import annotations

from dataclasses import dataclass

from drivers.emulated import EmulatedDevice
from poold.types import DeviceKind


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    uid: str  # stable identity across restarts and hosts (serial, path, or configured)
    kind: DeviceKind
    devname: str
    chardev: str  # what a client opens and maps
    size: int
    align: int
    numa_node: int | None = None


def spec_from_emulated(device: EmulatedDevice) -> DeviceSpec:
    return DeviceSpec(
        uid=f"emulated:{device.path}",
        kind=DeviceKind.EMULATED,
        devname=device.devname,
        chardev=str(device.path),
        size=device.size,
        align=device.align,
    )
