"""sd_notify: the datagrams, the guarded watchdog, and `poold serve` speaking to a fake systemd.

The fake is a datagram socket the test binds and names in NOTIFY_SOCKET, as systemd does for a
Type=notify service: READY=1 must come once the API answers (TCP and api.sock), WATCHDOG=1 at
half of WATCHDOG_USEC while the ledger answers and not when it stops, STOPPING=1 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poold.daemon.sdnotify import Notifier, keep_watchdog
from tests.daemon_fixtures import free_port, serving_daemon

WATCHDOG_USEC = 400_000  # pings every 0.2 s: several within a second


class FakeSystemd:
    """The receiving end of NOTIFY_SOCKET; every datagram with its arrival time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[tuple[float, set[str]]] = []

    def receive(self, timeout_s: float) -> set[str] | None:
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return None
        lines = set(data.decode().splitlines())
        self.messages.append((time.monotonic(), lines))
        return lines

    def wait_for(self, line: str, timeout_s: float) -> float:
        """Arrival time of the first datagram holding `line` from now on."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            got = self.receive(left)
            if got is not None and line in got:
                return self.messages[-1][0]
        raise AssertionError(f"no {line} within {timeout_s}s; got {self.messages}")

    def count(self, line: str, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        seen = 0
        while (left := deadline - time.monotonic()) > 0:
            got = self.receive(left)
            seen += got is not None and line in got
        return seen

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[FakeSystemd]:
    fake = FakeSystemd(str(tmp_path / "notify"))
    yield fake
    fake.close()


def test_unset_socket_is_a_no_op() -> None:
    notifier = Notifier.from_environment({})
    assert not notifier.enabled and notifier.watchdog_period_s is None
    assert notifier.ready() is False and notifier.watchdog() is False


def test_abstract_socket_and_watchdog_period() -> None:
    fake = FakeSystemd(f"@poold-test-{uuid.uuid4().hex}")
    try:
        notifier = Notifier.from_environment({"NOTIFY_SOCKET": fake.address,
                                              "WATCHDOG_USEC": "30000000"})
        assert notifier.watchdog_period_s == 15.0
        assert notifier.ready("serving") is True
        assert fake.receive(2) == {"READY=1", "STATUS=serving"}
        notifier.stopping()
        assert "STOPPING=1" in (fake.receive(2) or set())
        notifier.close()
    finally:
        fake.close()


@pytest.mark.parametrize("env", [
    {"WATCHDOG_USEC": "0"}, {"WATCHDOG_USEC": "soon"},
    {"WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"},
])
def test_watchdog_off_unless_meant_for_us(env: dict[str, str]) -> None:
    if os.getpid() == 1:
        pytest.skip("running as pid 1")
    assert Notifier.from_environment({"NOTIFY_SOCKET": "/x", **env}).watchdog_period_s is None


def test_unsupported_address_disables() -> None:
    assert not Notifier.from_environment({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_a_vanished_socket_never_raises(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone"))
    assert notifier.watchdog() is False and notifier.watchdog() is False


def test_watchdog_pings_only_while_healthy(systemd: FakeSystemd) -> None:
    notifier = Notifier(systemd.address)
    health = {"mode": "up"}

    async def probe() -> str | None:
        if health["mode"] == "crash":
            raise RuntimeError("probe crashed")
        return None if health["mode"] == "up" else "ledger down"

    async def pings_while(mode: str) -> int:
        health["mode"] = mode
        await asyncio.to_thread(systemd.count, "WATCHDOG=1", 0.1)  # let a ping under way land
        return await asyncio.to_thread(systemd.count, "WATCHDOG=1", 0.5)

    async def scenario() -> list[int]:
        task = asyncio.create_task(keep_watchdog(notifier, 0.05, probe))
        counts = [await pings_while(mode) for mode in ("up", "down", "crash", "up")]
        task.cancel()
        return counts

    up, down, crashed, back = asyncio.run(scenario())
    assert up >= 3 and back >= 3
    assert down == 0 and crashed == 0


def test_daemon_watchdog_stops_when_the_writer_stops(tmp_path: Path, systemd: FakeSystemd,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", systemd.address)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    with serving_daemon(tmp_path) as (daemon, _url):
        assert systemd.count("WATCHDOG=1", 1.0) >= 3
        daemon.ledger.writer.stop()  # as if it had died: nothing answers a command any more
        systemd.count("WATCHDOG=1", 0.5)  # a ping already under way may still land
        assert systemd.count("WATCHDOG=1", 1.0) == 0


@pytest.mark.slow
def test_serve_notifies_ready_watchdog_and_stopping(tmp_path: Path, systemd: FakeSystemd) -> None:
    port = free_port()
    state, runtime = tmp_path / "state", tmp_path / "run"
    env = {**os.environ, "NOTIFY_SOCKET": systemd.address, "WATCHDOG_USEC": str(WATCHDOG_USEC),
           "POOLD_RUNTIME_DIR": str(runtime),
           "POOLD_WATCH_UDEV": "false"}
    env.pop("WATCHDOG_PID", None)
    with (tmp_path / "stderr").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", str(state),
             "--emulate", "64MiB", "--listen", f"127.0.0.1:{port}", "--host-id", "notify-host",
             "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        systemd.wait_for("READY=1", 60)
        # READY=1 means serving: the very first request on each socket is answered at once.
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        uds = httpx.HTTPTransport(uds=str(runtime / "api.sock"))
        with httpx.Client(transport=uds, base_url="http://poold", timeout=2) as client:
            assert client.get("/readyz").json()["status"] == "ready"
        assert systemd.count("WATCHDOG=1", 1.5) >= 3
        process.send_signal(signal.SIGTERM)
        systemd.wait_for("STOPPING=1", 10)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    records = [json.loads(line) for line in (tmp_path / "stderr").read_text().splitlines()]
    started = next(r for r in records if r["message"].startswith("daemon.started"))
    assert (started["host"], started["watchdog_s"]) == ("notify-host", "0.2")
    assert any(r["message"] == "daemon.stopped host=notify-host" for r in records)
    ready_lines = [lines for _at, lines in systemd.messages if "READY=1" in lines]
    assert len(ready_lines) == 1 and any(x.startswith("STATUS=serving") for x in ready_lines[0])
