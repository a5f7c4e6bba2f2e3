"""Renewal: the background loop that keeps a lease or a session alive.

It renews every third of the TTL, counted from when the last renewal was sent (the ledger's new
expiry is at least a TTL after that), so a slow answer does not push the next one out. A daemon
that cannot be reached, or whose ledger is down for a moment (503 LedgerUnavailable, e.g. a
database restart), is retried sooner until the holder's own expiry; an answer that the holder
is gone (expired, revoked, unknown, or this host fenced from a shared ledger) loses it at once.
What is renewed and what losing it means are the owner's (poold.client.lease, .session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from poold import errors

# After a failed renewal that may pass (daemon or ledger unreachable), try again this soon.
RETRY_S = 0.5


class Renewal:
    """Calls `renew()` (which returns the TTL the daemon granted) in a daemon thread until
    stopped; calls `lose(reason)` once, and stops, when the holder is lost."""

    def __init__(self, name: str, ttl_s: int, renew: Callable[[], int],
                 lose: Callable[[str], None], *,
                 monotonic: Callable[[], float] = time.monotonic,
                 stop: threading.Event | None = None) -> None:
        """`monotonic` and `stop` (whose `wait(s)` is the sleep between renewals): the clock
        and the sleep, which tests replace to follow the schedule without waiting on it."""
        self._ttl_s = ttl_s
        self._renew, self._lose = renew, lose
        self._monotonic = monotonic
        self._stop = stop if stop is not None else threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing; waits for a renewal in flight unless called from the loop itself."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        period = max(self._ttl_s / 3, 0.05)
        deadline = self._monotonic() + self._ttl_s
        wait = period
        while not self._stop.wait(wait):
            sent = self._monotonic()
            try:
                ttl_s = self._renew()
            except errors.HostFenced as exc:
                self._lose(f"HostFenced: {exc.detail}")
                return
            except (errors.TransportError, errors.LedgerUnavailable) as exc:
                if self._monotonic() >= deadline:
                    self._lose(f"daemon unreachable until expiry ({exc})")
                    return
                wait = min(period, RETRY_S)
                continue
            except errors.PooldError as exc:
                self._lose(f"{type(exc).__name__}: {exc.detail}")
                return
            deadline = sent + ttl_s
            wait = max(0.0, sent + period - self._monotonic())
