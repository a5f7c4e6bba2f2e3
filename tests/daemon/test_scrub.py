"""Scrub on release end to end: a real daemon zeroes what tenant A held before tenant B can be
granted the same bytes, counts it, and the CLI shows the progress."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from poold.client import PooldClient
from poold.daemon import Daemon, scrub
from poold.errors import NoCapacity
from poold.inventory import DeviceSpec
from poold.types import DeviceKind, MiB
from tests.daemon_fixtures import serving_daemon
from tests.timing import patience, until

SIZE = 64 * MiB


def bearer(url: str, admin: str, name: str, tenant: str) -> str:
    with PooldClient(url, token=admin) as client:
        made = client.raw("POST", "/v1/tokens", json={"name": name, "role": "tenant",
                                                       "tenant": tenant})
    return str(made["bearer"])


def scrape(url: str) -> dict[str, float]:
    return {name: float(value) for name, value in (
        line.rsplit(" ", 1) for line in httpx.get(f"{url}/metrics").text.splitlines()
        if not line.startswith("#"))}


def test_tenant_b_reads_zeros_where_tenant_a_wrote(tmp_path: Path) -> None:
    with serving_daemon(tmp_path, auth="token", emulate_size=SIZE) as (_daemon, url):
        admin = (tmp_path / "admin.token").read_text().strip()
        a_token, b_token = (bearer(url, admin, "a", "team-a"), bearer(url, admin, "b", "team-b"))
        with PooldClient(url, token=a_token) as a, PooldClient(url, token=b_token) as b:
            first = a.lease(SIZE, ttl_s=60, keepalive=False)
            with first.map() as mapping:
                mapping.buffer[:] = b"\xa5" * SIZE  # A's secrets, every byte
            released = a.release(first.id)
            assert released.state == "scrubbing"

            deadline = time.monotonic() + 20
            while True:  # refused while the bytes are being zeroed, granted once they are
                try:
                    second = b.lease(SIZE, ttl_s=60, keepalive=False)
                    break
                except NoCapacity:
                    assert time.monotonic() < deadline, "the scrubber never freed the extent"
                    time.sleep(0.05)
            assert (second.info.offset, second.info.length) == (first.info.offset, SIZE)
            with second.map() as mapping:
                assert mapping.buffer[:] == bytes(SIZE)
            assert a.get_lease(first.id).state == "released"
        with PooldClient(url, token=admin) as client:
            kinds = [e.kind for e in client.events(lease_id=first.id)]
            assert kinds[:2] == ["lease.scrubbed", "lease.released"]
        metrics = scrape(url)
        assert metrics["poold_scrubbed_bytes_total"] == SIZE
        assert metrics["poold_scrubs_total"] == 1
        assert metrics['poold_pool_bytes{pool="default",state="scrubbing"}'] == 0
        assert metrics["poold_scrub_remaining_bytes"] == 0


def test_cli_release_waits_for_the_scrub_with_progress(tmp_path: Path) -> None:
    with serving_daemon(tmp_path, auth="token", emulate_size=SIZE) as (_daemon, url):
        admin = (tmp_path / "admin.token").read_text().strip()
        with PooldClient(url, token=admin) as client:
            lease = client.grant(SIZE, ttl_s=60)
        out = subprocess.run(
            [sys.executable, "-m", "poold.cli.main", "lease", "release", lease.id, "--url", url],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "POOLD_TOKEN": admin})
        assert out.returncode == 0, out.stderr
        assert '"state": "released"' in out.stdout
        assert "scrubbing [" in out.stderr and "100% 64MiB of 64MiB" in out.stderr


def test_metrics_show_a_large_scrub_under_way(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A 192 MiB extent of a devdax device is zeroed in three 64 MiB chunks; the scrubber is
    held before its last (at the memset seam) so a scrape lands mid-scrub: the extent counts as
    scrubbing in its pool and device, and the bytes still to zero are what is left. (The device
    is a tmpfs file standing in for a chardev: the scrubber maps it the same way.)"""
    large = 3 * scrub.CHUNK
    before_last, go_on = threading.Event(), threading.Event()
    chunks: list[int] = []
    memset = scrub._memset

    def held(size: int) -> Callable[[int, int, int], object]:
        def zero(address: int, value: int, count: int) -> object:
            chunks.append(count)
            if len(chunks) == 3:
                before_last.set()
                assert go_on.wait(30)
            return memset(size)(address, value, count)
        return zero

    monkeypatch.setattr(scrub, "_memset", held)
    backing = _chardev_file(tmp_path, large)
    try:
        during, after = _scrub_held(tmp_path, monkeypatch, backing, before_last, go_on)
        assert backing.read_bytes() == bytes(large)
    finally:
        backing.unlink()
    device = ('poold_device_bytes{device="filedax0",host="test-host",pool="default",'
              'state="scrubbing"}')
    assert during['poold_pool_bytes{pool="default",state="scrubbing"}'] == large
    assert during[device] == large
    assert during['poold_pool_bytes{pool="default",state="available"}'] == 0
    assert during["poold_scrub_remaining_bytes"] == scrub.CHUNK
    assert during["poold_scrubbed_bytes_total"] == 2 * scrub.CHUNK
    assert after['poold_pool_bytes{pool="default",state="scrubbing"}'] == 0
    assert after[device] == 0
    assert after["poold_scrub_remaining_bytes"] == 0
    assert after["poold_scrubbed_bytes_total"] == large
    assert chunks == [scrub.CHUNK] * 3


