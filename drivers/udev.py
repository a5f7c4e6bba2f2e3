"""udev events, behind a typed seam: the daemon sees only "something changed in subsystem X".

pyudev is untyped; it is confined to this module. Tests hand the daemon a fake monitor instead.
sysfs stays the source of truth: an event only tells the daemon to look again.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

# The subsystems whose changes can add, remove or reshape leasable memory.
WATCHED_SUBSYSTEMS = ("cxl", "dax", "nd", "memory")


class UdevMonitor(Protocol):
    def poll(self, timeout_s: float) -> str | None:
        """The subsystem of the next event, or None when `timeout_s` passed without one."""
        ...


class PyudevMonitor:
    def __init__(self, subsystems: tuple[str, ...] = WATCHED_SUBSYSTEMS) -> None:
        import pyudev

        context: Any = pyudev.Context()
        # Without a running udevd (minimal hosts, containers, test guests) no "udev" events are
        # ever sent; the kernel's own uevents still are, and they carry the subsystem too.
        source = "udev" if os.path.exists("/run/udev/control") else "kernel"
        self._monitor: Any = pyudev.Monitor.from_netlink(context, source=source)
        for subsystem in subsystems:
            self._monitor.filter_by(subsystem)
        self._monitor.start()

    def poll(self, timeout_s: float) -> str | None:
        device = self._monitor.poll(timeout=timeout_s)
        return None if device is None else str(device.subsystem)


def open_monitor() -> UdevMonitor | None:
    """A live udev monitor, or None where netlink is not available (containers, no udev)."""
    try:
        return PyudevMonitor()
    except Exception:
        return None
