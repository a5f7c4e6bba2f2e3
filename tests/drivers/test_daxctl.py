"""drivers.daxctl on writable copies of recorded real-kernel trees, with a fake kernel answering
the writes: each operation reaches the state daxctl would, each refusal names the device and the
errno and leaves sysfs exactly as it was, each failure half-way is rolled back."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from drivers.daxctl import DaxControl
from drivers.errors import KernelRefused
from drivers.numa import scan_memory_blocks, scan_nodes
from drivers.sysfs import Sysfs, write_text
from poold.types import MiB
from tests.drivers.fake_kernel import FakeKernel

SUBDIVIDED = "sysfs-d-hmem-subdivided"  # dax0.0 size 0, dax0.1-0.3 256 MiB each, 256 MiB free
KMEM = "sysfs-e-hmem-kmem"  # the same, with dax0.1 onlined as system-ram (node 1)


@pytest.fixture
def kernel(tmp_path: Path) -> FakeKernel:
    return FakeKernel(SUBDIVIDED, tmp_path)


@pytest.fixture
def dax(kernel: FakeKernel) -> DaxControl:
    return DaxControl(kernel)


def devices(dax: DaxControl) -> dict[str, tuple[int, str | None]]:
    return {d.chardev: (d.size, d.driver) for d in dax.region(0).devices}


def test_create_sizes_aligns_and_binds_a_new_device(kernel: FakeKernel, dax: DaxControl) -> None:
    device = dax.create_device(0, 128 * MiB)
    assert (device.chardev, device.size, device.driver) == ("dax0.4", 128 * MiB, "device_dax")
    assert device.mappings[0].start == 0x100000000 + 768 * MiB  # the free gap after dax0.3
    assert dax.region(0).available_size == 128 * MiB
    assert [w for w, _v in kernel.writes] == [
        "devices/platform/hmem.0/dax_region/create", "bus/dax/devices/dax0.4/size",
        "bus/dax/drivers/device_dax/bind"]


def test_create_with_another_align_writes_it_before_the_size(kernel: FakeKernel,
                                                             dax: DaxControl) -> None:
    device = dax.create_device(0, 64 * MiB, align=4096)
    assert device.align == 4096
    assert [w.rsplit("/", 1)[1] for w, _v in kernel.writes] == ["create", "align", "size", "bind"]


@pytest.mark.parametrize(("size", "align", "code", "words"), [
    (512 * MiB, None, errno.ENOSPC, ("region0", "536870912 bytes asked", "268435456 available",
                                     "ENOSPC")),
    (3 * MiB, None, errno.EINVAL, ("region0", "not a positive multiple", "EINVAL")),
    (0, None, errno.EINVAL, ("region0", "EINVAL")),
    (64 * MiB, 8192, errno.EINVAL, ("align 8192", "EINVAL")),
])
def test_create_refusals_write_nothing(kernel: FakeKernel, dax: DaxControl, size: int,
                                       align: int | None, code: int,
                                       words: tuple[str, ...]) -> None:
    before = kernel.snapshot()
    with pytest.raises(KernelRefused, match=r"(?s)" + ".*".join(words)) as caught:
        dax.create_device(0, size, align)
    assert caught.value.errno == code
    assert kernel.writes == [] and kernel.snapshot() == before


def test_a_static_region_cannot_be_subdivided(tmp_path: Path) -> None:
    kernel = FakeKernel("sysfs-c-legacy-pmem-devdax", tmp_path)
    with pytest.raises(KernelRefused, match=r"static") as caught:
        DaxControl(kernel).create_device(0, 64 * MiB)
    assert caught.value.errno == errno.EOPNOTSUPP and kernel.writes == []


def test_create_failing_to_bind_is_undone(kernel: FakeKernel, dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.fail["device_dax/bind"] = errno.ENXIO
    with pytest.raises(KernelRefused, match=r"dax0.4.*ENXIO") as caught:
        dax.create_device(0, 128 * MiB)
    assert caught.value.device == "dax0.4"
    assert kernel.snapshot() == before  # sized back to 0 and deleted


def test_destroy_unbinds_shrinks_and_deletes(kernel: FakeKernel, dax: DaxControl) -> None:
    dax.destroy_device("dax0.2")
    assert "dax0.2" not in devices(dax)
    assert not (kernel.root / "bus/dax/devices/dax0.2").exists()
    assert dax.region(0).available_size == 512 * MiB
    assert [v for _w, v in kernel.writes] == ["dax0.2", "0", "dax0.2"]


def test_the_regions_first_device_cannot_be_destroyed(kernel: FakeKernel,
                                                      dax: DaxControl) -> None:
    before = kernel.snapshot()
    with pytest.raises(KernelRefused, match=r"dax0.0.*first device.*EBUSY"):
        dax.destroy_device("dax0.0")
    assert kernel.writes == [] and kernel.snapshot() == before


def test_destroy_failing_to_delete_restores_size_and_binding(kernel: FakeKernel,
                                                             dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.fail["dax_region/delete"] = errno.EBUSY
    with pytest.raises(KernelRefused, match=r"dax0.3.*EBUSY"):
        dax.destroy_device("dax0.3")
    assert kernel.snapshot() == before


def test_unknown_device(dax: DaxControl) -> None:
    with pytest.raises(KernelRefused, match=r"dax0.9.*no such dax device.*ENODEV"):
        dax.destroy_device("dax0.9")


def test_resize_shrinks_and_grows_in_place(kernel: FakeKernel, dax: DaxControl) -> None:
    assert dax.resize_device("dax0.3", 128 * MiB).size == 128 * MiB
    assert devices(dax)["dax0.3"] == (128 * MiB, "device_dax")
    assert dax.region(0).available_size == 384 * MiB
    assert dax.resize_device("dax0.3", 512 * MiB).size == 512 * MiB
    assert dax.resize_device("dax0.3", 512 * MiB).size == 512 * MiB  # no change, no write
    assert dax.region(0).available_size == 0


def test_first_device_shrinks_to_zero_and_stays_unbound(tmp_path: Path) -> None:
    kernel = FakeKernel(SUBDIVIDED, tmp_path)
    dax = DaxControl(kernel)
    dax.destroy_device("dax0.1")
    dax.resize_device("dax0.0", 256 * MiB)  # dax0.0 can hold memory again, and is bound
    assert devices(dax)["dax0.0"] == (256 * MiB, "device_dax")
    dax.resize_device("dax0.0", 0)
    assert devices(dax)["dax0.0"] == (0, None)


def test_resize_past_available_writes_nothing(kernel: FakeKernel, dax: DaxControl) -> None:
    before = kernel.snapshot()
    with pytest.raises(KernelRefused, match=r"dax0.1.*needs 536870912 more.*ENOSPC"):
        dax.resize_device("dax0.1", 768 * MiB)
    assert kernel.writes == [] and kernel.snapshot() == before


def test_resize_the_kernel_refuses_is_rolled_back(kernel: FakeKernel, dax: DaxControl) -> None:
    before = kernel.snapshot()
    with pytest.raises(KernelRefused, match=r"dax0.1.*ENOSPC"):  # no room right after dax0.1
        dax.resize_device("dax0.1", 512 * MiB)
    assert kernel.snapshot() == before


def test_system_ram_devices_are_busy(tmp_path: Path) -> None:
    kernel = FakeKernel(KMEM, tmp_path)
    dax = DaxControl(kernel)
    before = kernel.snapshot()
    for action in (lambda: dax.resize_device("dax0.1", 128 * MiB),
                   lambda: dax.destroy_device("dax0.1")):
        with pytest.raises(KernelRefused, match=r"dax0.1.*system-ram.*EBUSY"):
            action()
    assert kernel.writes == [] and kernel.snapshot() == before


def nodes(kernel: Sysfs) -> dict[int, int | None]:
    blocks, _size = scan_memory_blocks(kernel)
    return {n.node: n.mem_total for n in scan_nodes(kernel, blocks)}


def test_to_system_ram_and_back(kernel: FakeKernel, dax: DaxControl) -> None:
    before = kernel.snapshot()
    assert nodes(kernel) == {0: nodes(kernel)[0]}
    done = dax.to_system_ram("dax0.2")
    assert done.device.mode == "system-ram" and done.device.movable
    assert done.online_blocks == (34, 35) and done.offline_blocks == ()
    assert nodes(kernel)[1] == 256 * MiB  # a CPU-less node with the device's memory
    assert dax.to_system_ram("dax0.2").online_blocks == (34, 35)  # already: no change

    back = dax.to_devdax("dax0.2")
    assert back.device.mode == "devdax" and back.device.driver == "device_dax"
    assert 1 not in nodes(kernel)
    assert kernel.snapshot() == before


def test_blocks_that_will_not_offline_are_named_and_stay_online(kernel: FakeKernel,
                                                                dax: DaxControl) -> None:
    dax.to_system_ram("dax0.2")
    online = kernel.snapshot()
    kernel.stuck.add(35)
    with pytest.raises(KernelRefused, match=r"dax0.2.*would not offline: memory35.*EBUSY"):
        dax.to_devdax("dax0.2")
    assert kernel.snapshot() == online  # memory34 went offline and came back


def test_onlining_failure_hands_the_device_back_to_device_dax(kernel: FakeKernel,
                                                              dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.fail["memory35/state"] = errno.ENOMEM
    with pytest.raises(KernelRefused, match=r"dax0.2/memory35.*ENOMEM"):
        dax.to_system_ram("dax0.2")
    assert kernel.snapshot() == before and kernel.kmem_ids == set()


def test_plain_write_names_device_path_and_errno(tmp_path: Path) -> None:
    with pytest.raises(KernelRefused) as caught:
        write_text(tmp_path / "missing" / "size", "0", "dax9.9")
    assert caught.value.errno == errno.ENOENT
    assert "dax9.9" in str(caught.value) and "ENOENT" in str(caught.value)
    assert str(tmp_path / "missing" / "size") in str(caught.value)


# A write the kernel accepts is still read back: when the attribute then disagrees, the
# operation fails naming the device and the attribute, and is undone like any other failure.

def test_create_whose_size_reads_back_otherwise_is_undone(kernel: FakeKernel,
                                                          dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.misread["dax0.4/size"] = str(126 * MiB)  # the write passed; the kernel shows another
    with pytest.raises(KernelRefused) as caught:
        dax.create_device(0, 128 * MiB)
    assert (caught.value.device, caught.value.errno) == ("dax0.4", errno.EIO)
    message = str(caught.value)
    assert str(kernel.root / "bus/dax/devices/dax0.4/size") in message
    assert "wrote 134217728, reads back 132120576" in message and "EIO" in message
    assert kernel.snapshot() == before  # sized back to 0 and deleted
    assert "dax0.4" not in devices(dax)


def test_resize_whose_size_reads_back_otherwise_is_restored(kernel: FakeKernel,
                                                            dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.misread["dax0.3/size"] = str(192 * MiB)
    with pytest.raises(KernelRefused, match=r"dax0.3/size: dax0.3: wrote 134217728, reads back "
                                            r"201326592 \[EIO") as caught:
        dax.resize_device("dax0.3", 128 * MiB)
    assert caught.value.errno == errno.EIO
    assert kernel.snapshot() == before  # 256 MiB again, bound again
    assert devices(dax)["dax0.3"] == (256 * MiB, "device_dax")


def test_create_whose_bind_attaches_no_driver_is_undone(kernel: FakeKernel,
                                                        dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.ignore.add("device_dax/bind")  # accepted, yet no driver link appears
    with pytest.raises(KernelRefused, match=r"dax0.4/driver: dax0.4: driver is none, expected "
                                            r"device_dax \[EIO"):
        dax.create_device(0, 128 * MiB)
    assert kernel.snapshot() == before


def test_block_that_reads_offline_after_onlining_hands_the_device_back(
        kernel: FakeKernel, dax: DaxControl) -> None:
    before = kernel.snapshot()
    kernel.misread["memory35/state"] = "offline"
    with pytest.raises(KernelRefused, match=r"memory35/state: dax0.2/memory35: reads 'offline' "
                                            r"after online_movable \[EIO"):
        dax.to_system_ram("dax0.2")
    assert kernel.snapshot() == before and kernel.kmem_ids == set()


def test_a_partial_offline_puts_blocks_back_in_the_zone_they_were_in(
        kernel: FakeKernel, dax: DaxControl) -> None:
    dax.to_system_ram("dax0.2")
    for block in (34, 35):  # an operator onlined them as kernel memory (daxctl --no-movable)
        state = kernel.root / f"devices/system/memory/memory{block}/state"
        kernel.write(state, "offline", "test")
        kernel.write(state, "online_kernel", "test")
    assert dax.device("dax0.2")[1].movable is False
    online = kernel.snapshot()
    kernel.stuck.add(35)
    with pytest.raises(KernelRefused, match=r"would not offline: memory35 \(EBUSY\)") as caught:
        dax.to_devdax("dax0.2")
    assert caught.value.errno == errno.EBUSY
    assert kernel.snapshot() == online  # memory34 back online, in Normal, not Movable
