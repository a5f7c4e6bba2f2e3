"""Requests per principal: a token bucket each, refilled at `rate_per_s` up to `burst`.

A tenant or a host agent that sends more is answered 429 RateLimited with Retry-After (the
seconds until its bucket holds a request again), before its request reaches the ledger; admins
are not limited. The buckets are this daemon's: each daemon of a shared ledger limits what it is
sent. One bucket per principal that has a credential (a token, or a uid poold maps), so their
number is bounded by what the ledger and the config name.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from poold.errors import RateLimited
from poold.types import Principal


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, principal: Principal) -> None:
        """One request of `principal`; RateLimited when its bucket is empty."""
        if principal.is_admin:
            return
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(principal.actor, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
            if tokens < 1.0:
                self._buckets[principal.actor] = (tokens, now)
                wait = math.ceil((1.0 - tokens) / self.rate_per_s)
                raise RateLimited(f"{principal.actor} is over its rate limit of "
                                  f"{self.rate_per_s:g} requests/s (burst {self.burst})",
                                  retry_after_s=max(1, wait))
            self._buckets[principal.actor] = (tokens - 1.0, now)
