"""Each pool's capacity over the last hour: the daemon samples /v1/capacity every
capacity_sample_s and keeps an hour in memory; GET /v1/capacity/history returns it, oldest
first, and drops what is older than the window."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.history import CapacityHistory
from poold.ledger.capacity import Capacity, PoolCapacity, Split
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon
from tests.timing import patience, until


def capacity_of(leased: int, size: int = 64 * MiB) -> Capacity:
    split = Split(size=size, leased=leased, scrubbing=0, idle=0, free=size - leased, draining=0)
    return Capacity(pools=[PoolCapacity(name="default", devices=1, missing_devices=0,
                                        live_leases=1, bytes=split)], devices=[])


def test_history_keeps_an_hour_and_drops_older_samples() -> None:
    history = CapacityHistory(period_s=30, window_s=3600)
    for i in range(200):  # 100 minutes of samples, 30 s apart
        history.add(1_000_000 + 30 * i, capacity_of(leased=i * MiB))
    samples = history.pools()["default"]
    assert samples[-1].at == 1_000_000 + 30 * 199
    assert samples[0].at == samples[-1].at - 3600  # an hour, both ends kept
    assert len(samples) == 121
    assert [s.leased for s in samples[-2:]] == [198 * MiB, 199 * MiB]
    assert samples[-1].free == 64 * MiB - 199 * MiB


def test_a_pool_gone_for_an_hour_leaves_the_history() -> None:
    history = CapacityHistory(period_s=30, window_s=3600)
    history.add(0, capacity_of(leased=0))
    history.add(3601, Capacity(pools=[], devices=[]))
    assert history.pools() == {}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_daemon_samples_every_pool(tmp_path: Path, ledger_url: str) -> None:
    with serving_daemon(tmp_path, database_url=ledger_url, emulate_size=64 * MiB,
                        capacity_sample_s=0.2) as (_daemon, url):
        lease = httpx.post(f"{url}/v1/leases", json={"size": 8 * MiB}).json()

        def leased_sample() -> list[dict[str, float]]:
            found = httpx.get(f"{url}/v1/capacity/history").json()
            return [s for s in found["pools"].get("default", []) if s["leased"] == 8 * MiB]

        assert until("a sample with the lease", leased_sample, patience(5))
        history = httpx.get(f"{url}/v1/capacity/history").json()
        assert (history["period_s"], history["window_s"]) == (0.2, 3600)
        samples = history["pools"]["default"]
        assert [s["at"] for s in samples] == sorted(s["at"] for s in samples)
        assert all(s["size"] == 64 * MiB for s in samples)
        assert lease["length"] == 8 * MiB
