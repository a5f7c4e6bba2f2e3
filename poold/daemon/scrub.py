"""Scrub on release: zero the bytes of leases that ended in a scrubbing pool, then free them.

The ledger keeps such a lease `scrubbing` (its extent held) until `finish_scrub`, so nobody can
be granted bytes that still hold the previous tenant's data. The scrubber maps the extent in
chunks and zeroes it with memset, recording progress in the ledger (what `poold lease release`
draws as a progress bar); after a crash it goes on from the last progress it recorded, since
those bytes were zero before it was written.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import time
from functools import partial

from api.metrics import Metrics
from poold.ledger import leases, reads
from poold.ledger.ledger import Ledger
from poold.ledger.views import ScrubJob
from poold.types import MiB

log = logging.getLogger(__name__)

CHUNK = 64 * MiB          # mapped and zeroed at a time: bounded address space, cheap progress
PROGRESS_EVERY_S = 0.25   # how often a long scrub records how far it got


class Scrubber:
    def __init__(self, ledger: Ledger, metrics: Metrics) -> None:
        self._ledger = ledger
        self._metrics = metrics

    def run_once(self) -> int:
        """Scrub every lease of this host that waits for it; returns how many were freed."""
        freed = 0
        for job in self._ledger.read(partial(reads.scrubbing, host_id=self._ledger.host_id)):
            try:
                self._zero(job)
            except OSError as exc:  # the device went away or refuses: try again next pass
                log.warning("scrub.failed lease=%s chardev=%s error=%s", job.lease_id,
                            job.chardev, exc)
                continue
            if self._ledger.run(partial(leases.finish_scrub, lease_id=job.lease_id)):
                self._metrics.scrubs.inc()
                freed += 1
        return freed

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
