"""memfd primitives for per-lease memory objects: make one (on huge pages when the pool has
room), seal it against size changes, empty it.

Leaves alone: who owns which memfd (poold.daemon.leasemem) and NUMA binding
(poold.daemon.nodemem).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
SEALS = (getattr(fcntl, "F_SEAL_SEAL", 1) | getattr(fcntl, "F_SEAL_SHRINK", 2)
         | getattr(fcntl, "F_SEAL_GROW", 4))
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
MEMINFO = Path("/proc/meminfo")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)


def seal(fd: int) -> None:
    """No size change, by anyone, ever (and no further seals: a holder cannot add a write seal
    that would stop the daemon emptying it)."""
    fcntl.fcntl(fd, F_ADD_SEALS, SEALS)


def punch(fd: int, length: int) -> None:
    """Give every page back to the kernel; mappings of the memfd lose them at once."""
    if _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"fallocate(PUNCH_HOLE): {os.strerror(code)}")


def huge_page_pool(meminfo: Path = MEMINFO) -> tuple[int, int]:
    """(free and unreserved pages, page size in bytes) of the default huge page pool, from one
    reading of /proc/meminfo; (0, 0) when it cannot be read."""
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines()
                      if ":" in line)
        free = int(fields["HugePages_Free"].split()[0]) - int(fields["HugePages_Rsvd"].split()[0])
        page = int(fields["Hugepagesize"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return 0, 0
    return free, page


def _fits(length: int, free: int, page: int) -> bool:
    return page > 0 and length % page == 0 and free * page >= length


def huge_page_room(length: int, meminfo: Path = MEMINFO) -> bool:
    """Whether the default huge page pool has `length` bytes free and unreserved, in whole
    pages."""
    return _fits(length, *huge_page_pool(meminfo))


class HugePageRoom:
    """`huge_page_room` for every grant, except that a pool seen without a free page is taken
    at its word for `recheck_s`: on a machine with no huge pages (most), reading /proc/meminfo
    on every grant was a tenth of the control plane's CPU under churn. A page freed meanwhile
    is used from the next reading on; until then a lease gets ordinary shared memory."""

    def __init__(self, meminfo: Path = MEMINFO, recheck_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._meminfo = meminfo
        self._recheck_s = recheck_s
        self._clock = clock
        self._none_until = float("-inf")

    def __call__(self, length: int) -> bool:
        now = self._clock()
        if now < self._none_until:
            return False
        free, page = huge_page_pool(self._meminfo)
        if free <= 0:  # not a page to spare, of any size
            self._none_until = now + self._recheck_s
            return False
        return _fits(length, free, page)


def emulated_memfd(name: str, length: int, huge: bool) -> tuple[int, bool]:
    """A sealed memfd of `length` bytes: (fd, on huge pages). Huge pages are reserved now (a
    shared mapping reserves them for the file, and they stay reserved once it is unmapped), so a
    holder's map can never fault for want of one; no room: shmem instead."""
    if huge:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | os.MFD_HUGETLB)
        try:
            os.ftruncate(fd, length)
            mmap.mmap(fd, length, mmap.MAP_SHARED).close()
            seal(fd)
            return fd, True
        except OSError as exc:
            os.close(fd)
            log.info("memfd.hugetlb_refused name=%s bytes=%s error=%r", name, length, exc)
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, length)
        seal(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, False
