"""Tenants apart in the data path: what a lease holder is handed reaches its own memory and
nothing else, before and after the lease ends, and nothing it does to it hurts the daemon.

Each test is one of the attacks the isolation issue found on the old daemon (whose fd.sock
handed out the whole emulated device, a regular file in /dev/shm), made on a real daemon with
real sockets, by a real second local user (`nobody`) where the attack needs one:

1. tenant A's descriptor covers A's lease alone: B's bytes are nowhere in it, A's writes land
   in A's lease only;
2. ftruncate of what A was handed is refused (it is sealed), the device's size stays the
   device's, and the daemon lives on;
3. two daemons on one machine never share memory, and a second daemon on one state directory
   refuses to start;
4. A's mapping of a lease that ended never reaches the next holder of those ledger bytes;
5. idle connections to fd.sock delay nobody and leave no traceback.
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.client import PooldClient
from poold.client.fdsocket import receive_fd
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon.fdpass import REQUEST_TIMEOUT_S
from poold.daemon.statedir import StateDirBusy
from poold.types import MiB
from tests.daemon_fixtures import free_port, serving_daemon
from tests.timing import patience, until

NOBODY = 65534
DEVICE = 64 * MiB
LEASE = 8 * MiB
needs_root = pytest.mark.usefixtures("as_root")


@dataclass
class Served:
    daemon: Daemon
    url: str
    fd_socket: str
    admin: str

    def client(self, token: str | None = None) -> PooldClient:
        return PooldClient(self.url, token=token or self.admin, fd_socket=self.fd_socket)

    def tenant(self, name: str) -> str:
        with self.client() as admin:
            made = admin.raw("POST", "/v1/tokens",
                             json={"name": name, "role": "tenant", "tenant": name})
        return str(made["bearer"])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A daemon with auth on; its sockets where any user reaches them, its state private."""
    sockets = Path(tempfile.mkdtemp(prefix="poold-iso-"))
    sockets.chmod(stat.S_IRWXU | stat.S_IXGRP | stat.S_IXOTH)
    try:
        with serving_daemon(tmp_path / "state", auth="token", emulate_size=DEVICE,
                            runtime_dir=sockets) as (daemon, url):
            admin = (tmp_path / "state" / "admin.token").read_text().strip()
            yield Served(daemon, url, str(sockets / "fd.sock"), admin)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def as_nobody(work: Callable[..., Any], *args: Any) -> Any:
    """Run `work(*args)` in a child that is `nobody`; its return value, or its exception's text."""
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[Any] = ctx.Queue()

    def child() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        try:
            out.put(("ok", work(*args)))
        except BaseException as exc:
            out.put(("error", f"{type(exc).__name__}: {exc}"))

    process = ctx.Process(target=child)
    process.start()
    status, value = out.get(timeout=60)  # before join: a large answer fills the pipe
    process.join(30)
    assert status == "ok", value
    return value


def _what_a_descriptor_reaches(fd_socket: str, lease_id: str, token: str) -> dict[str, Any]:
    passed = receive_fd(fd_socket, lease_id, token)
    try:
        size = os.fstat(passed.fd).st_size
        inside = os.pread(passed.fd, size, 0)
        beyond = os.pread(passed.fd, DEVICE, size)  # nothing past the lease
        with mmap.mmap(passed.fd, size, mmap.MAP_SHARED) as view:
            view[:] = b"A" * size  # every byte A was handed
        try:
            mmap.mmap(passed.fd, size + 2 * MiB, mmap.MAP_SHARED)
            bigger = "mapped"
        except (ValueError, OSError) as exc:
            bigger = type(exc).__name__
        return {"size": size, "map_offset": passed.map_offset, "inside": inside,
                "beyond": beyond, "bigger": bigger}
    finally:
        os.close(passed.fd)


@needs_root
def test_a_descriptor_reaches_its_lease_and_nothing_else(served: Served) -> None:
    a_token, b_token = served.tenant("team-a"), served.tenant("team-b")
    with served.client(b_token) as b, served.client(a_token) as a:
        theirs = b.lease(DEVICE - 2 * LEASE, ttl_s=60, keepalive=False)
        with theirs.map() as mapping:
            mapping.buffer[:] = b"B" * (DEVICE - 2 * LEASE)  # B's prompts, every byte
        mine = a.grant(LEASE, ttl_s=60)
        seen = as_nobody(_what_a_descriptor_reaches, served.fd_socket, mine.id, mine.token)
        assert (seen["size"], seen["map_offset"]) == (LEASE, 0)
        assert b"B" not in seen["inside"] and seen["beyond"] == b""
        assert seen["bigger"] != "mapped"
        with theirs.map() as mapping:  # A's writes reached none of B's bytes
            assert bytes(mapping.buffer) == b"B" * (DEVICE - 2 * LEASE)
        with a.lease(LEASE, keepalive=False) as other, other.map() as mapping:
            assert bytes(mapping.buffer) == bytes(LEASE)  # nor A's own other lease
        # And what B is handed is B's: A's token opens nothing of B's.
        assert as_nobody(_refused, served.fd_socket, theirs.id, mine.token) == "NotLeaseHolder"
        theirs.release()


def _refused(fd_socket: str, lease_id: str, token: str) -> str:
    try:
        os.close(receive_fd(fd_socket, lease_id, token).fd)
    except Exception as exc:
        return type(exc).__name__
    return "passed"


def _resize(fd_socket: str, lease_id: str, token: str) -> list[str]:
    passed = receive_fd(fd_socket, lease_id, token)
    outcomes = []
    try:
        for size in (0, 2 * MiB, 1 << 40):
            try:
                os.ftruncate(passed.fd, size)
                outcomes.append(f"{size}: resized")
            except OSError as exc:
                outcomes.append(f"{size}: {os.strerror(exc.errno or 0)}")
    finally:
        os.close(passed.fd)
    return outcomes


