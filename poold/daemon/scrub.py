"""Scrub on release: zero the bytes of leases that ended in a scrubbing pool, then free them.

The ledger keeps such a lease `scrubbing` (its extent held) until `finish_scrub`, so nobody can
be granted bytes that still hold the previous tenant's data. The scrubber maps the extent in
chunks and zeroes it with memset, recording progress in the ledger (what `poold lease release`
draws as a progress bar); after a crash it goes on from the last progress it recorded, since
those bytes were zero before it was written.

A lease on a system-ram device has no bytes in a chardev: its memory is a memfd of the daemon's
(poold.daemon.nodemem). Scrubbing it is closing that memfd: the pages go back to the kernel,
which zero-fills each page before it hands it out again. Each pass also drops the memfds of
leases that ended without scrubbing (pools that do not scrub), so none outlives its lease by
more than one pass.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import time
from functools import partial

from api.metrics import Metrics
from poold.daemon.nodemem import NodeMemory
from poold.errors import UnknownLease
from poold.ledger import leases, reads
from poold.ledger.ledger import Ledger
from poold.ledger.views import ScrubJob
from poold.types import HOLDING_STATES, DeviceKind, MiB

log = logging.getLogger(__name__)

CHUNK = 64 * MiB          # mapped and zeroed at a time: bounded address space, cheap progress
PROGRESS_EVERY_S = 0.25   # how often a long scrub records how far it got
# How often the scrubber looks for work: released bytes are unusable until zeroed, so under
# churn a slow pass strands capacity (a 1 s pass let 500 releases/s of 2 MiB fill a 1 GiB pool).
POLL_S = 0.1


class Scrubber:
    def __init__(self, ledger: Ledger, metrics: Metrics,
                 node_memory: NodeMemory | None = None) -> None:
        self._ledger = ledger
        self._metrics = metrics
        self._node_memory = node_memory

    def run_once(self) -> int:
        """Scrub every lease of this host that waits for it; returns how many were freed."""
        if self._node_memory is not None:
            self._node_memory.sweep(self._holds)
        done: list[str] = []
        for job in self._ledger.read(partial(reads.scrubbing, host_id=self._ledger.host_id)):
            try:
                if job.kind == DeviceKind.SYSTEM_RAM:
                    self._drop(job)
                else:
                    self._zero(job)
            except OSError as exc:  # the device went away or refuses: try again next pass
                log.warning("scrub.failed lease=%s chardev=%s error=%s", job.lease_id,
                            job.chardev, exc)
                continue
            done.append(job.lease_id)
        # One transaction frees the whole pass: under churn, one commit instead of one each.
        freed = sum(view is not None for view in self._ledger.run(
            lambda tx: [leases.finish_scrub(tx, lease_id) for lease_id in done])) if done else 0
        self._metrics.scrubs.inc(freed)
        return freed

    def _holds(self, lease_id: str) -> bool:
        """Whether the lease still holds its extent (active, or scrubbing: dropped then)."""
        try:
            lease = self._ledger.read(lambda s, now: reads.lease(s, lease_id, now))
        except UnknownLease:
            return False
        return lease.state.value in HOLDING_STATES

    def _drop(self, job: ScrubJob) -> None:
        """A system-ram lease: its memfd closed, its pages are the kernel's (zeroed on reuse)."""
        if self._node_memory is not None:
            self._node_memory.drop(job.lease_id)
        log.info("scrub.done lease=%s bytes=%d via=memfd-close", job.lease_id, job.length)

    def _zero(self, job: ScrubJob) -> None:
        started = time.monotonic()
        fd = os.open(job.chardev, os.O_RDWR | os.O_CLOEXEC)
        try:
            done, noted = job.done, time.monotonic()
            while done < job.length:
                size = min(CHUNK, job.length - done)
                _memset_zero(fd, job.offset + done, size)
                done += size
                self._metrics.scrubbed.inc(size)
                if done < job.length and time.monotonic() - noted >= PROGRESS_EVERY_S:
                    self._ledger.run(partial(leases.scrub_progress, lease_id=job.lease_id,
                                             done=done))
                    noted = time.monotonic()
        finally:
            os.close(fd)
        log.info("scrub.done lease=%s bytes=%d seconds=%.3f", job.lease_id,
                 job.length - job.done, time.monotonic() - started)


def _memset_zero(fd: int, offset: int, size: int) -> None:
    with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                   offset=offset) as view:
        target = ctypes.c_char.from_buffer(view)
        try:
            ctypes.memset(ctypes.addressof(target), 0, size)
        finally:
            del target  # the export must end before the mapping closes
