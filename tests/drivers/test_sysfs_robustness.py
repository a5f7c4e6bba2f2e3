"""Sysfs parsers on damaged trees: missing optional attributes are None, garbage is a
DriverFailure naming the attribute's path, never a crash of another kind. Also the attributes
drivers.daxctl reads back after each write (to confirm it) answering garbage. Derandomised and
bounded, so CI runs the same examples every time."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers import DriverFailure
from drivers.daxctl import DaxControl
from drivers.topology import scan
from poold.types import MiB
from tests.drivers.fake_kernel import REGION, FakeKernel
from tests.sysfs_trees import extract

ATTRIBUTES = [
    "bus/dax/devices/dax0.1/size", "bus/dax/devices/dax0.1/target_node",
    "bus/dax/devices/dax0.1/mapping0/start", "devices/platform/hmem.0/dax_region/available_size",
    "devices/system/node/online", "devices/system/memory/block_size_bytes",
    "devices/system/memory/memory32/state", "devices/system/node/node1/meminfo",
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract("sysfs-e-hmem-kmem", tmp_path_factory.mktemp("tree")) / "sys"


def damaged(pristine: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(pristine, into, symlinks=True)
    return into


def test_missing_optional_attributes_read_as_none(pristine: Path, tmp_path: Path) -> None:
    root = damaged(pristine, tmp_path / "sys")
    (root / "devices/platform/hmem.0/dax0.1/target_node").unlink()
    (root / "devices/platform/hmem.0/dax_region/available_size").unlink()
    topology = scan(root)
    (region,) = topology.dax_regions
    assert region.available_size is None and not region.dynamic
    assert next(d for d in region.devices if d.chardev == "dax0.1").target_node is None


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A directory for one example's copy of a tree: on tmpfs where there is one, since each
    example copies some 600 files (ten times faster there than on a loaded disk)."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as directory:
        yield Path(directory)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(attribute=st.sampled_from(ATTRIBUTES),
       content=st.binary(min_size=1, max_size=40).filter(lambda b: not b.strip().isdigit()))
def test_garbage_attributes_fail_cleanly(pristine: Path, attribute: str, content: bytes) -> None:
    with scratch() as directory:
        _garbled_scan_fails_cleanly(damaged(pristine, directory / "fuzz"), attribute, content)


def _garbled_scan_fails_cleanly(root: Path, attribute: str, content: bytes) -> None:
    target = (root / attribute).resolve()
    target.write_bytes(content)
    try:
        scan(root)
    except DriverFailure as exc:
        assert str(target) in str(exc) or target.name in str(exc)


TREES = ["sysfs-a-cxl1-before-region", "sysfs-b-cxl1-region-devdax",
         "sysfs-c-legacy-pmem-devdax", "sysfs-d-hmem-subdivided", "sysfs-e-hmem-kmem"]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Every recorded tree with every attribute file in it (symlinks and directories aside)."""
    found = {}
    for name in TREES:
        root = extract(name, tmp_path_factory.mktemp(name)) / "sys"
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                       if p.is_file() and not p.is_symlink())
        found[name] = (root, files)
    return found


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), content=st.one_of(
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: f"{n}\n".encode()),
    st.sampled_from([b"", b"\n", b"0x", b"-1", b"18446744073709551616", b"1e9", b" 12 ",
                     b"\x00", b"online\x00", b"[unknown]"]),
))
def test_any_attribute_of_any_tree_garbled_fails_cleanly(
        trees: dict[str, tuple[Path, list[str]]], data: st.DataObject,
        content: bytes) -> None:
    """Garbage in any attribute of any recorded tree: discovery and the inventory built on it
    give a result or a DriverFailure, never another exception."""
    from poold.inventory import specs_from_topology

    root, files = trees[data.draw(st.sampled_from(TREES))]
    target = root / data.draw(st.sampled_from(files))
    original = target.read_bytes()
    target.write_bytes(content)  # garbled in place, restored after: one tree per module
    try:
        with contextlib.suppress(DriverFailure):
            specs_from_topology(scan(root))
    finally:
        target.write_bytes(original)


# --- what daxctl reads back after a write ----------------------------------------------------

SUBDIVIDED = "sysfs-d-hmem-subdivided"  # dax0.0 size 0, dax0.1-0.3 256 MiB each, 256 MiB free
KMEM = "sysfs-e-hmem-kmem"  # the same, with dax0.1 onlined as system-ram
OPERATIONS: dict[str, tuple[str, Callable[[DaxControl], object]]] = {
    "create": (SUBDIVIDED, lambda dax: dax.create_device(0, 128 * MiB)),
    "create with align": (SUBDIVIDED, lambda dax: dax.create_device(0, 64 * MiB, align=4096)),
    "resize": (SUBDIVIDED, lambda dax: dax.resize_device("dax0.2", 128 * MiB)),
    "destroy": (SUBDIVIDED, lambda dax: dax.destroy_device("dax0.3")),
    "to system-ram": (SUBDIVIDED, lambda dax: dax.to_system_ram("dax0.2")),
    "to devdax": (KMEM, lambda dax: dax.to_devdax("dax0.1")),
}
# Writes to these name a device: what daxctl then reads back is that device's driver link.
DRIVER_WRITES = {"bind", "unbind", "new_id", "remove_id", "delete"}
DRIVER_GARBAGE = ["file", "directory", "absent", "bogus driver"]


