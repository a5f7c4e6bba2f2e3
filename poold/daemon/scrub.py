"""Scrub on release: zero the bytes of leases that ended in a scrubbing pool, then free them.

The ledger keeps such a lease `scrubbing` (its extent held) until `finish_scrub`, so nobody can
be granted bytes that still hold the previous tenant's data. The scrubber maps the extent in
chunks and zeroes it with memset, recording progress in the ledger (what `poold lease release`
draws as a progress bar); after a crash it goes on from the last progress it recorded, since
those bytes were zero before it was written.

A lease on an emulated or system-ram device has no bytes in a chardev: its memory is a memfd of
the daemon's (poold.daemon.leasemem). Scrubbing it is emptying and closing that memfd: the pages
go back to the kernel, which zero-fills each page before it hands it out again, and the next
lease on those ledger bytes gets a new memfd. Each pass also drops the memfds of leases that
ended without scrubbing (pools that do not scrub), so none outlives its lease by more than one
pass.

The writer tells the scrubber which leases it ended (`note_ended`). When none of them waits for a
scrub, a pass only drops their memfds, reading nothing from the ledger: under churn in a pool
that does not scrub, that is most passes, and a full pass's reads cost the API the GIL. A full
pass (everything waiting, every memfd swept) still runs whenever a lease waits for its scrub, at
start, when nothing woke it, after a full pass that left a scrub unfinished, and at least every
`full_every_s` whatever the churn.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from functools import partial

from api.metrics import Metrics
from poold.daemon.leasemem import LeaseMemory
from poold.daemon.regions import RegionLeases
from poold.errors import PooldError
from poold.ledger import leases, reads
from poold.ledger.ledger import Ledger
from poold.ledger.views import ScrubJob
from poold.types import DeviceKind, MiB

log = logging.getLogger(__name__)

CHUNK = 64 * MiB          # mapped and zeroed at a time: bounded address space, cheap progress
PROGRESS_EVERY_S = 0.25   # how often a long scrub records how far it got
# The scrubber runs when this daemon's ledger writer ended leases, at most once per GAP_S:
# released bytes are unusable until zeroed, so under churn a slow pass strands capacity (a 1 s
# pass let 500 releases/s of 2 MiB fill a 1 GiB pool). Without a wake it looks every reaper
# interval, for leases of this host that another host's daemon ended (none announces that).
GAP_S = 0.1


class Scrubber:
    def __init__(self, ledger: Ledger, metrics: Metrics,
                 memory: LeaseMemory | None = None, regions: RegionLeases | None = None,
                 full_every_s: float = 5.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._ledger = ledger
        self._metrics = metrics
        self._memory = memory
        self._regions = regions
        self._full_every_s = full_every_s
        self._clock = clock
        self._lock = threading.Lock()  # note_ended comes from the writer's thread
        self._ended: dict[str, bool] = {}  # told since the last pass: lease id -> waits for scrub
        self._full_at: float | None = None  # clock() at the last full pass
        self._left_over = False  # the last full pass left a scrub to try again

    def note_ended(self, ended: Mapping[str, bool]) -> None:
        """The ledger writer committed the end of these leases (id -> whether it waits for its
        scrub): the next pass knows what it has to do without asking the ledger."""
        with self._lock:
            self._ended.update(ended)

    def run_once(self) -> int:
        """Scrub every lease of this host that waits for it; returns how many were freed."""
        with self._lock:
            told, self._ended = self._ended, {}
        now = self._clock()
        if told and not any(told.values()) and not self._left_over \
                and self._full_at is not None and now - self._full_at < self._full_every_s:
            if self._memory is not None:  # nothing to zero: their memfds go, the ledger unread
                for lease_id in told:
                    self._memory.drop(lease_id)
            return 0
        self._full_at = now
        return self._full_pass()

    def _full_pass(self) -> int:
        self._left_over = True  # until this pass has finished all it found (it may raise)
        if self._memory is not None:
            self._memory.sweep(self._still_holding)
        done: list[str] = []
        jobs = []
        no_device = False
        carved = set()  # leases of regions carved per lease: their devices go once zeroed
        for waiting in self._ledger.read(partial(reads.scrubbing, host_id=self._ledger.host_id)):
            if waiting.kind == DeviceKind.DAX_REGION:
                carved.add(waiting.lease_id)
            try:
                jobs.append(self._on_its_device(waiting))
            except PooldError as exc:  # no device to zero it through yet: the next pass
                no_device = True
                log.warning("scrub.no_device lease=%s error=%s", waiting.lease_id, exc)
        ends: dict[str, int] = {}  # per device, the furthest byte this pass zeroes
        for job in jobs:
            if job.kind != DeviceKind.DEVDAX or not job.zero:
                continue
            ends[job.chardev] = max(ends.get(job.chardev, 0), job.offset + job.length)
        self._metrics.scrub_remaining.set(sum(job.length - job.done for job in jobs))
        with _Mappings(ends) as mappings:
            for job in jobs:
                try:
                    if job.kind == DeviceKind.DEVDAX and job.zero:
                        self._zero(job, mappings)
                    elif job.kind != DeviceKind.DEVDAX:
                        self._drop(job)
                except OSError as exc:  # the device went away or refuses: retry next pass
                    log.warning("scrub.failed lease=%s chardev=%s error=%s", job.lease_id,
                                job.chardev, exc)
                    continue
                done.append(job.lease_id)
        # A region's per-lease device goes once zeroed (and unmapped: the pass's mappings are
        # closed): its holder's mappings fault from now on, and a new device can be made there.
        if self._regions is not None:
            done = [i for i in done if i not in carved or self._regions.unmake(i)]
        finished = set(done)  # what failed is tried again at the next pass (a full one)
        self._metrics.scrub_remaining.set(sum(
            job.length - job.done for job in jobs if job.lease_id not in finished))
        # One transaction frees the whole pass: under churn, one commit instead of one each.
        freed = sum(view is not None for view in self._ledger.run(
            lambda tx: [leases.finish_scrub(tx, lease_id) for lease_id in done])) if done else 0
        self._left_over = no_device or len(finished) < len(jobs)
        self._metrics.scrubs.inc(freed)
        return freed

    def _on_its_device(self, job: ScrubJob) -> ScrubJob:
        """A lease of a region carved per lease is zeroed through its own dax device (a devdax
        job at offset 0 of it), made again over its range where it is gone (a reboot took it:
        its bytes may still be in that memory)."""
        if job.kind != DeviceKind.DAX_REGION or self._regions is None:
            return job
        devname = self._regions.device_of(job.lease_id)
        if devname is None and job.zero:
            region = int(job.chardev.removeprefix("/dev/dax").partition(".")[0])
            devname = self._regions.made_for_scrub(job.lease_id, region, job.offset, job.length)
        if devname is None:
            return replace(job, kind=DeviceKind.DEVDAX.value, zero=False)
        return replace(job, kind=DeviceKind.DEVDAX.value, chardev=f"/dev/{devname}", offset=0)

    def _still_holding(self, lease_ids: Collection[str]) -> set[str]:
        """Of these leases, those that still hold their extent (active, or scrubbing: dropped
        then); one ledger read per pass, whatever the number of leases."""
        return self._ledger.read(partial(reads.still_holding, lease_ids=lease_ids))

    def _drop(self, job: ScrubJob) -> None:
        """An emulated or system-ram lease: its memfd emptied and closed, its pages are the
        kernel's (zeroed before reuse). Nothing to do where this daemon holds none (a lease it
        adopted from a lost host: that host's memfd went with it)."""
        if self._memory is not None:
            self._memory.drop(job.lease_id)
        self._metrics.scrubbed.inc(job.length)
        log.debug("scrub.done lease=%s bytes=%d via=memfd", job.lease_id, job.length)

    def _zero(self, job: ScrubJob, mappings: _Mappings) -> None:
        started = time.monotonic()
        base = mappings.address(job.chardev)
        done, noted = job.done, started
        while done < job.length:
            size = min(CHUNK, job.length - done)
            _memset(size)(base + job.offset + done, 0, size)
            done += size
            self._metrics.scrubbed.inc(size)
            self._metrics.scrub_remaining.dec(size)
            if done < job.length and time.monotonic() - noted >= PROGRESS_EVERY_S:
                self._ledger.run(partial(leases.scrub_progress, lease_id=job.lease_id,
                                         done=done))
                noted = time.monotonic()
        log.debug("scrub.done lease=%s bytes=%d seconds=%.4f", job.lease_id,
                  job.length - job.done, time.monotonic() - started)


