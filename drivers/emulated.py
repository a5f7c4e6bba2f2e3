"""Emulated memory device: capacity that leases are carved from on machines without CXL.

It has no memory of its own: each lease on it is a sealed memfd of the daemon's
(poold.daemon.leasemem, made with drivers.memfd), so what a holder maps is its lease and
nothing else. The device is the capacity the ledger accounts (size, align) and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

from drivers.errors import DriverFailure


@dataclass(frozen=True, slots=True)
class EmulatedDevice:
    devname: str
    key: str  # what names this device's memory on its host: the daemon's state directory
    size: int
    align: int

    @property
    def chardev(self) -> str:
        """Not a file: each lease's memory is a memfd of its own."""
        return f"memfd:{self.devname}"


def emulated_device(devname: str, key: str, size: int, align: int) -> EmulatedDevice:
    if align <= 0 or align & (align - 1):
        raise DriverFailure(key, f"align {align} is not a power of two")
    if size <= 0 or size % align:
        raise DriverFailure(key, f"size {size} is not a positive multiple of align {align}")
    return EmulatedDevice(devname=devname, key=key, size=size, align=align)
