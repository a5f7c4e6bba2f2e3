"""Mapping a lease without permission on the device: the daemon passes the open descriptor over
its UNIX socket (SCM_RIGHTS) to whoever shows the lease's token, and names the caller by
SO_PEERCRED. A caller that does not hold the lease gets nothing."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from poold import errors
from poold.client import Mapping, PooldClient
from poold.client import lease as lease_module
from poold.client.fdsocket import PassedFd, receive_fd
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon

NOBODY = 65534


@pytest.fixture
def daemon_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    state = tmp_path / "state"
    state.mkdir()
    with serving_daemon(state) as (_daemon, url):
        yield url, state


def test_map_through_a_passed_descriptor(daemon_dir: tuple[str, Path]) -> None:
    url, state = daemon_dir
    with PooldClient(url, fd_socket=str(state / "fd.sock")) as client, \
            client.lease(4 * MiB) as lease, lease.map() as mapping:
        assert mapping.via == "fd"
        mapping.buffer[:6] = b"passed"
        assert lease.info.map_path is not None
        with open(lease.info.map_path, "rb") as memory:
            assert memory.read(6) == b"passed"


def resident_bytes(mapping: Mapping) -> int:
    """How much of the mapping is in this process's page tables (Rss in /proc/self/smaps)."""
    start = ctypes.addressof(ctypes.c_char.from_buffer(mapping.buffer))
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and int(head.split("-")[0], 16) == start:
            rss = next(x for x in lines[i + 1:] if x.startswith("Rss:"))
            return int(rss.split()[1]) * 1024
    raise AssertionError("mapping not in /proc/self/smaps")


@pytest.mark.parametrize("through", ["fd", "open"])
def test_a_mapping_is_prefaulted_unless_asked_not_to_be(daemon_dir: tuple[str, Path],
                                                         through: str) -> None:
    url, state = daemon_dir
    fd_socket = str(state / "fd.sock") if through == "fd" else None
    with PooldClient(url, fd_socket=fd_socket) as client, client.lease(4 * MiB) as lease:
        with lease.map() as mapping:
            assert (mapping.via, mapping.chardev) == (through, lease.info.chardev
                                                      if through == "fd" else
                                                      lease.info.map_path)
            assert resident_bytes(mapping) == 4 * MiB
        with lease.map(prefault=False) as lazy:
            assert resident_bytes(lazy) == 0


def test_a_lease_no_path_reaches_needs_the_fd_socket(daemon_dir: tuple[str, Path]) -> None:
    url, _state = daemon_dir
    with PooldClient(url) as client, client.lease(2 * MiB) as lease:
        lease.info = lease.info.model_copy(update={"map_path": None})  # as system-ram answers
        with pytest.raises(errors.ClientError) as refused:
            lease.map()
        assert str(refused.value) == (
            f"lease {lease.id} is a {lease.info.kind} lease whose memory only its daemon can "
            "hand out: pass fd_socket= to the client")


def test_the_caller_is_named_by_its_credentials(daemon_dir: tuple[str, Path]) -> None:
    url, state = daemon_dir
    with PooldClient(url) as client:
        granted = client.grant(2 * MiB)
        passed = receive_fd(str(state / "fd.sock"), granted.id, granted.token)
        os.close(passed.fd)
    assert passed.peer == {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid()}
    assert (passed.offset, passed.length) == (granted.offset, granted.length)


def test_no_descriptor_without_the_lease(daemon_dir: tuple[str, Path]) -> None:
    url, state = daemon_dir
    sock = str(state / "fd.sock")
    with PooldClient(url) as client:
        mine = client.grant(2 * MiB)
        other = client.grant(2 * MiB)
        with pytest.raises(errors.NotLeaseHolder):
            receive_fd(sock, other.id, mine.token)  # a token for another lease
        with pytest.raises(errors.UnknownLease):
            receive_fd(sock, "nope", mine.token)
        client.release(mine.id)
        with pytest.raises(errors.LeaseNotActive):
            receive_fd(sock, mine.id, mine.token)  # released: the token is worthless now
        # Only the grant shows the token; reading a lease does not.
        assert "token" not in client.raw("GET", f"/v1/leases/{other.id}")


def test_a_descriptor_for_another_extent_is_refused_and_closed(
        daemon_dir: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the daemon ever pass the descriptor of another extent (here: the socket seam
    answers with the neighbour lease's), the client maps nothing, closes what it was passed and
    says which lease it was."""
    url, state = daemon_dir
    sock = str(state / "fd.sock")
    with PooldClient(url, fd_socket=sock) as client, client.lease(2 * MiB) as mine, \
            client.lease(2 * MiB) as other:
        passed: list[int] = []

        def neighbours(_path: str, _lease_id: str, _token: str) -> PassedFd:
            wrong = receive_fd(sock, other.id, other.token or "")
            passed.append(wrong.fd)
            return wrong

        monkeypatch.setattr(lease_module, "receive_fd", neighbours)
        with pytest.raises(errors.ClientError) as refused:
            mine.map()
        assert str(refused.value) == f"daemon passed a different extent for {mine.id}"
        assert len(passed) == 1
        with pytest.raises(OSError):
            os.fstat(passed[0])  # closed, not left open


def _map_as_nobody(fd_socket: str, lease_id: str, token: str, map_path: str,
                   out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    try:
        os.open(map_path, os.O_RDWR)
        out.put("could open the lease's memory itself")
        return
    except PermissionError:
        pass
    from poold.client.mapping import Mapping

    passed = receive_fd(fd_socket, lease_id, token)
    with Mapping(map_path, passed.map_offset, passed.length, passed.align,
                 fd=passed.fd) as mapping:
        mapping.buffer[:6] = b"nobody"
    os.close(passed.fd)
    out.put("mapped")


@pytest.mark.usefixtures("as_root")
def test_an_unprivileged_holder_maps_what_it_cannot_open(tmp_path: Path) -> None:
    # The sockets live where anyone may reach them; the lease's memory is the daemon's memfd,
    # which only root (or the daemon's user) may open by its path.
    sockets = Path(tempfile.mkdtemp(prefix="poold-fd-"))
    sockets.chmod(stat.S_IRWXU | stat.S_IXGRP | stat.S_IXOTH)
    try:
        with serving_daemon(tmp_path, runtime_dir=sockets) as (_daemon, url):
            _holder_as_nobody(url, sockets)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def _holder_as_nobody(url: str, state: Path) -> None:
    with PooldClient(url) as client:
        granted = client.grant(2 * MiB)
        assert granted.map_path is not None
        out: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()  # type: ignore[type-arg]
        child = multiprocessing.get_context("fork").Process(
            target=_map_as_nobody, args=(str(state / "fd.sock"), granted.id, granted.token,
                                         granted.map_path, out))
        child.start()
        child.join(30)
        assert out.get(timeout=5) == "mapped"
        with open(granted.map_path, "rb") as memory:
            assert memory.read(6) == b"nobody"