# memset that keeps the GIL, for small extents: releasing it costs more than the zeroing, since
# under load taking it back waits for the busy event loop's switch interval (5 ms), and a pass of
# many 2 MiB scrubs then crawls. Large chunks let the GIL go, so the API is not stalled by them.
_MEMSET_HOLDING_GIL = ctypes.PyDLL(None).memset
_MEMSET_HOLDING_GIL.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
_MEMSET_HOLDING_GIL.restype = ctypes.c_void_p
HOLD_GIL_BELOW = 4 * MiB


def _memset(size: int) -> Callable[[int, int, int], object]:
    return _MEMSET_HOLDING_GIL if size <= HOLD_GIL_BELOW else ctypes.memset


class _Mappings:
    """One writable mapping per device for one pass, from its start to the furthest extent the
    pass zeroes (`ends`), so a pass of many small scrubs costs one open and mmap per device
    rather than five system calls (and as many waits for the GIL) per lease. Unmapped at the end
    of the pass: a device must not stay busy for the device operations (destroy, reconfigure)."""

    def __init__(self, ends: dict[str, int]) -> None:
        self._ends = ends
        self._held: dict[str, tuple[mmap.mmap, int]] = {}  # chardev -> (mapping, address)

    def __enter__(self) -> _Mappings:
        return self

    def __exit__(self, *_exc: object) -> None:
        for view, _address in self._held.values():
            view.close()
        self._held.clear()

    def address(self, chardev: str) -> int:
        """The address of byte 0 of `chardev` in this pass's mapping of it."""
        held = self._held.get(chardev)
        if held is not None:
            return held[1]
        fd = os.open(chardev, os.O_RDWR | os.O_CLOEXEC)
        try:
            view = mmap.mmap(fd, self._ends[chardev], mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        target = ctypes.c_char.from_buffer(view)
        address = ctypes.addressof(target)
        del target  # keep no export: the mapping must close cleanly at the end of the pass
        self._held[chardev] = (view, address)
        return address
