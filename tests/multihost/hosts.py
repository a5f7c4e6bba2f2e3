"""Several `poold serve` processes, each its own host id, sharing one emulated device (one ledger
device, its capacity arbitrated by claims) through one PostgreSQL ledger; helpers to lease from
them and check the bytes of leases (each lease's memory is its granting daemon's memfd, which
root opens by the lease's map_path)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.types import MiB
from tests.daemon_fixtures import free_port
from tests.timing import PROBE_S, START_S, patience, until

SHARED_UID = "test:shared-emu"


@dataclass
class Host:
    host_id: str
    process: subprocess.Popen[bytes]
    url: str
    state_dir: Path
    stderr_path: Path
    token: str = ""

    def call(self, method: str, path: str, timeout: float = 15.0, **kw: Any) -> httpx.Response:
        return httpx.request(method, f"{self.url}{path}", timeout=timeout,
                             headers={"Authorization": f"Bearer {self.token}"}, **kw)

    def grant(self, size: int, ttl_s: int = 60) -> httpx.Response:
        return self.call("POST", "/v1/leases", json={"size": size, "ttl_s": ttl_s})

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


def start_hosts(tmp_path: Path, database_urls: list[str], size: str,
                env: dict[str, str]) -> list[Host]:
    """One `poold serve` per URL (host-0, host-1, ...), all naming one shared emulated device;
    returned once every one answers /healthz (if one never does, all are stopped)."""
    hosts: list[Host] = []
    try:
        _start_hosts(hosts, tmp_path, database_urls, size, env)
    except BaseException:
        for host in hosts:
            host.stop()
        raise
    return hosts


def _start_hosts(hosts: list[Host], tmp_path: Path, database_urls: list[str], size: str,
                 env: dict[str, str]) -> None:
    for i, url in enumerate(database_urls):
        host_id, port = f"host-{i}", free_port()
        state_dir = tmp_path / host_id
        stderr_path = tmp_path / f"{host_id}.stderr"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", str(state_dir),
                 "--database-url", url, "--emulate", size, "--listen", f"127.0.0.1:{port}",
                 "--host-id", host_id],
                stdout=subprocess.DEVNULL, stderr=stderr,
                env={**os.environ, "POOLD_EMULATE_UID": SHARED_UID, "POOLD_WATCH_UDEV": "false",
                     "POOLD_DISCOVER_DAX": "false", **env})
        hosts.append(Host(host_id, process, f"http://127.0.0.1:{port}", state_dir, stderr_path))
        if i == 0:
            _wait_healthy(hosts[0])  # the first one migrates the schema alone
    for host in hosts:
        _wait_healthy(host)


def _wait_healthy(host: Host) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if host.process.poll() is not None:
            pytest.fail(f"{host.host_id} exited with {host.process.returncode}:\n{host.stderr()}")
        try:
            if httpx.get(f"{host.url}/healthz", timeout=PROBE_S).status_code == 200:
                host.token = (host.state_dir / "admin.token").read_text().strip()
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.05)
    host.kill()
    pytest.fail(f"{host.host_id} not healthy after {START_S}s:\n{host.stderr()}")


def wait_until_granting(host: Host) -> None:
    """Until `host` grants a small lease; failing, say what it answered last and what it
    logged (a full pool, a fenced host and a broken ledger connection each need another fix)."""
    answers: list[httpx.Response] = []

    def granted() -> bool:
        answers[:] = [host.grant(2 * MiB)]
        return answers[0].status_code == 201
    try:
        until(f"{host.host_id} grants again", granted, patience(), 0.2)
    except AssertionError as missing:
        last = answers[0]
        raise AssertionError(f"{missing}: last answer {last.status_code} {last.text[:300]}\n"
                             f"{host.stderr()}") from None


def pattern(lease_id: str, length: int) -> bytes:
    """What a lease's holder writes into its bytes: its own id, repeated."""
    unit = hashlib.sha256(lease_id.encode()).digest()
    return unit * (length // len(unit))


def write_pattern(lease: dict[str, Any]) -> None:
    fd = os.open(lease["map_path"], os.O_RDWR)
    try:
        os.pwrite(fd, pattern(lease["id"], lease["length"]), lease["map_offset"])
    finally:
        os.close(fd)


def pattern_intact(lease: dict[str, Any]) -> bool:
    """The lease's memory still holds its holder's pattern (a live lease whose memory was taken
    or emptied would not)."""
    try:
        fd = os.open(lease["map_path"], os.O_RDONLY)
    except FileNotFoundError:  # its daemon let go of the memory: not intact
        return False
    try:
        return os.pread(fd, lease["length"], lease["map_offset"]) == pattern(lease["id"],
                                                                             lease["length"])
    finally:
        os.close(fd)


def run_fsck(database_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "poold.cli.main", "fsck", "--state-dir",
                           str(tmp_path / "fsck"), "--database-url", database_url],
                          capture_output=True, text=True, timeout=60)
