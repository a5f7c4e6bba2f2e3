"""A restart of the daemon keeps every lease: clients keep their mappings and keep renewing.

`poold serve` runs as a process, outside systemd: the memory of its emulated leases (a memfd
each) outlives it in the fd keeper it starts (poold.keeper). A client leases with the SDK
(keepalive in the background), maps the lease through the daemon's fd socket and writes to it.
The daemon is stopped with SIGTERM, or killed with SIGKILL, and started again on the same state
directory, runtime directory and port, while the client holds its mapping. Long after the
restart the lease is still active (renewed by the new daemon), the keepalive thread never called
it lost, the bytes are intact, and the new daemon passes the same lease's memory again: what the
old mapping writes, the new one reads. (Under systemd its file descriptor store does the
keeper's job: tests/kernel/test_service.py restarts the unit.)

Timing. A fresh `poold serve` needs about 3-5 s here before it answers (mostly imports), and
has taken half a minute on a loaded machine; the SDK renews every TTL/3, retries every 0.5 s
while the daemon is away, and calls a lease lost only when the daemon stays unreachable until the
lease's own expiry. With TTL_S = 40 and the stop sent right after a renewal, a restart that takes
less than 40 s keeps the lease, by construction rather than by luck. "Long after the restart" is
judged on the ledger's timestamps: the new daemon renews the lease past the expiry it had when
the old one stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from poold.client import PooldClient
from poold.client.lease import Lease
from poold.types import MiB
from tests.daemon_fixtures import free_port, stop_keeper
from tests.timing import PROBE_S, START_S, patience, until

pytestmark = pytest.mark.slow

TTL_S = 40
SIZE = 8 * MiB


class Serve:
    """`poold serve` as a process on a fixed state dir, runtime dir and port."""

    def __init__(self, tmp_path: Path, port: int) -> None:
        self.tmp_path = tmp_path
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "POOLD_FD_STORE": "keeper",
               "POOLD_RUNTIME_DIR": str(self.tmp_path / "run"), "POOLD_WATCH_UDEV": "false",
               "POOLD_DISCOVER_DAX": "false"}
        stderr = (self.tmp_path / f"serve-{self.starts}.stderr").open("wb")
        with stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir",
                 str(self.tmp_path / "state"), "--emulate", "64MiB", "--listen",
                 f"127.0.0.1:{self.port}", "--host-id", "restart-host"],
                stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"poold exited {self.process.returncode}: {self.stderr()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=PROBE_S).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        pytest.fail(f"poold not ready after {START_S}s: {self.stderr()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(30)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stderr(self) -> str:
        return (self.tmp_path / f"serve-{self.starts}.stderr").read_text(errors="replace")[-3000:]


def wait_for_renewal(lease: Lease) -> None:
    before = lease.info.expires_at
    until("the keepalive thread renews", lambda: lease.lost or lease.info.expires_at != before,
          patience(TTL_S / 3), interval_s=0.02)
    assert not lease.lost, lease.lost_reason


def renewed_at(client: PooldClient, lease_id: str) -> list[datetime]:
    return sorted(e.at for e in client.events(lease_id=lease_id, kind="lease.renewed"))


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_leases_mappings_and_renewals(tmp_path: Path, how: str) -> None:
    serve = Serve(tmp_path, free_port())
    serve.start()
    fd_socket = str(tmp_path / "run" / "fd.sock")
    pattern = os.urandom(SIZE)
    try:
        # The admin credential written at first start stays valid across restarts.
        token = (tmp_path / "state" / "admin.token").read_text().strip()
        with PooldClient(serve.url, fd_socket=fd_socket, timeout_s=5, token=token) as client:
            lease = client.lease(SIZE, ttl_s=TTL_S)
            with lease.map() as mapping:
                assert mapping.via == "fd"
                mapping.buffer[:] = pattern
                granted = client.get_lease(lease.id)

                wait_for_renewal(lease)  # the whole TTL now covers the gap
                due = lease.info.expires_at  # when the lease would end without the new daemon
                last_before = renewed_at(client, lease.id)[-1]
                stopped_at = time.monotonic()
                serve.stop() if how == "sigterm" else serve.kill()
                serve.start()
                gap = f"restart took {time.monotonic() - stopped_at:.1f} s"

                def renewed_past_due() -> bool:
                    return lease.lost or any(at > due for at in renewed_at(client, lease.id))
                # The new daemon renews it past `due` (three renewals at most after the stop).
                until(f"a renewal past the lease's expiry at the stop ({gap})", renewed_past_due,
                      patience(TTL_S, TTL_S / 3), interval_s=0.25)
                assert not lease.lost, f"{lease.lost_reason} ({gap})"
                lease.check()
                now = client.get_lease(lease.id)
                assert now.state == "active"
                assert (now.offset, now.length, now.generation) == \
                    (granted.offset, granted.length, granted.generation)
                assert bytes(mapping.buffer) == pattern
                with lease.map() as again:  # the new daemon hands out the same memory
                    assert bytes(again.buffer) == pattern
                    mapping.buffer[:5] = b"after"
                    assert bytes(again.buffer[:5]) == b"after"
            kinds = {e.kind for e in client.events(lease_id=lease.id)}
            assert "lease.expired" not in kinds and "lease.lost" not in kinds
            # Renewed under both daemons: before the stop, and at least twice by the new one.
            after = [at for at in renewed_at(client, lease.id) if at > last_before]
            assert last_before > granted.granted_at and len(after) >= 2, (last_before, after)
            lease.release()
            assert client.get_lease(lease.id).state in ("scrubbing", "released")
        serve.stop()
        assert "daemon.stopped" in serve.stderr()
    finally:
        serve.kill()
        stop_keeper(tmp_path / "state")
