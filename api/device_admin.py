"""What the API asks of the daemon to change devices in the kernel: the `DeviceAdmin` Protocol.

The daemon (poold.daemon.devices) implements it and puts it on `app.state.device_admin`; the API
reaches sysfs only through it, so an app built without a daemon (tests of other routes) has no
device administration. Every
DeviceAdmin method takes the acting principal's name for the audit log; all raise PooldError
subclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from poold.ledger.views import DeviceView

Mode = Literal["devdax", "system-ram"]


@dataclass(frozen=True, slots=True)
class DeviceOutcome:
    """What an operation did: the device as the ledger has it now (after destroy: missing;
    None when the ledger never had it) and as the kernel shows it (daxctl's keys; None when the
    kernel has no such device any more)."""

    operation: str
    devname: str
    device: DeviceView | None
    kernel: dict[str, Any] | None
    online_blocks: list[int] = field(default_factory=list)
    offline_blocks: list[int] = field(default_factory=list)


class DeviceAdmin(Protocol):
    def create(self, region: int, size: int, align: int | None, actor: str) -> DeviceOutcome:
        """A new dax device in a dynamic region, leasable at once."""

    def destroy(self, devname: str, actor: str) -> DeviceOutcome:
        """Unbind, shrink to 0 and delete; refused while it holds live leases."""

    def resize(self, devname: str, size: int, actor: str) -> DeviceOutcome:
        """Grow or shrink; refused while it holds live leases."""

    def reconfigure(self, devname: str, mode: Mode, actor: str) -> DeviceOutcome:
        """To system-ram (kmem, memory online movable) or back to devdax."""

    def drain(self, devname: str, actor: str) -> DeviceOutcome:
        """No new leases; live ones run on."""

    def undrain(self, devname: str, actor: str) -> DeviceOutcome:
        """Leasable again."""
