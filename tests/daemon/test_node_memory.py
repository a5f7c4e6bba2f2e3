"""Leases on system-ram devices: the daemon hands the holder a memfd bound to the device's NUMA
node over its UNIX socket, and the same SDK maps it.

The sysfs tree is the recorded kmem one (dax0.1 onlined as system-ram) with its target node set
to 0, so the memfds are real ones bound to this host's node 0; the real-kernel tier
(tests/kernel/test_device_ops.py) proves the same on a new, CPU-less node."""

from __future__ import annotations

import errno
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from poold import errors
from poold.client import PooldClient
from poold.client.fdsocket import receive_fd
from poold.daemon import Daemon, nodemem
from poold.daemon.nodemem import node_memfd, page_nodes
from poold.ledger import reads
from poold.types import DeviceKind, MiB
from tests.daemon_fixtures import serving_daemon
from tests.sysfs_trees import extract

NODE_FILES = "devices/platform/hmem.0/dax0.1/target_node"


def _kmem_tree_on_node0(tmp_path: Path) -> Path:
    root = extract("sysfs-e-hmem-kmem", tmp_path / "recorded") / "sys"
    (root / NODE_FILES).write_text("0\n")
    return root


@pytest.fixture(params=[True, False], ids=["scrubbed", "unscrubbed"])
def served(request: pytest.FixtureRequest, tmp_path: Path
           ) -> Iterator[tuple[Daemon, PooldClient, str]]:
    state = tmp_path / "state"
    state.mkdir()
    unscrubbed = [] if request.param else ["node"]
    with serving_daemon(state, sysfs_root=_kmem_tree_on_node0(tmp_path), watch_udev=False,
                        device_pools={"dax0.1": "node"}, unscrubbed_pools=unscrubbed
                        ) as (daemon, url):
        sock = str(state / "fd.sock")
        with PooldClient(url, fd_socket=sock) as client:
            yield daemon, client, sock


def _numa_pages(address: int, length: int) -> set[int]:
    return set(page_nodes([address + i for i in range(0, length, mmap.PAGESIZE)]))


def _address(buffer: memoryview) -> int:
    import ctypes

    anchor = ctypes.c_char.from_buffer(buffer)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def _final(daemon: Daemon, lease_id: str) -> str:
    deadline = time.monotonic() + 20
    while True:
        state = daemon.ledger.read(lambda s, now: reads.lease(s, lease_id, now)).state
        if state.value not in ("active", "scrubbing") or time.monotonic() > deadline:
            return state.value
        time.sleep(0.05)


def test_a_fresh_memfd_is_zeroed_and_on_its_node() -> None:
    fd = node_memfd("poold-test", 0, 4 * MiB)
    try:
        with mmap.mmap(fd, 4 * MiB) as view:
            assert view[:] == bytes(4 * MiB)  # the kernel zero-fills it
            with memoryview(view) as buffer:
                assert _numa_pages(_address(buffer), 4 * MiB) == {0}
    finally:
        os.close(fd)


