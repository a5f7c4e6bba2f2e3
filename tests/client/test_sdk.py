"""The client SDK against a real daemon: lease, map (real mmap of the emulated device), keep
alive, release, expiry, lost leases, and the daemon's errors rebuilt as the same classes."""

from __future__ import annotations

import os
import threading
import types
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest

import poold.client
from poold import errors
from poold.client import Mapping, PooldClient
from poold.types import MiB
from tests.client.conftest import REAP_INTERVAL_S
from tests.daemon_fixtures import free_port
from tests.timing import patience, tolerance, until


def test_lease_maps_exactly_its_memory_and_bytes_reach_it(client: PooldClient) -> None:
    with client.lease(2 * MiB) as first, client.lease(4 * MiB, ttl_s=5) as lease:
        assert lease.info.offset == first.info.offset + 2 * MiB  # the ledger's accounting
        assert lease.info.kind == "emulated" and lease.info.map_offset == 0
        assert lease.info.map_path != first.info.map_path  # a memory object each
        with lease.map() as mapping:
            assert len(mapping.buffer) == 4 * MiB
            mapping.buffer[:5] = b"hello"
            mapping.buffer[-3:] = b"end"
        assert lease.info.map_path is not None
        with open(lease.info.map_path, "rb") as memory:  # what root maps, as the README does
            assert os.fstat(memory.fileno()).st_size == 4 * MiB
            assert memory.read(5) == b"hello"
            memory.seek(4 * MiB - 3)
            assert memory.read(3) == b"end"
        assert client.pools()[0].leased_bytes == 6 * MiB
    assert client.pools()[0].leased_bytes == 0
    assert client.get_lease(lease.id).state in ("scrubbing", "released")  # the pool scrubs


def test_numpy_view_is_zero_copy(client: PooldClient) -> None:
    with client.lease(2 * MiB) as lease, lease.map() as mapping:
        array = mapping.numpy()
        array[:4] = [1, 2, 3, 4]
        assert bytes(mapping.buffer[:4]) == b"\x01\x02\x03\x04"
        assert array.nbytes == 2 * MiB and array.dtype == np.uint8
        del array


def renewals(client: PooldClient, lease_id: str, at_least: int) -> list[datetime]:
    """When the ledger renewed the lease, oldest first, once it did `at_least` times."""
    found = sorted(e.at for e in client.events(lease_id=lease_id, kind="lease.renewed"))
    return found if len(found) >= at_least else []


def test_background_keepalive_outlives_the_ttl(client: PooldClient) -> None:
    ttl, count = 3, 5
    with client.lease(2 * MiB, ttl_s=ttl) as lease:
        # One thread renews it, named for the lease (what a thread dump shows an operator),
        # never holding the process at exit.
        (renewer,) = [t for t in threading.enumerate()
                      if t.name == f"poold-keepalive-{lease.id[:8]}"]
        assert renewer.daemon
        renewed = until(f"{count} renewals", lambda: renewals(client, lease.id, count),
                        patience(count * ttl))
        lease.check()
        info = client.get_lease(lease.id)
        assert info.state == "active"
        # On the ledger's timestamps: alive past its first TTL, renewed every third of it. Once
        # per TTL, the count-th renewal would come `count` TTLs after the grant at the soonest.
        span = renewed[count - 1] - info.granted_at
        assert timedelta(seconds=ttl) < span < timedelta(seconds=count * ttl), span


class FailingKeepalives(httpx.BaseTransport):
    """The seam between SDK and daemon: the next `count` keepalives get `answer` instead of
    the daemon's; everything else goes through to the real daemon."""

    def __init__(self, answer: httpx.Response | None, count: int) -> None:
        self._real = httpx.HTTPTransport()
        self._answer, self.left = answer, count

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/keepalive") and self.left > 0:
            self.left -= 1
            if self._answer is None:
                raise httpx.ConnectError("connection refused", request=request)
            return self._answer
        return self._real.handle_request(request)


def _unavailable(error: str) -> httpx.Response:
    return httpx.Response(503, json={"error": error, "detail": "ledger down (injected)"})


@pytest.mark.parametrize("answer", [_unavailable("LedgerUnavailable"), None],
                         ids=["ledger-503", "unreachable"])