class GarbledReadBack(FakeKernel):
    """The fake kernel, where what write number `at` changed reads back as garbage: the written
    attribute itself (size, align, a memory block's state, a region's create), or for a bind,
    unbind, new_id, remove_id or delete the device's driver link. Until the next write only:
    the kernel's state is true, only the read lies, and the next write is judged on the truth."""

    def __init__(self, tree: str, workdir: Path, at: int, garbage: bytes, driver: str) -> None:
        super().__init__(tree, workdir)
        # (FakeKernel's own names start with one underscore: these are this class's.)
        self.garble_at, self.garbage, self.driver_garbage = at, garbage, driver
        self._count = 0
        self._truth: tuple[Path, str | bytes | None] | None = None  # link target, bytes, absent

    def write(self, path: Path, value: str, device: str) -> None:
        self._restore()
        try:
            super().write(path, value, device)
        finally:
            if self._count == self.garble_at:
                self._garble(path, value.strip())
            self._count += 1

    def _garble(self, path: Path, value: str) -> None:
        if path.name not in DRIVER_WRITES:
            self._truth = (path, path.read_bytes())
            path.write_bytes(self.garbage)
            return
        link = self.root / REGION / value / "driver"
        if not link.parent.is_dir():
            return  # the device is gone (deleted): nothing to read back
        self._truth = (link, os.readlink(link) if link.is_symlink() else None)
        link.unlink(missing_ok=True)
        if self.driver_garbage == "file":
            link.write_bytes(self.garbage)
        elif self.driver_garbage == "directory":
            link.mkdir()
        elif self.driver_garbage == "bogus driver":
            link.symlink_to("../../../../bus/dax/drivers/bogus")

    def _restore(self) -> None:
        if self._truth is None:
            return
        path, truth = self._truth
        self._truth = None
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        elif path.name == "driver":
            path.unlink(missing_ok=True)
        if isinstance(truth, bytes):
            path.write_bytes(truth)
        elif isinstance(truth, str):
            path.symlink_to(truth)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both trees extracted once; each example copies one (FakeKernel's `recorded` directory)."""
    found = tmp_path_factory.mktemp("recorded")
    for tree in (SUBDIVIDED, KMEM):
        extract(tree, found)
    return found


@contextlib.contextmanager
def workdir(recorded: Path) -> Iterator[Path]:
    with scratch() as directory:
        (directory / "recorded").symlink_to(recorded)
        yield directory


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(operation=st.sampled_from(sorted(OPERATIONS)), at=st.integers(min_value=0, max_value=5),
       driver=st.sampled_from(DRIVER_GARBAGE), garbage=st.one_of(
           st.binary(max_size=24),
           st.sampled_from([b"", b"\n", b"-1\n", b"0x\n", b"18446744073709551616\n", b"1e9\n",
                            b"online\x00", b"\xff\xfe", b"offline\n", b"online\n",
                            b"going-offline\n", b"dax0.9\n", b"dax0.1\n", b"0\n",
                            b"134217728\n", b"4096\n"])))
def test_garbage_read_back_after_a_daxctl_write_fails_cleanly(
        recorded: Path, operation: str, at: int, driver: str, garbage: bytes) -> None:
    """Whatever a confirming read returns, the operation completes or raises a DriverFailure
    (KernelRefused for a change it cannot confirm), never another exception."""
    tree, run = OPERATIONS[operation]
    with workdir(recorded) as directory:
        kernel = GarbledReadBack(tree, directory, at, garbage, driver)
        with contextlib.suppress(DriverFailure):
            run(DaxControl(kernel))


def test_a_size_that_reads_back_wrong_is_refused(recorded: Path) -> None:
    """The confirming read is not for show: a size the kernel took but reads back otherwise
    is a KernelRefused naming the attribute, and the device is put back as it was."""
    with workdir(recorded) as directory:
        kernel = GarbledReadBack(SUBDIVIDED, directory, 1, b"134217728\n", "file")
        dax = DaxControl(kernel)  # write 0 unbinds dax0.2, write 1 is its size
        with pytest.raises(DriverFailure, match="size") as refused:
            dax.resize_device("dax0.2", 64 * MiB)
        assert "wrote 67108864, reads back 134217728" in str(refused.value)
        _region, device = dax.device("dax0.2")
        assert (device.size, device.driver) == (256 * MiB, "device_dax")
