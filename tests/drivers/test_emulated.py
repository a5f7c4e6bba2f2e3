"""The emulated device (capacity only) and the memfds its leases are made of: sealed against any
size change, emptied on demand, on huge pages when the pool has room (real memfds; the huge page
pool is given pages for the test where this process may)."""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers import DriverFailure
from drivers.emulated import emulated_device
from drivers.memfd import HugePageRoom, emulated_memfd, huge_page_room, punch
from tests.preconditions import need_root

MiB = 2**20
MEMINFO = ("MemTotal: 100 kB\nHugePages_Free:      {free}\nHugePages_Rsvd:      {rsvd}\n"
           "Hugepagesize:       2048 kB\n")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def test_the_device_is_capacity_named_by_its_daemon_state() -> None:
    device = emulated_device("emu0", "/var/lib/poold", 64 * MiB, 2 * MiB)
    assert (device.size, device.align, device.chardev) == (64 * MiB, 2 * MiB, "memfd:emu0")


@pytest.mark.parametrize(("size", "align"), [(0, 2 * MiB), (-2 * MiB, 2 * MiB),
                                             (3 * MiB, 2 * MiB), (4 * MiB, 3 * MiB)])
def test_bad_sizes_name_the_device(size: int, align: int) -> None:
    with pytest.raises(DriverFailure, match="/state"):
        emulated_device("emu0", "/state", size, align)


def test_a_lease_memfd_cannot_be_resized_by_anyone() -> None:
    fd, huge = emulated_memfd("poold-test", 4 * MiB, huge=False)
    try:
        assert not huge and os.fstat(fd).st_size == 4 * MiB
        for size in (0, 2 * MiB, 8 * MiB, 1 << 40):
            with pytest.raises(OSError) as refused:
                os.ftruncate(fd, size)
            assert refused.value.errno == errno.EPERM
        # Nor through a descriptor of its own (what root opens by /proc/<pid>/fd/<n>).
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            with pytest.raises(OSError) as refused:
                os.ftruncate(again, 0)
            assert refused.value.errno == errno.EPERM
        finally:
            os.close(again)
        assert os.fstat(fd).st_size == 4 * MiB
    finally:
        os.close(fd)


def test_punch_empties_it_under_every_mapping() -> None:
    fd, _huge = emulated_memfd("poold-test", 4 * MiB, huge=False)
    try:
        with mmap.mmap(fd, 4 * MiB) as view:
            view[:] = b"\xa5" * (4 * MiB)
            punch(fd, 4 * MiB)
            assert view[:] == bytes(4 * MiB)  # the mapping lost the pages at once
            assert os.fstat(fd).st_size == 4 * MiB
    finally:
        os.close(fd)


def test_huge_page_room_counts_free_unreserved_whole_pages(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO.format(free=32, rsvd=0))
    assert huge_page_room(64 * MiB, meminfo)
    assert not huge_page_room(66 * MiB, meminfo)
    assert not huge_page_room(3 * MiB, meminfo)  # not whole pages
    meminfo.write_text(MEMINFO.format(free=32, rsvd=8))
    assert not huge_page_room(64 * MiB, meminfo) and huge_page_room(48 * MiB, meminfo)
    meminfo.write_text("garbage")
    assert not huge_page_room(2 * MiB, meminfo)


def test_a_pool_without_a_free_huge_page_is_read_again_only_after_its_recheck(
        tmp_path: Path) -> None:
    meminfo, now = tmp_path / "meminfo", [0.0]
    room = HugePageRoom(meminfo, recheck_s=1.0, clock=lambda: now[0])
    meminfo.write_text(MEMINFO.format(free=32, rsvd=0))
    assert room(64 * MiB) and not room(66 * MiB)  # too big for the pool, yet pages are free:
    meminfo.write_text(MEMINFO.format(free=0, rsvd=0))  # so the next grant reads it again
    assert not room(2 * MiB)  # none free: believed for a second
    meminfo.write_text(MEMINFO.format(free=32, rsvd=0))
    now[0] = 0.9
    assert not room(2 * MiB)
    now[0] = 1.0
    assert room(2 * MiB)


@pytest.fixture
def huge_pages() -> Iterator[int]:
    """Eight 2 MiB huge pages in the pool for the test (root), given back after."""
    try:
        before = int(NR_HUGEPAGES.read_text())
        NR_HUGEPAGES.write_text(str(before + 8))
    except (OSError, ValueError) as exc:
        need_root(f"size the huge page pool ({exc})")
        raise
    try:
        yield before
    finally:
        NR_HUGEPAGES.write_text(str(before))


def test_on_huge_pages_the_whole_memfd_is_reserved_at_once(huge_pages: int) -> None:
    del huge_pages
    assert huge_page_room(16 * MiB)
    fd, huge = emulated_memfd("poold-test", 16 * MiB, huge=True)
    try:
        assert huge and os.fstat(fd).st_blksize == 2 * MiB
        # Reserved for the file: a second one that would need them is refused up front, not
        # left to fault later.
        assert not huge_page_room(2 * MiB)
        second, second_huge = emulated_memfd("poold-test", 2 * MiB, huge=True)
        os.close(second)
        assert not second_huge  # no room: shmem instead
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)  # sealed here too
    finally:
        os.close(fd)
