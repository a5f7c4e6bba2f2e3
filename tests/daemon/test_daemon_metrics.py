"""What the daemon's own tasks count: reaper expiries, reclaimed (lost) leases, rescans and the
ledger errors they meet. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from drivers import DriverFailure
from poold.config import Settings
from poold.daemon import Daemon
from poold.errors import LedgerUnavailable
from poold.ledger import leases
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest
from poold.types import MiB


def settings(tmp_path: Path, ledger_url: str, **extra: object) -> Settings:
    base: dict[str, object] = {
        "state_dir": tmp_path / "state", "database_url": ledger_url, "host_id": "metrics-host",
        "emulate_size": 64 * MiB, "emulate_dir": tmp_path, "discover_dax": False,
        "watch_udev": False, "runtime_dir": tmp_path,
    }
    return Settings(**{**base, **extra})  # type: ignore[arg-type]


@pytest.fixture
def daemon(tmp_path: Path, ledger_url: str, clock: ManualClock) -> Iterator[Daemon]:
    daemon = Daemon(settings(tmp_path, ledger_url), clock=clock)
    yield daemon
    daemon.ledger.close()


def sample(daemon: Daemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def grant(daemon: Daemon, ttl_s: int = 600) -> str:
    request = GrantRequest(size=8 * MiB, actor="test", ttl_s=ttl_s)
    return daemon.ledger.run(partial(leases.grant, request=request)).id


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
    assert sample(daemon, "poold_lease_reclaims_total", reason="lost") == 2
    assert sample(daemon, "poold_rescans_total", trigger="manual", outcome="ok") == 3


def test_leases_lost_while_down_count_at_start(tmp_path: Path, ledger_url: str,
                                               clock: ManualClock) -> None:
    first = Daemon(settings(tmp_path, ledger_url), clock=clock)
    grant(first)
    first.ledger.close()
    second = Daemon(settings(tmp_path, ledger_url, emulate_size=None), clock=clock)
    try:
        assert sample(second, "poold_lease_reclaims_total", reason="lost") == 1
    finally:
        second.ledger.close()


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
