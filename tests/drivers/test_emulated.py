"""The emulated device's backing file and where it is put."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers import DriverFailure
from drivers.emulated import ensure_emulated_device, hugetlbfs_with_room

MiB = 2**20
MEMINFO = "MemTotal: 100 kB\nHugePages_Free:      {free}\nHugepagesize:       2048 kB\n"


def test_creates_grows_and_keeps_contents(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "emu0"
    device = ensure_emulated_device("emu0", path, 4 * MiB, 2 * MiB)
    assert device.size == 4 * MiB and path.stat().st_size == 4 * MiB
    with path.open("r+b") as f:
        f.write(b"keep me")
    grown = ensure_emulated_device("emu0", path, 8 * MiB, 2 * MiB)
    assert grown.size == 8 * MiB and path.read_bytes()[:7] == b"keep me"
    # Never shrunk under possible live leases: reported at its real size.
    assert ensure_emulated_device("emu0", path, 2 * MiB, 2 * MiB).size == 8 * MiB


@pytest.mark.parametrize("size", [0, -2 * MiB, 3 * MiB])
def test_bad_sizes_name_the_path(tmp_path: Path, size: int) -> None:
    with pytest.raises(DriverFailure, match=str(tmp_path)):
        ensure_emulated_device("emu0", tmp_path / "emu0", size, 2 * MiB)


def test_unwritable_location_is_a_driver_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DriverFailure, match="cannot prepare"):
        ensure_emulated_device("emu0", blocker / "emu0", 2 * MiB, 2 * MiB)


def test_hugetlbfs_is_chosen_only_with_enough_free_pages(tmp_path: Path) -> None:
    mounts = f"hugetlbfs {tmp_path} hugetlbfs rw,relatime,pagesize=2M 0 0\n"
    assert hugetlbfs_with_room(64 * MiB, mounts, MEMINFO.format(free=32)) == tmp_path
    assert hugetlbfs_with_room(66 * MiB, mounts, MEMINFO.format(free=32)) is None
    assert hugetlbfs_with_room(2 * MiB, "tmpfs /dev/shm tmpfs rw 0 0\n",
                               MEMINFO.format(free=32)) is None
    other = f"hugetlbfs {tmp_path} hugetlbfs rw,pagesize=1024M 0 0\n"
    assert hugetlbfs_with_room(2 * MiB, other, MEMINFO.format(free=32)) is None
    assert hugetlbfs_with_room(2 * MiB, mounts, "garbage") is None