@needs_root
def test_a_holder_cannot_resize_anything_or_crash_the_daemon(served: Served) -> None:
    a_token = served.tenant("team-a")
    with served.client(a_token) as a, served.client() as admin:
        for _round in range(3):  # granted, resized, released, granted again: as the attack did
            lease = a.grant(LEASE, ttl_s=60)
            outcomes = as_nobody(_resize, served.fd_socket, lease.id, lease.token)
            assert outcomes == [f"{size}: Operation not permitted"
                                for size in (0, 2 * MiB, 1 << 40)]
            with a.lease(2 * MiB, keepalive=False) as other, other.map() as mapping:
                mapping.buffer[:4] = b"live"  # the daemon and other leases go on
            a.release(lease.id)
        served.daemon.rescan()  # what sysfs and the settings say, nothing a holder changed
        (device,) = admin.devices()
        assert device.size == DEVICE  # the device's size is the device's
        assert httpx.get(f"{served.url}/healthz").status_code == 200


def test_two_daemons_on_one_machine_never_share_memory(tmp_path: Path) -> None:
    # Same host id, different state directories: once, both mapped one /dev/shm file.
    with serving_daemon(tmp_path / "one", emulate_size=DEVICE, host_id="same") as (_d1, one), \
            serving_daemon(tmp_path / "two", emulate_size=DEVICE, host_id="same") as (_d2, two), \
            PooldClient(one) as first, PooldClient(two) as second:
        x = first.lease(DEVICE, keepalive=False)
        y = second.lease(DEVICE, keepalive=False)
        assert x.info.offset == y.info.offset == 0  # the same ledger bytes, each its own ledger
        with x.map() as xm, y.map() as ym:
            xm.buffer[:] = b"x" * DEVICE
            assert bytes(ym.buffer) == bytes(DEVICE)
            ym.buffer[:] = b"y" * DEVICE
            assert bytes(xm.buffer) == b"x" * DEVICE
        y.release()  # its scrub empties its memory, not the other's
        until("y's scrub finishes", lambda: second.get_lease(y.id).state == "released",
              patience())
        with x.map() as xm:
            assert bytes(xm.buffer) == b"x" * DEVICE
        x.release()


def test_a_second_daemon_on_one_state_directory_refuses_to_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serving_daemon(state, emulate_size=DEVICE):
        with pytest.raises(StateDirBusy, match=f"pid {os.getpid()}.*{state}"):
            Daemon(Settings(state_dir=state, emulate_size=DEVICE, host_id="test-host",
                            watch_udev=False, discover_dax=False))
        port = free_port()
        refused = subprocess.run(
            [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", str(state),
             "--emulate", "64MiB", "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "POOLD_WATCH_UDEV": "false", "POOLD_DISCOVER_DAX": "false"})
        assert refused.returncode != 0
        assert "StateDirBusy" in refused.stderr and str(state) in refused.stderr


@needs_root
def test_an_ended_leases_mapping_never_reaches_the_next_holder(served: Served) -> None:
    a_token, b_token = served.tenant("team-a"), served.tenant("team-b")
    with served.client(a_token) as a, served.client(b_token) as b:
        first = a.lease(DEVICE, ttl_s=60, keepalive=False)
        old = first.map()  # A keeps this mapping after its lease ends
        old.buffer[:] = b"A" * DEVICE
        a.release(first.id)
        deadline = time.monotonic() + 20
        while True:  # granted once the scrub (emptying A's memory) is done
            try:
                second = b.lease(DEVICE, ttl_s=60, keepalive=False)
                break
            except Exception:
                assert time.monotonic() < deadline, "the extent never came back"
                time.sleep(0.05)
        assert second.info.offset == first.info.offset  # the same bytes of the ledger
        with second.map() as mapping:
            assert bytes(mapping.buffer) == bytes(DEVICE)  # none of A's
            mapping.buffer[:] = b"B" * DEVICE
            assert bytes(old.buffer) == bytes(DEVICE)  # A's old mapping: emptied, not B's
            old.buffer[:] = b"A" * DEVICE  # and what A writes there stays A's
            assert bytes(mapping.buffer) == b"B" * DEVICE
        old.close()
        second.release()


def test_idle_connections_to_fd_sock_delay_no_one(served: Served,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    idle = []
    # Granted first: the idle connections time out REQUEST_TIMEOUT_S after they open, and only
    # the descriptor's answer has to come within that (a daemon's first grant may take longer
    # on a loaded machine).
    with served.client() as client, caplog.at_level(logging.INFO, logger="poold.daemon.fdpass"):
        lease = client.grant(2 * MiB)
        for _ in range(8):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(served.fd_socket)
            idle.append(sock)
        try:
            passed = receive_fd(served.fd_socket, lease.id, lease.token)
            os.close(passed.fd)
            # Answered while every idle connection is still open: not after their time-out.
            for sock in idle:
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)  # nothing yet, and not closed
            for sock in idle:
                sock.setblocking(True)
                sock.settimeout(REQUEST_TIMEOUT_S * 3)
                assert sock.recv(1) == b""  # closed by the daemon after its time-out
        finally:
            for sock in idle:
                sock.close()
    # fdpass's own records: caplog also holds what other loggers of this process logged then.
    fdpass = [r for r in caplog.records if r.name == "poold.daemon.fdpass"]
    assert not [r for r in fdpass if r.exc_info], "an idle close logged a traceback"
    assert any(r.getMessage().startswith("fdpass.dropped") for r in fdpass)