def test_a_passing_outage_does_not_lose_the_lease(url: str, answer: httpx.Response | None
                                                  ) -> None:
    """Three keepalives fail (one period, then two retries 0.5 s apart); the next, well before
    the lease's expiry (a TTL of 6 s leaves 2.5 s to spare), goes through."""
    ttl = 6
    transport = FailingKeepalives(answer, count=3)
    with PooldClient(url, transport=transport) as client, \
            client.lease(2 * MiB, ttl_s=ttl) as lease:
        granted = lease.info.expires_at
        # Past the outage: a renewal goes through again (none could before it).
        until("a renewal after the outage", lambda: lease.lost or lease.info.expires_at > granted,
              patience(ttl))
        assert transport.left == 0
        lease.check()
        assert client.get_lease(lease.id).state == "active"


def test_a_fenced_host_loses_the_lease_at_once(url: str) -> None:
    ttl = 3
    transport = FailingKeepalives(_unavailable("HostFenced"), count=1)
    with PooldClient(url, transport=transport) as client:
        lease = client.lease(2 * MiB, ttl_s=ttl)
        until("the lease is lost", lambda: lease.lost, patience(ttl))  # first renewal: ttl/3
        with pytest.raises(errors.LeaseLost, match="HostFenced"):
            lease.check()
        lease.release()


def test_lease_without_keepalive_expires_within_one_reaper_period(client: PooldClient) -> None:
    ttl = 1
    lease = client.lease(2 * MiB, ttl_s=ttl, keepalive=False)
    (expired,) = until("the reaper finalises the lease", lambda: client.events(
        lease_id=lease.id, kind="lease.expired"), patience(ttl, REAP_INTERVAL_S))
    assert client.pools()[0].leased_bytes == 0
    assert client.devices()[0].claimed_bytes == 64 * MiB  # the host keeps its claim
    info = client.get_lease(lease.id)
    # Judged on the ledger's own timestamps: finalised after its expiry, by a reaper pass
    # within a period of it (late by what a loaded machine holds a pass back, no more).
    late = (expired.at - info.expires_at).total_seconds()
    assert 0 <= late < tolerance(REAP_INTERVAL_S), late
    # The pool zeroes the bytes, then the lease is final.
    until("the scrub finishes", lambda: client.get_lease(lease.id).state != "scrubbing",
          patience(REAP_INTERVAL_S))
    assert client.get_lease(lease.id).state == "expired"


def test_revoked_lease_is_reported_lost(client: PooldClient) -> None:
    ttl = 3  # not so short that a late renewal on a loaded machine lets it expire first
    lease = client.lease(2 * MiB, ttl_s=ttl)
    client.raw("POST", f"/v1/leases/{lease.id}/revoke")
    until("the keepalive hears of the revocation", lambda: lease.lost, patience(ttl))
    with pytest.raises(errors.LeaseLost, match="LeaseNotActive"):
        lease.check()
    with pytest.raises(errors.LeaseLost):
        lease.map()
    lease.release()  # still idempotent


def test_daemon_errors_come_back_as_the_same_classes(client: PooldClient) -> None:
    with pytest.raises(errors.InvalidRequest):
        client.grant(0)
    with pytest.raises(errors.LeaseTooLarge):
        client.grant(65 * MiB)
    with pytest.raises(errors.UnknownLease):
        client.release("nope")
    with pytest.raises(errors.NoCapacity), client.lease(64 * MiB):
        client.grant(MiB)


def test_unreachable_daemon_is_a_transport_error() -> None:
    with PooldClient(f"http://127.0.0.1:{free_port()}", timeout_s=1) as client,\
            pytest.raises(errors.TransportError):
        client.pools()


def test_misaligned_extents_are_refused_before_mapping(tmp_path: Path) -> None:
    path = tmp_path / "dev"
    path.write_bytes(b"\0" * 8 * MiB)
    for offset, length in ((4096, 2 * MiB), (0, 4096), (2 * MiB, 0), (MiB, 2 * MiB)):
        with pytest.raises(errors.MisalignedExtent):
            Mapping(str(path), offset, length, 2 * MiB)
    with Mapping(str(path), 2 * MiB, 2 * MiB, 2 * MiB) as mapping:
        mapping.buffer[0] = 7
    assert os.pread(os.open(path, os.O_RDONLY), 1, 2 * MiB) == b"\x07"


def test_public_names() -> None:
    assert sorted(poold.client.__all__) == sorted(
        name for name in dir(poold.client) if not name.startswith("_")
        and not isinstance(getattr(poold.client, name), types.ModuleType)
    )
    for name in poold.client.__all__:
        assert getattr(poold.client, name) is not None
