"""Changing capacity at run time: the daemon's side of the admin device operations.

Owns the order of each operation (hold the device in the ledger writer, change the kernel through
drivers.daxctl, release its idle claims, reconcile the inventory and record the change in one
ledger transaction, let the hold go) and the translation of kernel refusals into poold's errors. A
refusal, before or after the hold, leaves the ledger as it was: the hold writes nothing. One
operation at a time, and no inventory rescan in the middle of one (they share `lock`), so a
half-done change is never reconciled.
Leaves alone: the sysfs writes themselves (drivers.daxctl) and what the ledger checks
(poold.ledger.devices).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

from api.device_admin import DeviceOutcome, Mode
from drivers import DriverFailure
from drivers.dax import DaxDevice
from drivers.daxctl import DaxControl
from drivers.errors import KernelRefused
from poold import errors
from poold.inventory import DeviceSpec
from poold.ledger import devices
from poold.ledger.devices import Held
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.types import EventKind

log = logging.getLogger(__name__)

# The kernel's answer -> poold's error class (and so the HTTP status).
_BY_ERRNO: dict[int, type[errors.PooldError]] = {
    errno.EBUSY: errors.DeviceBusy,
    errno.ENOSPC: errors.RegionFull,
    errno.EINVAL: errors.InvalidRequest,
    errno.EOPNOTSUPP: errors.InvalidRequest,
    errno.ENXIO: errors.InvalidRequest,
    errno.ENODEV: errors.UnknownDevice,
}


def translate(exc: DriverFailure) -> errors.PooldError:
    code = exc.errno if isinstance(exc, KernelRefused) else None
    cls = _BY_ERRNO.get(code, errors.DriverError) if code is not None else errors.DriverError
    return cls(str(exc))


class DeviceOps:
    """Implements api.device_admin.DeviceAdmin for this host."""

    def __init__(self, ledger: Ledger, dax: DaxControl, discover: Callable[[], list[DeviceSpec]],
                 reconcile: Callable[[Tx, list[DeviceSpec]], None],
                 lock: threading.Lock) -> None:
        self.ledger = ledger
        self.dax = dax
        self._discover = discover
        self._reconcile = reconcile
        self.lock = lock
        # Regions poold carves per lease (poold.daemon.regions): no admin changes their devices.
        self.per_lease: set[int] = set()

    def _by_hand(self, region: int) -> None:
        if region in self.per_lease:
            raise errors.DeviceBusy(f"region dax{region} is carved per lease by poold: list it "
                                    "in manual_regions to change its devices by hand")

    def create(self, region: int, size: int, align: int | None, actor: str) -> DeviceOutcome:
        with self.lock:
            self._by_hand(region)
            device = self.create_held(region, size, align, actor)
            return self._outcome("create", device.chardev)

    def create_held(self, region: int, size: int, align: int | None, actor: str,
                    placing: dict[str, str] | None = None, **details: Any) -> DaxDevice:
        """`create` for a caller that holds `lock`. `placing` (devname -> pool) is filled with
        the new device's name while the ledger takes it in, for the reconcile to place it."""
        try:
            device = self.dax.create_device(region, size, align)
        except DriverFailure as exc:
            raise translate(exc) from exc
        held = Held(device.chardev, None, "create")
        if placing is not None and "pool" in details:
            placing[device.chardev] = details["pool"]
        try:
            self._finish(held, EventKind.DEVICE_CREATED, actor, region=region, size=device.size,
                         align=device.align, **details)
        finally:
            if placing is not None:
                placing.pop(device.chardev, None)
        log.info("device.created dev=%s region=%s size=%s actor=%s", device.chardev, region,
                 device.size, actor)
        return device

    def destroy(self, devname: str, actor: str) -> DeviceOutcome:
        with self.lock:
            self.destroy_held(devname, actor)
            return self._outcome("destroy", devname)

    def destroy_held(self, devname: str, actor: str, **details: Any) -> None:
        """`destroy` for a caller that holds `lock`."""
        self._change_held(devname, actor, "destroy", EventKind.DEVICE_DESTROYED,
                          lambda: self.dax.check_destroy(devname),
                          lambda: self.dax.destroy_device(devname), **details)

    def resize(self, devname: str, size: int, actor: str) -> DeviceOutcome:
        return self._change(devname, actor, "resize", EventKind.DEVICE_RESIZED,
                            lambda: self.dax.check_resize(devname, size),
                            lambda: self.dax.resize_device(devname, size), size=size)

    def reconfigure(self, devname: str, mode: Mode, actor: str) -> DeviceOutcome:
        change = self.dax.to_system_ram if mode == "system-ram" else self.dax.to_devdax
        return self._change(devname, actor, "reconfigure", EventKind.DEVICE_RECONFIGURED,
                            lambda: self.dax.check_reconfigure(devname, mode),
                            lambda: change(devname), mode=mode)

    def drain(self, devname: str, actor: str) -> DeviceOutcome:
        self.ledger.run(partial(devices.drain, devname=devname, actor=actor))
        return self._outcome("drain", devname)

    def undrain(self, devname: str, actor: str) -> DeviceOutcome:
        self.ledger.run(partial(devices.undrain, devname=devname, actor=actor))
        return self._outcome("undrain", devname)

    # ------------------------------------------------------------------ steps

    def _change(self, devname: str, actor: str, operation: str, kind: EventKind,
                check: Callable[[], object], action: Callable[[], object], **details: Any
                ) -> DeviceOutcome:
        """Check what the kernel would refuse, hold the device in the ledger (no live lease),
        change the kernel, then reconcile and record; on a kernel failure give the hold back."""
        with self.lock:
            self._change_held(devname, actor, operation, kind, check, action, **details)
            return self._outcome(operation, devname)

    def _change_held(self, devname: str, actor: str, operation: str, kind: EventKind,
                     check: Callable[[], object], action: Callable[[], object], **details: Any
                     ) -> None:
        region = devname.removeprefix("dax").partition(".")[0]
        if region.isdigit():
            self._by_hand(int(region))
        try:
            check()
        except DriverFailure as exc:
            raise translate(exc) from exc
        held = self.ledger.run(partial(devices.hold, devname=devname, actor=actor,
                                       operation=operation))
        # Let the hold go however this ends. Once the kernel changed, a ledger that failed to
        # record it learns it from the rescan the kernel's own uevents trigger.
        try:
            try:
                action()
            except DriverFailure as exc:
                log.warning("device.%s_refused dev=%s error=%s", operation, devname, exc)
                raise translate(exc) from exc
            self._finish(held, kind, actor, **details)
        finally:
            devices.give_back(self.ledger.writer.held_devices, held)
        log.info("device.%s dev=%s actor=%s %s", operation, devname, actor, details)

    def _finish(self, held: Held, kind: EventKind, actor: str, **details: Any) -> None:
        """Release the device's idle claims, reconcile with what the kernel shows now and record
        the change, in one transaction."""
        try:
            specs = self._discover()
        except DriverFailure as exc:
            raise translate(exc) from exc

        def command(tx: Tx) -> None:
            devices.release_claims(tx, held, actor)
            self._reconcile(tx, specs)
            devices.finish(tx, held, kind, actor, **details)

        self.ledger.run(command)

    def _outcome(self, operation: str, devname: str) -> DeviceOutcome:
        view = self.ledger.read(lambda s, now: devices.view(s, now, self.ledger.host_id, devname))
        try:
            now = self.dax.reconfigured(devname)
        except KernelRefused as exc:
            if exc.errno != errno.ENODEV:
                raise translate(exc) from exc
            return DeviceOutcome(operation, devname, view, None)
        return DeviceOutcome(operation, devname, view, _daxctl_keys(now.device),
                             list(now.online_blocks), list(now.offline_blocks))


def _daxctl_keys(device: DaxDevice) -> dict[str, Any]:
    values = {
        "chardev": device.chardev, "size": device.size, "target_node": device.target_node,
        "align": device.align, "mode": device.mode, "state": device.state,
        "online_memblocks": device.online_memblocks, "total_memblocks": device.total_memblocks,
        "movable": device.movable,
        "mappings": [asdict(m) | {"size": m.size} for m in device.mappings] or None,
    }
    return {k: v for k, v in values.items() if v is not None}
