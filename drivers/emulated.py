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


def default_backing_dir(fallback: Path) -> Path:
    """tmpfs when the machine has one (memory speed), else the given fallback directory."""
    return TMPFS_DIR if TMPFS_DIR.is_dir() and os.access(TMPFS_DIR, os.W_OK) else fallback


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
