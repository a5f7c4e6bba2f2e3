"""Each pool's capacity over the last hour, sampled by the daemon, kept in memory, so the admin
UI's overview shows a trend without Prometheus.

Every daemon samples the whole ledger (every pool, whichever host serves it), so any daemon of a
shared ledger draws the same trend. Kept in memory: a restarted daemon starts a new hour (the
metrics endpoint is where long histories belong).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from poold.ledger.capacity import Capacity

WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the epoch, this host's clock
    size: int
    leased: int
    scrubbing: int
    free: int  # grantable now: unclaimed, or claimed by a host and idle


class CapacityHistory:
    """Samples no older than `window_s` per pool; safe to read while the sampler writes."""

    def __init__(self, period_s: float, window_s: float = WINDOW_S) -> None:
        self.period_s = period_s
        self.window_s = window_s
        self._lock = threading.Lock()
        self._pools: dict[str, deque[Sample]] = {}

    def add(self, at: float, capacity: Capacity) -> None:
        with self._lock:
            for pool in capacity.pools:
                b = pool.bytes
                samples = self._pools.setdefault(pool.name, deque())
                samples.append(Sample(at=at, size=b.size, leased=b.leased,
                                      scrubbing=b.scrubbing, free=b.free + b.idle))
            for name, samples in list(self._pools.items()):
                while samples and samples[0].at < at - self.window_s:
                    samples.popleft()
                if not samples:
                    del self._pools[name]  # a pool gone (retired) for an hour

    def pools(self) -> dict[str, list[Sample]]:
        with self._lock:
            return {name: list(samples) for name, samples in self._pools.items()}