class VirtualTime:
    """nodemem's clock (its `time`): only its own sleeps move it, so how long it waited is
    exact however loaded the machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        assert self.now < 3600, "still retrying after an hour"


@pytest.fixture
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    clock = VirtualTime()
    monkeypatch.setattr(nodemem, "time", clock)
    return clock


def test_a_node_the_host_lacks_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                           virtual_time: VirtualTime) -> None:
    calls = not_allowed_yet(monkeypatch, refusals=0)  # the real mbind, counted
    with pytest.raises(OSError):
        node_memfd("poold-test", 63, 2 * MiB)
    assert calls.count("mbind") == 1 and virtual_time.now == 0  # no memory: no wait for it


def not_allowed_yet(monkeypatch: pytest.MonkeyPatch, refusals: int) -> list[str]:
    """mbind answers EINVAL `refusals` times, as it does while the kernel has yet to allow a
    node that just got memory to this process (its cpuset work runs a moment later); then the
    real syscall. Returns the calls made."""
    real, calls = nodemem._syscall, []

    def syscall(name: str, *args: object) -> int:
        calls.append(name)
        if name == "mbind" and calls.count("mbind") <= refusals:
            raise OSError(errno.EINVAL, "mbind: Invalid argument")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(nodemem, "_syscall", syscall)
    return calls


def test_a_node_just_onlined_is_bound_once_the_kernel_allows_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = not_allowed_yet(monkeypatch, refusals=3)
    fd = node_memfd("poold-test", 0, 2 * MiB)  # node 0 has memory
    os.close(fd)
    assert calls.count("mbind") == 4


def test_a_node_never_allowed_fails_after_the_settle_time(
        monkeypatch: pytest.MonkeyPatch, virtual_time: VirtualTime) -> None:
    calls = not_allowed_yet(monkeypatch, refusals=1_000_000)
    with pytest.raises(OSError) as refused:
        node_memfd("poold-test", 0, 2 * MiB)
    assert refused.value.errno == errno.EINVAL
    assert calls.count("mbind") > 1  # retried meanwhile
    # Gave up once the settle time had passed (by the clock it reads), and not much later.
    assert nodemem.BIND_SETTLE_S <= virtual_time.now < nodemem.BIND_SETTLE_S + 0.1


def test_lease_on_system_ram_maps_node_memory(served: tuple[Daemon, PooldClient, str]) -> None:
    daemon, client, _sock = served
    devices = {d.devname: d for d in client.devices()}
    assert (devices["dax0.1"].kind, devices["dax0.1"].numa_node) == ("system-ram", 0)
    with client.lease(8 * MiB, pool="node", keepalive=False) as lease:
        assert lease.info.device == "dax0.1"
        with lease.map() as first, lease.map() as second:
            assert first.via == "fd" and first.length == 8 * MiB
            first.buffer[:5] = b"numa!"
            second.buffer[-5:] = b"again"
            assert bytes(second.buffer[:5]) == b"numa!"  # one memfd per lease, not per map
            assert bytes(first.buffer[-5:]) == b"again"
            assert _numa_pages(_address(first.buffer), 8 * MiB) == {0}
        assert daemon.memory.leases(DeviceKind.SYSTEM_RAM) == {lease.id: 8 * MiB}
    # Ended: the daemon drops its memfd (after the lease's scrub, where the pool scrubs).
    assert _final(daemon, lease.id) == "released"
    deadline = time.monotonic() + 10
    while daemon.memory.leases(DeviceKind.SYSTEM_RAM) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.memory.leases(DeviceKind.SYSTEM_RAM) == {}
    usage = {p.name: p for p in client.pools()}["node"]
    assert usage.leased_bytes == 0 and usage.scrubbing_bytes == 0

    # The next lease on the same bytes of the ledger gets fresh memory: zeros.
    with client.lease(8 * MiB, pool="node", keepalive=False) as again, again.map() as mapping:
        assert mapping.buffer[:] == bytes(8 * MiB)


def test_capacity_is_the_devices_bytes(served: tuple[Daemon, PooldClient, str]) -> None:
    _daemon, client, _sock = served
    size = {d.devname: d.size for d in client.devices()}["dax0.1"]
    held = client.lease(size, pool="node", keepalive=False)
    with pytest.raises(errors.NoCapacity):
        client.lease(2 * MiB, pool="node", keepalive=False)
    held.release()


def test_no_memfd_without_the_token(served: tuple[Daemon, PooldClient, str]) -> None:
    daemon, client, sock = served
    mine = client.grant(2 * MiB, pool="node")
    other = client.grant(2 * MiB, pool="node")
    with pytest.raises(errors.NotLeaseHolder):
        receive_fd(sock, other.id, mine.token)
    # Nothing was made for a refused caller.
    assert daemon.memory.leases(DeviceKind.SYSTEM_RAM) == {}
    passed = receive_fd(sock, mine.id, mine.token)
    try:
        assert (passed.kind, passed.map_offset, passed.offset) == ("system-ram", 0, mine.offset)
        assert os.readlink(f"/proc/self/fd/{passed.fd}").startswith("/memfd:poold-")
    finally:
        os.close(passed.fd)


def test_a_full_node_is_refused_not_oom_killed(tmp_path: Path) -> None:
    root = _kmem_tree_on_node0(tmp_path)
    meminfo = root / "devices/system/node/node0/meminfo"
    meminfo.write_text("Node 0 MemTotal: 1945660 kB\nNode 0 MemFree: 1024 kB\n")
    state = tmp_path / "state"
    state.mkdir()
    with serving_daemon(state, sysfs_root=root, watch_udev=False,
                        device_pools={"dax0.1": "node"}) as (daemon, url), \
            PooldClient(url, fd_socket=str(state / "fd.sock")) as client:
        lease = client.lease(8 * MiB, pool="node", keepalive=False)
        with pytest.raises(errors.NoCapacity, match="node 0 has 1048576 bytes free"):
            lease.map()
        assert daemon.memory.leases(DeviceKind.SYSTEM_RAM) == {}
        lease.release()
