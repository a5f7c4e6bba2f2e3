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
from typing import Any

import httpx
import pytest

from poold.daemon import app
from poold.daemon.sdnotify import Notifier, keep_watchdog
from tests.daemon_fixtures import free_port, serving_daemon
from tests.timing import START_S, patience, until

WATCHDOG_USEC = 400_000  # pings every 0.2 s: several within a second
WATCHDOG_S = WATCHDOG_USEC / 2 / 1e6
PERIOD_S = 0.05  # of keep_watchdog run directly


class FakeSystemd:
    """The receiving end of NOTIFY_SOCKET; every datagram with its arrival time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[tuple[float, set[str]]] = []

    def receive(self, timeout_s: float) -> set[str] | None:
        """The next datagram, waiting up to `timeout_s` (0: only one already queued)."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(4096)
        except (TimeoutError, BlockingIOError):
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

    def wait_for_count(self, line: str, count: int, timeout_s: float) -> None:
        """Until `count` datagrams holding `line` have arrived from now on."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while seen < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{seen} of {count} {line} within {timeout_s:g}s: {self.messages}"
            got = self.receive(left)
            seen += got is not None and line in got

    def drain(self, line: str) -> int:
        """How many datagrams holding `line` are queued now (a datagram is queued here once
        its sender's send returned), read without waiting for more."""
        seen = 0
        while (got := self.receive(0)) is not None:
            seen += line in got
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
    """Pings are counted over a number of the watchdog's probes in each state, not over a
    stretch of wall-clock time: the loop probes, pings if healthy, sleeps, in that order, all in
    this event loop, so once the fifth probe of a state has begun, the four before it have had
    their ping sent (or not) into the fake's queue."""
    notifier = Notifier(systemd.address)
    health = {"mode": "up"}
    probes = {"up": 0, "down": 0, "crash": 0}

    async def probe() -> str | None:
        mode = health["mode"]
        probes[mode] += 1
        if mode == "crash":
            raise RuntimeError("probe crashed")
        return None if mode == "up" else "ledger down"

    async def pings_while(mode: str) -> int:
        health["mode"], probes[mode] = mode, 0
        systemd.drain("WATCHDOG=1")  # what was sent before the switch: all queued by now
        deadline = time.monotonic() + patience(5 * PERIOD_S)
        while probes[mode] < 5:
            assert time.monotonic() < deadline, f"the watchdog stopped probing ({mode})"
            await asyncio.sleep(0.01)
        return systemd.drain("WATCHDOG=1")

    async def scenario() -> list[int]:
        task = asyncio.create_task(keep_watchdog(notifier, PERIOD_S, probe))
        counts = [await pings_while(mode) for mode in ("up", "down", "crash", "up")]
        task.cancel()
        return counts

    up, down, crashed, back = asyncio.run(scenario())
    assert up >= 4 and back >= 4
    assert down == 0 and crashed == 0


def test_daemon_watchdog_stops_when_the_writer_stops(tmp_path: Path, systemd: FakeSystemd,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", systemd.address)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    found: list[str | None] = []  # what each of the daemon's watchdog probes found
    real = app.ledger_problem

    async def probe(*args: Any, **kwargs: Any) -> str | None:
        problem = await real(*args, **kwargs)
        found.append(problem)
        return problem
    monkeypatch.setattr(app, "ledger_problem", probe)

    def problems_since(start: int) -> int:
        return sum(problem is not None for problem in found[start:])

    with serving_daemon(tmp_path) as (daemon, _url):
        systemd.wait_for_count("WATCHDOG=1", 3, patience(3 * WATCHDOG_S))
        daemon.ledger.writer.stop()  # as if it had died: nothing answers a command any more
        stopped = len(found)
        # A probe under way may still have succeeded and pinged; once one found the writer
        # gone, every such ping is queued (the watchdog probes and pings one after another).
        until("a probe finds the writer stopped", lambda: problems_since(stopped) >= 1,
              patience(WATCHDOG_S))
        systemd.drain("WATCHDOG=1")
        since = len(found)
        until("three more probes", lambda: problems_since(since) >= 3, patience(3 * WATCHDOG_S))
        assert systemd.drain("WATCHDOG=1") == 0


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
        systemd.wait_for("READY=1", START_S)
        # READY=1 means serving: the very first request on each socket is answered (not
        # refused, however long a loaded machine takes to answer it).
        assert httpx.get(f"http://127.0.0.1:{port}/healthz",
                         timeout=patience()).status_code == 200
        uds = httpx.HTTPTransport(uds=str(runtime / "api.sock"))
        with httpx.Client(transport=uds, base_url="http://poold", timeout=patience()) as client:
            assert client.get("/readyz").json()["status"] == "ready"
        systemd.wait_for_count("WATCHDOG=1", 3, patience(3 * WATCHDOG_S))
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
