"""The file descriptor stores that keep lease memory across restarts, each half against the real
protocol: FDSTORE=1 / FDSTOREREMOVE=1 datagrams with SCM_RIGHTS to a socket standing in for
systemd's notify socket, LISTEN_FDS / LISTEN_FDNAMES in a child process started the way systemd
starts a service, and the keeper (poold.keeper) as the process it is."""

from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from poold.daemon.fdstore import KeeperStore, SystemdStore
from poold.daemon.sdnotify import Notifier
from tests.daemon_fixtures import stop_keeper


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(5)
    yield sock
    sock.close()


def receive(sock: socket.socket) -> tuple[set[str], list[int]]:
    fds = array.array("i")
    message, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, kind, data in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return set(message.decode().splitlines()), list(fds)


def memfd(content: bytes) -> int:
    fd = os.memfd_create("test")
    os.write(fd, content)
    return fd


def test_systemd_store_sends_each_memfd_named_and_forgets_it(notify_socket: socket.socket,
                                                              tmp_path: Path) -> None:
    store = SystemdStore(Notifier(str(tmp_path / "notify")))
    fd = memfd(b"lease bytes")
    try:
        store.put("0123abcd", fd)
        lines, fds = receive(notify_socket)
        assert lines == {"FDSTORE=1", "FDNAME=0123abcd"} and len(fds) == 1
        assert os.pread(fds[0], 11, 0) == b"lease bytes"  # the same memory, a duplicate
        os.close(fds[0])
        store.remove("0123abcd")
        assert receive(notify_socket) == ({"FDSTOREREMOVE=1", "FDNAME=0123abcd"}, [])
    finally:
        os.close(fd)


CHILD = """
import json, os
from poold.daemon.fdstore import SystemdStore
from poold.daemon.sdnotify import Notifier
found = SystemdStore(Notifier(None)).recover()
print(json.dumps({name: os.pread(fd, 5, 0).decode() for name, fd in found.items()}
                 | {"env_left": [k for k in os.environ if k.startswith("LISTEN_")]}))
"""


def test_systemd_store_takes_back_what_systemd_passes_at_start() -> None:
    first, second = memfd(b"first"), memfd(b"other")
    high = [os.dup2(first, 100), os.dup2(second, 101)]

    def as_systemd_does() -> None:  # the stored descriptors from 3 on, named in the env
        os.dup2(100, 3)
        os.dup2(101, 4)

    try:
        # LISTEN_PID is the service's own pid: the shell's, which exec keeps.
        out = subprocess.run(
            ["sh", "-c", 'export LISTEN_PID=$$; exec "$0" -c "$1"', sys.executable, CHILD],
            pass_fds=(3, 4, *high), preexec_fn=as_systemd_does,
            env={**os.environ, "LISTEN_FDS": "2", "LISTEN_FDNAMES": "lease-a:lease-b"},
            capture_output=True, text=True, timeout=60)
    finally:
        for fd in (first, second, *high):
            os.close(fd)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"lease-a": "first", "lease-b": "other", "env_left": []}


def test_the_keeper_holds_descriptors_for_the_next_daemon(tmp_path: Path) -> None:
    first = KeeperStore(tmp_path, linger_s=60)
    fd = memfd(b"kept by the keeper")
    try:
        assert first.recover() == {}  # starts the keeper; nothing kept yet
        first.put("lease-1", fd)
        first.put("lease-2", fd)
        first.remove("lease-2")
        first.close()  # this daemon stops
        again = KeeperStore(tmp_path, linger_s=60)
        found = again.recover()
        assert set(found) == {"lease-1"}
        assert os.pread(found["lease-1"], 18, 0) == b"kept by the keeper"
        os.close(found["lease-1"])
        again.close()
    finally:
        os.close(fd)
        stop_keeper(tmp_path)
