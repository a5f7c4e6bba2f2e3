"""Changing dax devices through sysfs, as `daxctl` does, without running daxctl.

Owns the write side of the dax bus: create, resize and destroy devices in a dynamic (hmem) dax
region, bind and unbind them, and hand them to kmem as system-ram (memory blocks onlined movable)
and back. Leaves alone: whether a change is allowed by poold (leases, drain: poold.daemon) and how
sysfs is read (drivers.dax, drivers.numa).

Rules, after libdaxctl: every write is one write(2) of one attribute through `Sysfs.write`, and is
re-read to confirm; what the kernel would refuse (size above available_size, a misaligned size,
deleting a region's first device, resizing a device whose memory is online) is refused before the
first write, so a refusal leaves sysfs as it was; a failure half-way is rolled back as far as the
kernel lets. Every failure is a KernelRefused naming the device and the errno.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from drivers.dax import DaxDevice, DaxRegion, scan_dax
from drivers.errors import DriverFailure, KernelRefused
from drivers.numa import MemoryBlock, scan_memory_blocks
from drivers.sysfs import Sysfs, link_name, read_int, read_text

log = logging.getLogger(__name__)

DEVICE_DAX = "device_dax"
KMEM = "kmem"
# The alignments device_dax accepts (x86-64: base page, PMD, PUD).
VALID_ALIGNS = (4096, 2 << 20, 1 << 30)


@dataclass(frozen=True, slots=True)
class Reconfigured:
    """A mode change: the device as it is now, and its memory blocks (system-ram) by state."""

    device: DaxDevice
    online_blocks: tuple[int, ...]
    offline_blocks: tuple[int, ...]


class DaxControl:
    """Write access to the dax bus under one sysfs root."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs

    # ------------------------------------------------------------------ reads

    def regions(self) -> list[DaxRegion]:
        blocks, block_size = scan_memory_blocks(self.sysfs)
        return scan_dax(self.sysfs, blocks, block_size)

    def region(self, region_id: int) -> DaxRegion:
        found = next((r for r in self.regions() if r.id == region_id), None)
        if found is None:
            raise KernelRefused(f"region{region_id}", str(self.sysfs.path("bus", "dax")),
                                errno.ENODEV, "no such dax region")
        return found

    def device(self, name: str) -> tuple[DaxRegion, DaxDevice]:
        for region in self.regions():
            for device in region.devices:
                if device.chardev == name:
                    return region, device
        raise KernelRefused(name, str(self._device_path(name)), errno.ENODEV,
                            "no such dax device")

    def memory_blocks(self, device: DaxDevice) -> list[MemoryBlock]:
        """The memory blocks wholly inside the device's ranges that exist now (kmem adds only
        block-aligned memory; they exist while kmem holds the device)."""
        blocks, block_size = scan_memory_blocks(self.sysfs)
        if not block_size:
            return []
        ids = [i for m in device.mappings
               for i in range(-(-m.start // block_size), (m.end + 1) // block_size)]
        return [blocks[i] for i in ids if i in blocks]

    # ------------------------------------------------------------------ checks (no writes)
    # What the kernel would refuse, refused before anything changes; the operations run these
    # first too, and callers (the daemon) run them before holding the device in the ledger.

    def check_resize(self, name: str, size: int) -> DaxDevice:
        region, device = self.device(name)
        self._dynamic(region, name)
        self._not_system_ram(device)
        self._check_size(name, size, device.align or region.align or VALID_ALIGNS[0],
                         allow_zero=True)
        available = region.available_size or 0
        if size > device.size + available:
            self._refuse(name, region, errno.ENOSPC,
                         f"growing to {size} bytes needs {size - device.size} more, the region "
                         f"has {available} available")
        return device

    def check_destroy(self, name: str) -> tuple[DaxRegion, DaxDevice]:
        region, device = self.device(name)
        self._dynamic(region, name)
        self._not_system_ram(device)
        if name.endswith(".0"):
            self._refuse(name, region, errno.EBUSY,
                         "the region's first device cannot be deleted, only shrunk to size 0")
        return region, device

    def check_reconfigure(self, name: str, mode: str) -> DaxDevice:
        region, device = self.device(name)
        if mode == "system-ram" and device.driver != KMEM and not device.size:
            self._refuse(name, region, errno.EINVAL, "size 0: no memory to online")
        if mode not in ("system-ram", "devdax"):
            self._refuse(name, region, errno.EINVAL, f"unknown mode {mode!r}")
        return device

    # ------------------------------------------------------------------ create, resize, destroy

    def create_device(self, region_id: int, size: int, align: int | None = None) -> DaxDevice:
        """A new device of `size` bytes in a dynamic region, bound to device_dax."""
        region = self.region(region_id)
        name = f"region{region_id}"
        self._dynamic(region, name)
        align = align or region.align or VALID_ALIGNS[1]
        self._check_size(name, size, align, allow_zero=False)
        available = region.available_size or 0
        if size > available:
            self._refuse(name, region, errno.ENOSPC,
                         f"{size} bytes asked, the region has {available} available")
        return self._new_bound_device(region, align, lambda created: self._set(
            created, self._device_path(created) / "size", size))

    def create_device_at(self, region_id: int, start: int, size: int, align: int) -> DaxDevice:
        """A new device of exactly [start, start + size) of a dynamic region's physical range
        (its `mapping` attribute, as `daxctl create-device --input` restores a device), bound to
        device_dax. Refused, with nothing changed, when the range is not aligned or not inside
        the region; the kernel refuses a range another device holds."""
        region = self.region(region_id)
        name = f"region{region_id}"
        self._dynamic(region, name)
        self._check_size(name, size, align, allow_zero=False)
        if (region.start is None or start % align or start < region.start
                or start + size > region.start + region.size):
            self._refuse(name, region, errno.EINVAL,
                         f"[{start:#x}, +{size:#x}) is not an aligned range of the region "
                         f"({region.start}, +{region.size:#x})")

        def give_range(created: str) -> None:
            # Hex, end inclusive: what the kernel's range_parse reads.
            path = self._device_path(created) / "mapping"
            self._write(created, path, f"{start:x}-{start + size - 1:x}")
            device = self.device(created)[1]
            got = [(m.start, m.end) for m in device.mappings]
            if got != [(start, start + size - 1)] or device.size != size:
                raise KernelRefused(created, str(path), errno.EIO,
                                    f"maps {got} after mapping [{start:#x}, +{size:#x})")

        return self._new_bound_device(region, align, give_range)

    def _new_bound_device(self, region: DaxRegion, align: int,
                          give_memory: Callable[[str], None]) -> DaxDevice:
        """`create` a device in the region, set its align, give it memory (a size, a range),
        bind it to device_dax; undone as far as the kernel lets when a step fails."""
        before = {d.chardev for d in region.devices}
        self._write(f"region{region.id}", self._region_path(region) / "create", "1")
        created = self._new_device(region, before)
        try:
            if self.device(created)[1].align != align:
                self._set(created, self._device_path(created) / "align", align)
            give_memory(created)
            self._bind(created, DEVICE_DAX)
        except DriverFailure:
            self._undo_create(region, created)
            raise
        return self.device(created)[1]

    def resize_device(self, name: str, size: int) -> DaxDevice:
        """Grow or shrink a device of a dynamic region; it is unbound while its size changes and
        bound again when it has memory."""
        device = self.check_resize(name, size)
        if size == device.size:
            return device
        was_bound = device.driver == DEVICE_DAX
        if was_bound:
            self._unbind(name, DEVICE_DAX)
        try:
            self._set(name, self._device_path(name) / "size", size)
            if size:
                self._bind(name, DEVICE_DAX)
        except DriverFailure:
            self._restore(name, device.size, was_bound)
            raise
        return self.device(name)[1]

    def destroy_device(self, name: str) -> None:
        """Unbind, shrink to 0 and delete a device of a dynamic region. The region's first
        device (daxN.0) cannot be deleted by the kernel: shrink it with resize_device(name, 0)."""
        region, device = self.check_destroy(name)
        was_bound = device.driver is not None
        if was_bound:
            self._unbind(name, device.driver or DEVICE_DAX)
        try:
            if device.size:
                self._set(name, self._device_path(name) / "size", 0)
            self._write(name, self._region_path(region) / "delete", name)
        except DriverFailure:
            self._restore(name, device.size, was_bound)
            raise
        if self._device_path(name).exists():
            raise KernelRefused(name, str(self._region_path(region) / "delete"), errno.EIO,
                                "still present after delete")

    # ------------------------------------------------------------------ system-ram and back

    def to_system_ram(self, name: str) -> Reconfigured:
        """Hand the device to kmem and online its memory blocks movable: a NUMA node appears."""
        device = self.check_reconfigure(name, "system-ram")
        if device.driver == KMEM:
            return self.reconfigured(name)
        if device.driver is not None:
            self._unbind(name, device.driver)
        try:
            self._write(name, self.sysfs.path("bus", "dax", "drivers", KMEM, "new_id"), name)
            if link_name(self._device_path(name) / "driver") != KMEM:
                self._bind(name, KMEM)
            self._confirm_driver(name, KMEM)
            self._online(name, [b for b in self.memory_blocks(self.device(name)[1])
                                if b.state != "online"])
        except DriverFailure:
            self._back_to_devdax(name, strict=False)
            raise
        return self.reconfigured(name)

    def to_devdax(self, name: str) -> Reconfigured:
        """Offline the device's memory blocks, take it from kmem and bind device_dax again.
        Blocks that will not offline (unmovable pages) are named, and the device stays
        system-ram with every block online."""
        _region, device = self.device(name)
        if device.driver != KMEM:
            if device.driver is None and device.size:
                self._bind(name, DEVICE_DAX)
            return self.reconfigured(name)
        self._back_to_devdax(name, strict=True)
        return self.reconfigured(name)

    def _back_to_devdax(self, name: str, *, strict: bool) -> None:
        _region, device = self.device(name)
        if device.driver == KMEM:
            blocks = [b for b in self.memory_blocks(device) if b.state != "offline"]
            done, stuck = self._offline(name, blocks)
            if stuck:
                self._online(name, done, as_before=True)  # as it was: all online, same zones
                ids = ", ".join(f"memory{b.id} ({errno.errorcode.get(code, code)})"
                                for b, code in stuck)
                raise KernelRefused(name, str(self._blocks_dir()), stuck[0][1],
                                    f"memory blocks would not offline: {ids}")
            self._unbind(name, KMEM)
        kmem = self.sysfs.path("bus", "dax", "drivers", KMEM)
        try:
            self._write(name, kmem / "remove_id", name)
        except KernelRefused as exc:  # not on the list (bound by hand): nothing to take off
            log.debug("daxctl.remove_id_skipped dev=%s errno=%s", name, exc.errno)
        try:
            self._bind(name, DEVICE_DAX)
        except DriverFailure:
            if strict:
                raise
            log.exception("daxctl.rollback_failed dev=%s", name)

    def _online(self, name: str, blocks: list[MemoryBlock], *, as_before: bool = False) -> None:
        """Online movable; `as_before`: back into the zone each was in (an operator may have
        onlined some as kernel memory), when undoing a partial offline."""
        for block in blocks:
            path = self._blocks_dir() / f"memory{block.id}" / "state"
            how = ("online_kernel" if as_before and block.zone == "Normal"
                   else "online_movable")
            self._write(f"{name}/memory{block.id}", path, how)
            if read_text(path) != "online":
                raise KernelRefused(f"{name}/memory{block.id}", str(path), errno.EIO,
                                    f"reads {read_text(path)!r} after {how}")

    def _offline(self, name: str, blocks: list[MemoryBlock]
                 ) -> tuple[list[MemoryBlock], list[tuple[MemoryBlock, int]]]:
        """Offline each block: (those that went offline, those that would not with the kernel's
        errno, EBUSY when the write passed but the block reads otherwise)."""
        done: list[MemoryBlock] = []
        stuck: list[tuple[MemoryBlock, int]] = []
        for block in blocks:
            path = self._blocks_dir() / f"memory{block.id}" / "state"
            try:
                self._write(f"{name}/memory{block.id}", path, "offline")
            except KernelRefused as exc:
                stuck.append((block, exc.errno))
                continue
            if read_text(path) == "offline":
                done.append(block)
            else:
                stuck.append((block, errno.EBUSY))
        return done, stuck

    def reconfigured(self, name: str) -> Reconfigured:
        """The device now, and its memory blocks by state while kmem holds it."""
        device = self.device(name)[1]
        blocks = self.memory_blocks(device) if device.driver == KMEM else []
        return Reconfigured(
            device=device,
            online_blocks=tuple(b.id for b in blocks if b.state == "online"),
            offline_blocks=tuple(b.id for b in blocks if b.state != "online"),
        )

    # ------------------------------------------------------------------ helpers

    def _device_path(self, name: str) -> Path:
        return self.sysfs.path("bus", "dax", "devices", name)

    def _region_path(self, region: DaxRegion) -> Path:
        return self.sysfs.path("devices", region.path.lstrip("/"), "dax_region")

    def _blocks_dir(self) -> Path:
        return self.sysfs.path("devices", "system", "memory")

    def _refuse(self, name: str, region: DaxRegion, code: int, message: str) -> NoReturn:
        raise KernelRefused(name, str(self._region_path(region)), code, message)

    def _dynamic(self, region: DaxRegion, name: str) -> None:
        if not region.dynamic:
            self._refuse(name, region, errno.EOPNOTSUPP,
                         f"dax region {region.id} is static (pmem-backed): its devices cannot be "
                         "created, resized or deleted at run time")

    def _not_system_ram(self, device: DaxDevice) -> None:
        if device.driver == KMEM:
            raise KernelRefused(device.chardev, str(self._device_path(device.chardev)),
                                errno.EBUSY, "is system-ram (kmem); reconfigure it to devdax "
                                "first")

    def _check_size(self, name: str, size: int, align: int, *, allow_zero: bool) -> None:
        path = str(self._device_path(name))
        if align not in VALID_ALIGNS:
            raise KernelRefused(name, path, errno.EINVAL,
                                f"align {align} is not one of {', '.join(map(str, VALID_ALIGNS))}")
        if size < 0 or (size == 0 and not allow_zero) or size % align:
            raise KernelRefused(name, path, errno.EINVAL,
                                f"size {size} is not a positive multiple of the align {align}")

    def _write(self, name: str, path: Path, value: str) -> None:
        log.info("daxctl.write dev=%s path=%s value=%s", name, path, value)
        self.sysfs.write(path, value, name)

    def _set(self, name: str, path: Path, value: int) -> None:
        """Write an integer attribute and read it back."""
        self._write(name, path, str(value))
        now = read_int(path)
        if now != value:
            raise KernelRefused(name, str(path), errno.EIO,
                                f"wrote {value}, reads back {now}")

    def _bind(self, name: str, driver: str) -> None:
        self._write(name, self.sysfs.path("bus", "dax", "drivers", driver, "bind"), name)
        self._confirm_driver(name, driver)

    def _unbind(self, name: str, driver: str) -> None:
        self._write(name, self.sysfs.path("bus", "dax", "drivers", driver, "unbind"), name)
        self._confirm_driver(name, None)

    def _confirm_driver(self, name: str, driver: str | None) -> None:
        now = link_name(self._device_path(name) / "driver")
        if now != driver:
            raise KernelRefused(name, str(self._device_path(name) / "driver"), errno.EIO,
                                f"driver is {now or 'none'}, expected {driver or 'none'}")

    def _new_device(self, region: DaxRegion, before: set[str]) -> str:
        """The device that `create` just made: the one that was not there before (the kernel
        also shows it when `create` is read back)."""
        after = {d.chardev for d in self.region(region.id).devices}
        new = sorted(after - before)
        if len(new) == 1:
            return new[0]
        hint = read_text(self._region_path(region) / "create")
        if hint and hint in after:
            return hint
        raise KernelRefused(f"region{region.id}", str(self._region_path(region) / "create"),
                            errno.EIO, f"no new device after create (new: {new})")

    def _undo_create(self, region: DaxRegion, name: str) -> None:
        try:
            if link_name(self._device_path(name) / "driver") is not None:
                self._unbind(name, DEVICE_DAX)
            if read_int(self._device_path(name) / "size"):
                self._set(name, self._device_path(name) / "size", 0)
            self._write(name, self._region_path(region) / "delete", name)
        except DriverFailure:
            log.exception("daxctl.rollback_failed dev=%s", name)

    def _restore(self, name: str, size: int, bound: bool) -> None:
        """After a failed change: the old size, and bound again if it was."""
        try:
            if read_int(self._device_path(name) / "size") != size:
                self._set(name, self._device_path(name) / "size", size)
            if bound and link_name(self._device_path(name) / "driver") is None:
                self._bind(name, DEVICE_DAX)
        except DriverFailure:
            log.exception("daxctl.rollback_failed dev=%s", name)
