"""A real poold (composition root + uvicorn) serving in a thread on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon.fdstore import KEEPER_SOCKET
from tests.timing import PROBE_S, START_S, until

STOP_S = 5  # a running request's time to finish once the daemon is asked to stop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=PROBE_S).is_success
    except httpx.TransportError:
        return False


@contextmanager
def serving_daemon(state_dir: Path, port: int | None = None,
                   **settings: Any) -> Iterator[tuple[Daemon, str]]:
    """Run a daemon until the block ends; yields it and its base URL.

    Auth is off unless the test asks (`auth="token"`): tests of other concerns act as admin
    without a token; tests/api/test_auth.py and the subprocess tests run it on. `port`: a free
    one unless given (a test that restarts a daemon where its clients expect it)."""
    port = free_port() if port is None else port
    defaults: dict[str, Any] = {
        "auth": "off",
        "state_dir": state_dir, "emulate_size": 64 * 2**20, "fd_store": "none",
        "listen": f"127.0.0.1:{port}", "host_id": "test-host", "reap_interval_s": 0.2,
        "runtime_dir": state_dir,
    }
    daemon = Daemon(Settings(**{**defaults, **settings}))
    # A request still running when the block ends (a long poll, a stream a test left open) is
    # cancelled after STOP_S rather than awaited: uvicorn would otherwise wait for it forever,
    # and with it the daemon's lifespan, whose reaper and scrubber would go on for the rest of
    # the session against a state directory that is gone.
    server = uvicorn.Server(uvicorn.Config(daemon.app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=STOP_S))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("daemon did not start")
        time.sleep(0.02)
    try:
        # Asked until it answers: on a loaded machine the first answer (the ledger's first
        # read, a fence lifted at the first tick) may take longer than one probe's timeout.
        until("the daemon answers /healthz", lambda: _healthy(url), START_S)
        yield daemon, url
    finally:
        server.should_exit = True
        thread.join(2 * STOP_S + 10)
        if thread.is_alive():  # a leak would show as another test's failure: say it here
            raise RuntimeError(f"the daemon on port {port} did not stop")


@contextmanager
def serve_process(workdir: Path, ready: Callable[[int], bool], **env: str) -> Iterator[int]:
    """`poold serve` as a process on a free port, with a 64 MiB emulated device, state in
    `workdir`/s, no fd store (unless `fd_store` says), no dax discovery and `POOLD_<NAME>`
    settings from `env`; yields its port once `ready(port)`.
    (The UNIX socket and TLS are served only by `poold serve` itself, not by serving_daemon.)"""
    port = free_port()
    environ = {**os.environ, "POOLD_FD_STORE": "none", "POOLD_WATCH_UDEV": "false",
               "POOLD_DISCOVER_DAX": "false", **{f"POOLD_{k.upper()}": v for k, v in env.items()}}
    log = workdir / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", str(workdir / "s"),
         "--emulate", "64MiB", "--listen", f"127.0.0.1:{port}"],
        env=environ, stderr=log.open("w"))
    try:
        deadline = time.monotonic() + START_S
        while not _probe(ready, port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"poold serve did not come up: {log.read_text()}"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def stop_keeper(state_dir: Path) -> None:
    """End the fd keeper a daemon on `state_dir` started (poold.keeper names its pid in its
    lock file), and with it the lease memory it held."""
    lock = state_dir / f"{KEEPER_SOCKET}.lock"
    try:
        pid = int(lock.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _probe(ready: Callable[[int], bool], port: int) -> bool:
    try:
        return ready(port)
    except httpx.HTTPError:
        return False