def _scrub_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backing: Path,
                before_last: threading.Event, go_on: threading.Event
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Grant all of the device, fill it, release it; scrape while the scrub is held and after
    it finished."""
    large = backing.stat().st_size
    with serving_daemon(tmp_path / "state", emulate_size=None) as (daemon, url), \
            PooldClient(url) as client:
        _add_devdax(daemon, monkeypatch, backing, large)
        lease = client.grant(large, ttl_s=60)
        assert lease.device == "filedax0"
        backing.write_bytes(b"\xa5" * large)
        assert client.release(lease.id).state == "scrubbing"
        assert before_last.wait(30), "the scrubber never started"
        try:
            during = scrape(url)
            assert client.get_lease(lease.id).state == "scrubbing"
        finally:
            go_on.set()
        deadline = time.monotonic() + 30
        while client.get_lease(lease.id).state == "scrubbing":
            assert time.monotonic() < deadline, "the scrub never finished"
            time.sleep(0.05)
        return during, scrape(url)


def _chardev_file(tmp_path: Path, size: int) -> Path:
    shm = Path("/dev/shm")
    path = (shm if shm.is_dir() else tmp_path) / f"poold-test-{tmp_path.name}-dax"
    path.write_bytes(b"")
    os.truncate(path, size)
    return path


def _add_devdax(daemon: Daemon, monkeypatch: pytest.MonkeyPatch, path: Path,
                size: int) -> None:
    """A devdax device whose chardev is `path`, found by the daemon's discovery from now on."""
    spec = DeviceSpec(uid=f"test:{path}", kind=DeviceKind.DEVDAX, devname="filedax0",
                      chardev=str(path), size=size, align=2 * MiB, host_local=True)
    found = daemon.discover
    monkeypatch.setattr(daemon, "discover", lambda: [*found(), spec])
    daemon.rescan()


def test_the_scrubber_runs_when_leases_end_not_on_a_timer(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle daemon does not look for scrub work (its reaper interval, the fallback, is an
    hour here); a release wakes the scrubber at once, which zeroes and frees the bytes."""
    passes: list[int] = []
    run_once = scrub.Scrubber.run_once

    def counted(self: scrub.Scrubber) -> int:
        passes.append(run_once(self))
        return passes[-1]

    monkeypatch.setattr(scrub.Scrubber, "run_once", counted)
    with serving_daemon(tmp_path, emulate_size=SIZE, reap_interval_s=3600) as (_daemon, url), \
            PooldClient(url) as client:
        until("the pass at start", lambda: len(passes) == 1, patience(10))
        time.sleep(0.5)  # what a poll every 0.1 s would have filled with passes
        assert passes == [0]
        lease = client.lease(SIZE, ttl_s=60, keepalive=False)
        with lease.map() as mapping:
            mapping.buffer[:] = b"\xa5" * SIZE
        assert client.release(lease.id).state == "scrubbing"
        until("the release is scrubbed",
              lambda: client.get_lease(lease.id).state == "released", patience(10))
        assert passes == [0, 1]
        again = client.lease(SIZE, ttl_s=60, keepalive=False)  # the same bytes, zeroed
        with again.map() as mapping:
            assert mapping.buffer[:] == bytes(SIZE)
