"""This host's side of multi-host fencing: how long since its heartbeat last reached the ledger.

A daemon that has not written its heartbeat for host_ttl_s is *fenced*: it grants nothing and
answers every keepalive that the lease is lost, and once the ledger answers again it ends those
leases as lost before granting anew. Other hosts declare it lost only after host_ttl_s + grace_s
without a heartbeat, judged by the ledger's clock. The fence is measured from the moment the
daemon *submitted* its last successful heartbeat, which is before the ledger read its clock for
it, so the fence always falls before the others' deadline (by grace_s at least, as long as the
two clocks run at the same rate): no byte has two holders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Liveness:
    def __init__(self, host_ttl_s: float, grace_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.host_ttl_s = host_ttl_s
        self.grace_s = grace_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last_beat = monotonic()  # the daemon registers at start
        self._fenced_seen = False

    @property
    def lost_after_s(self) -> float:
        """Seconds of silence after which other hosts reclaim this one's capacity."""
        return self.host_ttl_s + self.grace_s

    def started(self) -> float:
        """Call before submitting a heartbeat; pass the result to `beat` once it committed."""
        return self._monotonic()

    def beat(self, started: float) -> None:
        """A heartbeat submitted at `started` committed. A fence already seen stays up until
        `recovered`: clients may have been told their leases are lost, so the ledger must say
        so too before this host grants again."""
        with self._lock:
            self._last_beat = max(self._last_beat, started)

    def recovered(self) -> None:
        """The leases of the fenced period are recorded lost: grant again."""
        with self._lock:
            if self._monotonic() - self._last_beat <= self.host_ttl_s:
                self._fenced_seen = False

    @property
    def fenced(self) -> bool:
        with self._lock:
            if self._monotonic() - self._last_beat > self.host_ttl_s:
                self._fenced_seen = True
            return self._fenced_seen

    @property
    def silent_s(self) -> float:
        with self._lock:
            return self._monotonic() - self._last_beat
