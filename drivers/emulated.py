"""Emulated memory device: a file of a fixed size that clients map like a devdax chardev.

For machines without CXL and for the demo. The file lives on tmpfs (or hugetlbfs) so mapping it is
memory speed. It is sized with ftruncate, so it costs nothing until written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from drivers.errors import DriverFailure

TMPFS_DIR = Path("/dev/shm")


@dataclass(frozen=True, slots=True)
class EmulatedDevice:
    devname: str
    path: Path
    size: int
    align: int


def default_backing_dir(size: int, fallback: Path, proc: Path = Path("/proc")) -> Path:
    """Where an emulated device of `size` bytes should live.

    A hugetlbfs mount with enough free huge pages first (2 MiB pages make small gets faster and
    need no page-table walk per 4 KiB), then tmpfs (memory speed), else `fallback` (a disk
    directory: works, but is not memory).
    """
    try:
        mounts = (proc / "mounts").read_text()
        meminfo = (proc / "meminfo").read_text()
    except OSError:
        mounts = meminfo = ""
    huge = hugetlbfs_with_room(size, mounts, meminfo)
    if huge is not None:
        return huge
    return TMPFS_DIR if TMPFS_DIR.is_dir() and os.access(TMPFS_DIR, os.W_OK) else fallback


def hugetlbfs_with_room(size: int, mounts: str, meminfo: str) -> Path | None:
    """A writable hugetlbfs mount of the default page size whose free pages hold `size`."""
    fields = dict(line.split(":", 1) for line in meminfo.splitlines() if ":" in line)
    try:
        free_pages = int(fields["HugePages_Free"].split()[0])
        page_size = int(fields["Hugepagesize"].split()[0]) * 1024
    except (KeyError, ValueError, IndexError):
        return None
    if free_pages * page_size < size:
        return None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] != "hugetlbfs":
            continue
        options = dict(o.partition("=")[::2] for o in parts[3].split(","))
        pagesize = options.get("pagesize", "")
        if pagesize and pagesize.upper().rstrip("B") not in {f"{page_size >> 20}M",
                                                            str(page_size)}:
            continue
        path = Path(parts[1])
        if os.access(path, os.W_OK):
            return path
    return None


def ensure_emulated_device(devname: str, path: Path, size: int, align: int) -> EmulatedDevice:
    """Create or grow the backing file to `size` bytes and describe it.

    An existing file keeps its contents: leases that survived a daemon restart still find their
    bytes. A file larger than asked is left alone (shrinking could cut live leases) and reported at
    its real size.
    """
    if size <= 0 or size % align:
        raise DriverFailure(str(path), f"size {size} is not a positive multiple of align {align}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            current = os.fstat(fd).st_size
            if current < size:
                os.ftruncate(fd, size)
                current = size
        finally:
            os.close(fd)
    except OSError as exc:
        raise DriverFailure(str(path), f"cannot prepare backing file: {exc.strerror}") from exc
    return EmulatedDevice(devname=devname, path=path, size=current - current % align, align=align)
