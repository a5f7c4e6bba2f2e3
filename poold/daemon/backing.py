"""What a lease is made of, by its device's kind: the one place the API (grants, map paths)
and fd.sock (descriptors) ask.

- devdax: the device's chardev at the lease's offset (nothing to make);
- emulated, system-ram: a memfd of the lease's own (poold.daemon.leasemem), at offset 0;
- a region carved per lease: a dax device of the lease's own (poold.daemon.regions), at 0.
"""

from __future__ import annotations

import os

from poold import errors
from poold.daemon.leasemem import LeaseMemory
from poold.daemon.regions import RegionLeases
from poold.ledger.views import LeaseView
from poold.types import DeviceKind


class LeaseBacking:
    """Implements api.lease_backing.LeaseBacking."""

    def __init__(self, memory: LeaseMemory, regions: RegionLeases | None = None) -> None:
        self.memory = memory
        self.regions = regions

    def make(self, view: LeaseView) -> None:
        if view.kind == DeviceKind.EMULATED:
            self.memory.create(view.id, view.length)
        elif view.kind == DeviceKind.DAX_REGION:
            if self.regions is None:
                raise errors.InvalidRequest(f"lease {view.id} is on region {view.device}, "
                                            "which this daemon does not carve")
            self.regions.make(view)

    def where(self, view: LeaseView) -> str | None:
        if view.kind == DeviceKind.DAX_REGION:
            devname = self.regions.device_of(view.id) if self.regions is not None else None
            return None if devname is None else f"/dev/{devname}"
        return self.memory.where(view.id)

    def open(self, lease: LeaseView, node: int | None) -> tuple[int, int]:
        """A descriptor of the lease's memory for its holder (the caller closes it), and where
        the lease starts in it."""
        kind = DeviceKind(lease.kind)
        if kind in (DeviceKind.SYSTEM_RAM, DeviceKind.EMULATED):
            return self.memory.open(lease.id, kind, node, lease.length), 0
        if kind == DeviceKind.DAX_REGION:
            path = self.where(lease)
            if path is None:
                raise errors.LeaseNotActive(f"lease {lease.id}: its dax device is gone")
            return _open(path), 0
        return _open(lease.chardev), lease.offset


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise errors.DriverError(f"{path}: {exc.strerror}") from exc
