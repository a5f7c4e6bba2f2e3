"""What the daemon's own tasks count: reaper expiries, leases reclaimed for each reason (their
device lost, their host lost, this host fenced, expired and taken by a grant), rescans and the
ledger errors they meet. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from api.metrics import RECLAIM_REASONS
from drivers import DriverFailure
from poold.config import Settings
from poold.daemon import Daemon
from poold.daemon import app as daemon_app
from poold.errors import LedgerUnavailable, NoCapacity
from poold.ledger import leases, reads
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest
from poold.ledger.liveness import Liveness
from poold.types import LeaseState, MiB


def settings(tmp_path: Path, ledger_url: str, **extra: object) -> Settings:
    base: dict[str, object] = {
        "state_dir": tmp_path / "state", "database_url": ledger_url, "host_id": "metrics-host",
        "emulate_size": 64 * MiB, "discover_dax": False,
        "watch_udev": False, "runtime_dir": tmp_path,
    }
    return Settings(**{**base, **extra})  # type: ignore[arg-type]


@pytest.fixture
def daemon(tmp_path: Path, ledger_url: str, clock: ManualClock) -> Iterator[Daemon]:
    daemon = Daemon(settings(tmp_path, ledger_url), clock=clock)
    yield daemon
    daemon.close()


def sample(daemon: Daemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def grant(daemon: Daemon, ttl_s: int = 600, size: int = 8 * MiB) -> str:
    request = GrantRequest(size=size, actor="test", ttl_s=ttl_s)
    return daemon.ledger.run(partial(leases.grant, request=request)).id


def reclaims(daemon: Daemon) -> dict[str, float]:
    return {reason: sample(daemon, "poold_lease_reclaims_total", reason=reason)
            for reason in RECLAIM_REASONS}


def state(daemon: Daemon, lease_id: str) -> LeaseState:
    return daemon.ledger.read(lambda s, now: reads.lease(s, lease_id, now)).state


@pytest.fixture(params=["scrubbed", "unscrubbed"])
def two_hosts(tmp_path: Path, ledger_url: str, clock: ManualClock,
              request: pytest.FixtureRequest) -> Iterator[tuple[Daemon, Daemon]]:
    """Hosts a and b on one ledger and one shared emulated device, one ledger clock; the pool
    scrubs on release or not."""
    shared: dict[str, object] = {
        "emulate_uid": "test:shared-emu0",
        "unscrubbed_pools": ["default"] if request.param == "unscrubbed" else []}
    a = Daemon(settings(tmp_path / "a", ledger_url, host_id="host-a", **shared), clock=clock)
    b = Daemon(settings(tmp_path / "b", ledger_url, host_id="host-b", **shared), clock=clock)
    yield a, b
    a.close()
    b.close()


def ended(daemon: Daemon, state_: LeaseState) -> list[LeaseState]:
    """What a lease that ended as `state_` reads as: scrubbing first, where the pool scrubs."""
    scrubs = "default" not in daemon.settings.unscrubbed_pools
    return [LeaseState.SCRUBBING if scrubs else state_]


def test_reaper_counts_what_it_finalises(daemon: Daemon, clock: ManualClock) -> None:
    grant(daemon, ttl_s=5)
    grant(daemon, ttl_s=5)
    grant(daemon, ttl_s=500)
    clock.advance(10)
    assert daemon.tick() == 2
    assert daemon.tick() == 0
    assert sample(daemon, "poold_lease_expiries_total") == 2


def test_rescan_counts_leases_lost_with_their_device(daemon: Daemon) -> None:
    grant(daemon)
    grant(daemon)
    daemon.rescan()
    assert sample(daemon, "poold_rescans_total", trigger="manual", outcome="ok") == 1
    assert sample(daemon, "poold_lease_reclaims_total", reason="lost") == 0
    daemon.settings = daemon.settings.model_copy(update={"emulate_size": None})  # emu0 is gone
    daemon.rescan()
    daemon.rescan()
    assert reclaims(daemon) == {"lost": 2, "host_lost": 0, "fenced": 0, "expired": 0,
                                "elastic": 0}
    assert sample(daemon, "poold_rescans_total", trigger="manual", outcome="ok") == 3


def test_leases_lost_while_down_count_at_start(tmp_path: Path, ledger_url: str,
                                               clock: ManualClock) -> None:
    first = Daemon(settings(tmp_path, ledger_url), clock=clock)
    grant(first)
    first.close()
    second = Daemon(settings(tmp_path, ledger_url, emulate_size=None), clock=clock)
    try:
        assert sample(second, "poold_lease_reclaims_total", reason="lost") == 1
    finally:
        second.close()


def test_leases_of_a_lost_host_count_on_the_host_that_adopts_them(
        two_hosts: tuple[Daemon, Daemon], clock: ManualClock) -> None:
    a, b = two_hosts
    held = [grant(a), grant(a)]
    b.tick()
    assert reclaims(b) == dict.fromkeys(RECLAIM_REASONS, 0)
    clock.advance(a.settings.host_ttl_s + a.settings.host_grace_s + 1)  # a went silent
    b.tick()
    assert [state(b, lease) for lease in held] == ended(b, LeaseState.LOST) * 2
    assert reclaims(b) == {"lost": 0, "host_lost": 2, "fenced": 0, "expired": 0,
                           "elastic": 0}
    assert reclaims(a) == dict.fromkeys(RECLAIM_REASONS, 0)  # counted once, by the adopter
    b.tick()
    assert reclaims(b)["host_lost"] == 2


def test_expired_leases_a_grant_takes_back_count_as_expired(
        two_hosts: tuple[Daemon, Daemon], clock: ManualClock) -> None:
    """b's grant finds the shared device full of a's leases past their expiry, before a's reaper
    finalised them: b expires them itself and counts them; a's reaper then has none left. (In
    a pool that scrubs, their bytes wait for a's scrubber: b's grant is refused until then.)"""
    a, b = two_hosts
    held = [grant(a, ttl_s=5, size=32 * MiB) for _ in range(2)]
    clock.advance(6)
    try:
        grant(b, size=64 * MiB)
    except NoCapacity:
        assert ended(b, LeaseState.EXPIRED) == [LeaseState.SCRUBBING]
    b.tick()
    assert [state(b, lease) for lease in held] == ended(b, LeaseState.EXPIRED) * 2
    assert reclaims(b) == {"lost": 0, "host_lost": 0, "fenced": 0, "expired": 2,
                           "elastic": 0}
    assert a.tick() == 0
    assert reclaims(a)["expired"] == 0 and sample(a, "poold_lease_expiries_total") == 0


def test_a_fenced_hosts_own_leases_count_as_fenced(
        tmp_path: Path, ledger_url: str, clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Silent for host_ttl by its own monotonic clock (faked: the seam), the host is fenced; its
    next heartbeat that gets through records its leases lost before it grants again."""
    now = [0.0]
    monkeypatch.setattr(daemon_app, "Liveness", partial(Liveness, monotonic=lambda: now[0]))
    daemon = Daemon(settings(tmp_path, ledger_url), clock=clock)
    try:
        held = [grant(daemon), grant(daemon)]
        now[0] += daemon.settings.host_ttl_s + 1
        assert daemon.ledger.liveness is not None and daemon.ledger.liveness.fenced
        daemon.tick()
        assert [state(daemon, lease) for lease in held] == ended(daemon, LeaseState.LOST) * 2
        assert reclaims(daemon) == {"lost": 0, "host_lost": 0, "fenced": 2, "expired": 0,
                                    "elastic": 0}
    finally:
        daemon.close()


def test_failed_rescans_and_ledger_errors(daemon: Daemon,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_sysfs() -> None:
        raise DriverFailure("/sys/bus/dax", "unreadable")

    with monkeypatch.context() as patch:
        patch.setattr(daemon, "discover", broken_sysfs)
        with pytest.raises(DriverFailure):
            daemon.rescan(trigger="udev")
    assert sample(daemon, "poold_rescans_total", trigger="udev", outcome="failed") == 1

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise LedgerUnavailable("ledger write failed: OperationalError")

    monkeypatch.setattr(daemon.ledger, "run", unavailable)
    with pytest.raises(LedgerUnavailable):
        daemon.rescan(trigger="periodic")
    with pytest.raises(LedgerUnavailable):
        daemon.tick()
    assert sample(daemon, "poold_rescans_total", trigger="periodic", outcome="failed") == 1
    assert sample(daemon, "poold_ledger_errors_total", source="rescan") == 1
    assert sample(daemon, "poold_ledger_errors_total", source="reaper") == 1
