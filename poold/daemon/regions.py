"""Dynamic dax regions carved per lease: each lease on one is a dax device made for it alone.

A dynamic region (hmem, a CXL ram region: its devices can be made and deleted at run time) is,
unless an admin lists it in `manual_regions`, one ledger device `daxN` of the region's size, whose
extents the ledger grants like any device's. Each grant then makes a dax device of exactly the
lease's physical range (start of the region + the lease's offset: the same memory on every host
that reaches a shared region) through the region's `mapping` attribute, and that device is what
the holder is handed (fd.sock) and what root maps (`/dev/daxN.M`, offset 0): it covers the
lease and nothing else. When the lease has ended its bytes are zeroed through that device (in a
pool that scrubs) and the device is destroyed, which zaps every mapping of it (the old holder's
next access faults), before the ledger lets the extent go: a lease there stays `scrubbing` until
then whatever its pool's policy, so no new device can be asked for over a range still held.

Which regions: one carved per lease before (the ledger has its `daxN`), or a pristine one (no
device with memory, but for its first device when nothing leases that: shrunk to 0, the kernel
keeps it). A region holding devices poold did not make (an admin's, system-ram) is left to be
leased device by device, and logged.

The map from lease to device lives in memory, rebuilt from sysfs and the ledger at start and at
each rescan (`reconcile`): a device of a region whose range is a holding lease's is that lease's;
one whose is nobody's is destroyed; an active lease whose device is gone (a reboot) is lost.
Device changes run under DeviceOps' lock, like every device operation and rescan.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import partial

from drivers import DriverFailure
from drivers.dax import DaxRegion
from drivers.errors import KernelRefused
from poold import errors
from poold.daemon.devices import DeviceOps, translate
from poold.ledger import reads, sharing
from poold.ledger.views import DeviceView, LeaseView
from poold.types import DeviceKind, DeviceState, LeaseState

log = logging.getLogger(__name__)

ACTOR = "regions"


@dataclass(frozen=True, slots=True)
class Made:
    devname: str  # dax0.3; its chardev is /dev/dax0.3
    region: int
    start: int
    length: int


class RegionLeases:
    def __init__(self, ops: DeviceOps, manual: list[str]) -> None:
        self._ops = ops
        self._manual = list(manual)
        self._made: dict[str, Made] = {}  # lease id -> its device
        self._started_at = time.time()
        self._unmanaged_logged: set[int] = set()

    # ------------------------------------------------------------------ which regions

    def per_lease(self, regions: Sequence[DaxRegion]) -> tuple[set[int], bool]:
        """The dynamic regions carved per lease from now on, and whether sysfs changed meanwhile
        (call under DeviceOps' lock: it empties the first device of a pristine region)."""
        ledger = {d.devname: d for d in self._ops.ledger.read(reads.devices)}
        chosen: set[int] = set()
        changed = False
        for region in regions:
            name = f"dax{region.id}"
            if not region.dynamic or any(fnmatch(name, glob) for glob in self._manual):
                continue
            known = ledger.get(name)
            before = (known is not None and known.kind == DeviceKind.DAX_REGION
                      and known.state != DeviceState.MISSING)
            if before:
                chosen.add(region.id)
                continue
            pristine = self._make_pristine(region, ledger)
            if pristine is not None:
                chosen.add(region.id)
                changed = changed or pristine
            elif region.id not in self._unmanaged_logged:
                self._unmanaged_logged.add(region.id)
                log.warning("regions.carved_by_hand region=%s devices=%s: it holds devices poold "
                            "did not make; they are leased device by device", name,
                            [d.chardev for d in region.devices if d.size])
        return chosen, changed

    def _make_pristine(self, region: DaxRegion, ledger: dict[str, DeviceView]) -> bool | None:
        """None: the region is not pristine (and was left as it is); else whether its first
        device had to be emptied for it to be."""
        sized = [d for d in region.devices if d.size]
        seed = f"dax{region.id}.0"
        if not sized:
            return False
        if [d.chardev for d in sized] != [seed] or sized[0].mode != "devdax":
            return None
        held = ledger.get(seed)
        if held is not None and (held.live_leases or held.scrubbing_bytes):
            return None  # leased as it is: carved per lease once those leases are over
        try:
            self._ops.dax.resize_device(seed, 0)
        except DriverFailure as exc:
            log.warning("regions.seed_not_emptied dev=%s error=%s", seed, exc)
            return None
        log.info("regions.carved_per_lease region=dax%s size=%s (emptied %s)", region.id,
                 region.size, seed)
        return True

    # ------------------------------------------------------------------ leases

    def make(self, view: LeaseView) -> Made:
        """The device of a lease just granted on a region carved per lease."""
        return self._make(view.id, int(view.device.removeprefix("dax")), view.offset,
                          view.length, view.align)

    def made_for_scrub(self, lease_id: str, region_id: int, offset: int, length: int) -> str:
        """The device of an ended lease whose bytes must be zeroed, made again over its range
        where it is gone (a reboot, a crash before its scrub): what it held must not reach the
        next lease there."""
        align = self._ops.dax.region(region_id).align or 2 << 20
        return self._make(lease_id, region_id, offset, length, align).devname

    def _make(self, lease_id: str, region_id: int, offset: int, length: int,
              align: int) -> Made:
        with self._ops.lock:
            made = self._made.get(lease_id)
            if made is not None:  # an idempotent replay, or made already
                return made
            region = self._ops.dax.region(region_id)
            if region.start is None:
                raise errors.DriverError(f"dax region {region_id}: its start is unknown")
            start = region.start + offset
            began = time.perf_counter()
            try:
                device = self._ops.dax.create_device_at(region_id, start, length, align)
            except KernelRefused as exc:
                if exc.errno in (errno.ENOMEM, errno.ENOSPC, errno.EBUSY):
                    raise errors.NoCapacity(f"lease {lease_id}: {exc}") from exc
                raise translate(exc) from exc
            except DriverFailure as exc:
                raise translate(exc) from exc
            made = Made(device.chardev, region_id, start, length)
            self._made[lease_id] = made
        log.info("regions.device_made lease=%s dev=%s bytes=%s seconds=%.3f", lease_id,
                 made.devname, length, time.perf_counter() - began)
        return made

    def device_of(self, lease_id: str) -> str | None:
        made = self._made.get(lease_id)
        return None if made is None else made.devname

    def unmake(self, lease_id: str) -> bool:
        """Destroy the device of a lease that ended (its mappings fault from now on); True
        when it is gone (or there was none), False to try again later."""
        with self._ops.lock:
            made = self._made.get(lease_id)
            if made is None:
                return True
            try:
                self._ops.dax.destroy_device(made.devname)
            except KernelRefused as exc:
                if exc.errno != errno.ENODEV:
                    log.warning("regions.destroy_failed lease=%s dev=%s error=%s", lease_id,
                                made.devname, exc)
                    return False
            del self._made[lease_id]
        log.info("regions.device_destroyed lease=%s dev=%s", lease_id, made.devname)
        return True

    # ------------------------------------------------------------------ start and rescans

    def reconcile(self, per_lease: set[int], regions: Sequence[DaxRegion]) -> None:
        """Match the devices of the regions carved per lease to this host's holding leases on
        them (call under DeviceOps' lock): a device nobody holds is destroyed; an active lease
        whose device is gone is lost."""
        host = self._ops.ledger.host_id
        holding = [x for x in self._ops.ledger.read(
            lambda s, now: reads.region_leases(s, now, host_id=host))]
        by_range = {(x.device, x.offset, x.length): x for x in holding}
        seen: dict[str, Made] = {}
        for region in regions:
            if region.id not in per_lease or region.start is None:
                continue
            for device in region.devices:
                if not device.size or len(device.mappings) != 1:
                    continue
                m = device.mappings[0]
                key = (f"dax{region.id}", m.start - region.start, m.size)
                lease = by_range.get(key)
                if lease is None:
                    self._destroy_orphan(device.chardev)
                    continue
                seen[lease.id] = Made(device.chardev, region.id, m.start, m.size)
        gone = [x.id for x in holding if x.id not in seen and x.state is LeaseState.ACTIVE
                and (x.id in self._made or x.granted_at.timestamp() < self._started_at)]
        self._made = {**{i: m for i, m in self._made.items() if i in seen}, **seen}
        if gone:
            lost = self._ops.ledger.run(partial(sharing.lose_own_leases, only=set(gone),
                                                reason="its dax device is gone"))
            log.warning("regions.leases_lost count=%d", lost)

    def _destroy_orphan(self, devname: str) -> None:
        try:
            self._ops.dax.destroy_device(devname)
            log.info("regions.orphan_destroyed dev=%s", devname)
        except DriverFailure as exc:
            log.warning("regions.orphan_kept dev=%s error=%s", devname, exc)

    def leases(self) -> dict[str, str]:
        """Lease id -> device name, of the devices held now."""
        return {i: m.devname for i, m in self._made.items()}
