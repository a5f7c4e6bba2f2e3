"""Isolated pools: every lease gets a dax device of its own, sized to the lease.

In a pool that Settings.isolated_pools maps to a dynamic dax region, a grant creates a device of
the lease's size in that region (drivers.daxctl, through DeviceOps), takes it into the ledger in
that pool, and grants the lease on it, whole: the chardev its holder opens, or is passed, covers
nothing but the lease. When the lease has ended and is final (in a pool that scrubs, only after
the scrubber zeroed it: a `scrubbing` lease still holds the device), `sweep` destroys the device
and the ledger marks it missing. A grant the ledger refuses (quota, TTL) destroys the device it
made, so a refusal leaves sysfs and the ledger's devices as they were.

Every device of an isolated pool is one of these: the daemon places no other device there
(Settings refuses device_pools rules naming one) and destroys any of them that holds no lease.
Everything runs under DeviceOps' lock, like every device change and rescan, so a sweep never sees
a device between its creation and its grant. Leaves alone: the sysfs writes (drivers.daxctl), the
hold-and-record steps (DeviceOps) and the grant itself (poold.ledger.leases).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from poold import errors
from poold.daemon.devices import DeviceOps
from poold.ledger import leases, reads
from poold.ledger.leases import GrantRequest
from poold.ledger.views import LeaseView
from poold.types import DEFAULT_ALIGN, MAX_BYTES, DeviceState, round_up

log = logging.getLogger(__name__)

ACTOR = "isolation"


class IsolatedLeases:
    """Implements api.device_admin.LeasePlacer for the pools of `regions` (pool -> region id).
    `placing` is the daemon's devname -> pool map its reconcile places new devices by."""

    def __init__(self, ops: DeviceOps, regions: dict[str, int],
                 placing: dict[str, str]) -> None:
        self._ops = ops
        self._regions = dict(regions)
        self._placing = placing

    def isolates(self, pool: str | None) -> bool:
        return pool is not None and pool in self._regions

    def grant(self, request: GrantRequest) -> LeaseView:
        """A new device of the lease's size in the pool's region, and the lease on all of it."""
        assert request.pool is not None
        if request.device is not None:
            raise errors.InvalidRequest(f"pool {request.pool!r} gives each lease a device of its "
                                        "own: a device cannot be asked for")
        if not 0 < request.size <= MAX_BYTES:
            raise errors.InvalidRequest(
                f"size must be between 1 and {MAX_BYTES} bytes, got {request.size}")
        region = self._regions[request.pool]
        with self._ops.lock:
            try:
                align = self._ops.dax.region(region).align or DEFAULT_ALIGN
                device = self._ops.create_held(region, round_up(request.size, align), align,
                                               ACTOR, self._placing, pool=request.pool,
                                               requested=request.size)
            except errors.RegionFull as exc:
                raise errors.NoCapacity(f"pool {request.pool!r}: {exc.detail}") from exc
            devname = device.chardev
            try:
                view: LeaseView = self._ops.ledger.run(
                    partial(leases.grant, request=replace(request, device=devname)))
            except errors.PooldError:
                self._destroy(devname, "grant refused")
                raise
            if view.device != devname:  # an idempotency key's replay: granted before
                self._destroy(devname, "idempotent replay")
            log.info("isolated.granted lease=%s dev=%s bytes=%s pool=%s", view.id, devname,
                     view.length, request.pool)
            return view

    def sweep(self) -> int:
        """Destroy the devices of isolated pools that hold no lease any more (none live, none
        being scrubbed); returns how many."""
        done = 0
        with self._ops.lock:
            for device in self._ops.ledger.read(reads.devices):
                if (device.pool in self._regions and device.host == self._ops.ledger.host_id
                        and device.state != DeviceState.MISSING and not device.live_leases
                        and not device.scrubbing_bytes):
                    done += self._destroy(device.devname, "lease ended")
        return done

    def _destroy(self, devname: str, reason: str) -> bool:
        try:
            self._ops.destroy_held(devname, ACTOR, reason=reason)
        except errors.PooldError as exc:  # a lease came or the kernel refused: next sweep
            log.warning("isolated.destroy_failed dev=%s reason=%s error=%s", devname, reason,
                        exc)
            return False
        return True
