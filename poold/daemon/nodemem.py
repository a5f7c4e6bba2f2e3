"""Leases on system-ram devices: memory of a CPU-less NUMA node, handed out as a memfd.

A dax device given to kmem has no chardev to map any more; its memory is a NUMA node's. A lease
on it is a memfd of the lease's length whose pages are bound to that node: mbind(MPOL_BIND) on a
mapping of a shmem file sets the file's own policy, so every page of it comes from the node,
whoever faults it. The daemon pre-faults the whole memfd (so the pages are on the node before the
client maps it), checks where a sample of them landed (move_pages), and hands the fd over its
UNIX socket (poold.daemon.fdpass); the client maps it at offset 0. The ledger accounts the
device's bytes as extents like any other device's (quotas, capacity, placement); the extent's
offset is bookkeeping only.

Makes those memfds (`NodeAllocator`), sealed against size changes, one per lease at its first
map request; poold.daemon.leasemem owns them from then on (the same one for every later request,
kept across restarts in the fd store, emptied and closed when the lease ends).

Leaves alone: what the ledger accounts (poold.ledger.leases) and who may ask (fdpass).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from drivers.memfd import seal
from drivers.numa import read_list, scan_memory_blocks, scan_nodes
from drivers.sysfs import Sysfs
from poold import errors

log = logging.getLogger(__name__)

MPOL_BIND = 2
MPOL_MF_STRICT = 1 << 0  # fail if a page already present is not on the node
MPOL_MF_MOVE = 1 << 1  # move pages already present (none: the memfd is new)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+
# The nodes that have memory now (the live kernel's, as mbind is the live kernel's).
HAS_MEMORY = Path("/sys/devices/system/node/has_memory")
# How long a node that just got memory may take to be allowed to this process (bind_to_node).
BIND_SETTLE_S = 2.0
# Syscall numbers: glibc has no mbind or move_pages wrapper (libnuma does).
_SYSCALLS = {"x86_64": {"mbind": 237, "move_pages": 279},
             "aarch64": {"mbind": 235, "move_pages": 239}}
SAMPLE_PAGES = 256  # pages whose node is checked after the pre-fault, spread over the memfd
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(name: str, *args: int | ctypes._CData) -> int:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(errno.ENOSYS, f"{name}: no syscall number for {platform.machine()}")
    ret = int(_libc.syscall(ctypes.c_long(numbers[name]), *args))
    if ret < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")
    return ret


def bind_to_node(address: int, length: int, node: int) -> None:
    """mbind(MPOL_BIND) of [address, +length) to `node` alone.

    Memory that just came online (a device reconfigured to system-ram a moment ago) is in the
    node's memory at once, but the kernel adds the node to each task's allowed nodes (cpuset
    mems_allowed) from a work queue, a little later; until then MPOL_BIND to it is EINVAL. So an
    EINVAL for a node that has memory is retried for up to BIND_SETTLE_S; one without memory (or
    no such node) fails at once."""
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    deadline = time.monotonic() + BIND_SETTLE_S
    while True:
        try:
            # The kernel reads maxnode - 1 bits (an off-by-one kept for compatibility).
            _syscall("mbind", ctypes.c_void_p(address), ctypes.c_ulong(length),
                     ctypes.c_int(MPOL_BIND), mask, ctypes.c_ulong(words * 64 + 1),
                     ctypes.c_uint(MPOL_MF_STRICT | MPOL_MF_MOVE))
            return
        except OSError as exc:
            if (exc.errno != errno.EINVAL or time.monotonic() >= deadline
                    or node not in read_list(HAS_MEMORY)):
                raise
        time.sleep(0.02)


def page_nodes(addresses: list[int]) -> list[int]:
    """The node each page of this process at `addresses` is on (move_pages with no target:
    a query); a negative errno where there is no page."""
    count = len(addresses)
    pages = (ctypes.c_void_p * count)(*addresses)
    status = (ctypes.c_int * count)()
    _syscall("move_pages", ctypes.c_int(0), ctypes.c_ulong(count), pages, ctypes.c_void_p(None),
             status, ctypes.c_int(0))
    return list(status)


def node_memfd(name: str, node: int, length: int) -> int:
    """A memfd of `length` bytes, every page allocated on `node` now, sealed against size
    changes (F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL); the caller owns the fd."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, length)
        with mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as view:
            anchor = ctypes.c_char.from_buffer(view)
            try:
                address = ctypes.addressof(anchor)
                bind_to_node(address, length, node)
                _prefault(view, length)
                step = max(1, length // PAGE // SAMPLE_PAGES)
                sample = [address + i * PAGE for i in range(0, length // PAGE, step)]
                found = page_nodes(sample)
            finally:
                del anchor  # the export must end before the mapping closes
        astray = sorted({n for n in found if n != node})
        if astray:
            raise OSError(errno.EIO, f"pages landed on node(s) {astray}, not on node {node}")
        seal(fd)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _prefault(view: mmap.mmap, length: int) -> None:
    try:
        view.madvise(MADV_POPULATE_WRITE)
    except OSError:  # before Linux 5.14: touch every page
        for offset in range(0, length, PAGE):
            view[offset] = 0


class NodeAllocator:
    """Makes the memfds of leases on system-ram devices (poold.daemon.leasemem owns them)."""

    def __init__(self, sysfs_root: Path, make: Callable[[str, int, int], int] = node_memfd
                 ) -> None:
        self._sysfs = Sysfs(sysfs_root)
        self._make = make

    def make(self, lease_id: str, node: int | None, length: int) -> int:
        """A new memfd of `length` bytes on `node`, pre-faulted and sealed; the caller owns it."""
        if node is None:
            raise errors.DriverError(f"lease {lease_id}: its system-ram device has no NUMA node")
        self._check_free(lease_id, node, length)
        try:
            return self._make(f"poold-{lease_id[:12]}", node, length)
        except OSError as exc:
            raise errors.DriverError(f"lease {lease_id}: cannot bind {length} bytes to node "
                                     f"{node}: {exc.strerror or exc}") from exc

    def _check_free(self, lease_id: str, node: int, length: int) -> None:
        """Refuse rather than let the pre-fault find the node full: with MPOL_BIND the kernel
        would answer that with its OOM killer, not an error."""
        blocks, _size = scan_memory_blocks(self._sysfs)
        found = next((n for n in scan_nodes(self._sysfs, blocks) if n.node == node), None)
        if found is None:
            raise errors.DriverError(f"lease {lease_id}: NUMA node {node} is not online")
        if found.mem_free is not None and found.mem_free < length:
            raise errors.NoCapacity(f"lease {lease_id}: node {node} has {found.mem_free} bytes "
                                    f"free, the lease needs {length}")
