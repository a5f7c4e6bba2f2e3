"""Other hosts on a served daemon's ledger, for the pages that show several: each is a second
writer on the same ledger through the API the multi-host tests use (tests/ledger/test_sharing.py),
as a second daemon would be. A live peer heartbeats every second, as a daemon's tick does; a
peer made with `silent_for_s` registered that long ago by its own clock and never again, so the
served daemon declares it lost at its next tick (host_ttl + grace is 40 s by default)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial

from poold.ledger import leases, registry
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView

BEAT_S = 1.0


class Peer:
    def __init__(self, ledger_url: str, host_id: str, silent_for_s: float | None = None) -> None:
        self.host_id = host_id
        clock = None
        if silent_for_s is not None:
            clock = ManualClock(datetime.now(UTC) - timedelta(seconds=silent_for_s))
        self.ledger = Ledger(ledger_url, host_id=host_id, default_pool="default", clock=clock)
        self.ledger.start()
        self._stop = threading.Event()
        self._beat()
        self._beats: threading.Thread | None = None
        if silent_for_s is None:
            self._beats = threading.Thread(target=self._beat_until_closed, daemon=True,
                                           name=f"beat-{host_id}")
            self._beats.start()

    def _beat(self) -> None:
        self.ledger.run(partial(registry.register_host, name=self.host_id))

    def _beat_until_closed(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._beat()

    def grant(self, size: int, tenant: str | None = None, device: str = "emu0",
              labels: dict[str, str] | None = None, ttl_s: int = 600) -> LeaseView:
        """A lease this host grants its own client (on a shared device: arbitrated by claims)."""
        request = GrantRequest(size=size, actor=f"test:{self.host_id}", pool="default",
                               ttl_s=ttl_s, labels=labels or {}, tenant=tenant, device=device)
        return self.ledger.run(partial(leases.grant, request=request))

    def close(self) -> None:
        self._stop.set()
        if self._beats is not None:
            self._beats.join(5)
        self.ledger.close()
