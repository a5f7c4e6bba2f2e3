"""Follows hotplug: udev events trigger a debounced rescan of sysfs.

A region creation fires a burst of events (cxl, nd, dax, memory) over a second or so; one rescan
after the burst settles sees the end state instead of a half-built one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from drivers.udev import UdevMonitor
from poold.osthread import name_this_thread

log = logging.getLogger(__name__)


class HotplugWatcher:
    def __init__(self, monitor: UdevMonitor, rescan: Callable[[], object],
                 debounce_s: float = 0.5) -> None:
        self._monitor = monitor
        self._rescan = rescan
        self._debounce_s = debounce_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rescans = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hotplug", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        name_this_thread()
        pending_since: float | None = None  # last event of the burst
        burst_start: float | None = None
        while not self._stop.is_set():
            try:
                subsystem = self._monitor.poll(min(self._debounce_s, 0.25))
            except Exception:
                log.exception("hotplug.monitor_failed; periodic rescans continue")
                return
            now = time.monotonic()
            if subsystem is not None:
                log.debug("hotplug.event subsystem=%s", subsystem)
                pending_since = now
                burst_start = burst_start or now
            settled = pending_since is not None and now - pending_since >= self._debounce_s
            # A burst that never settles still gets a rescan every few debounce periods.
            overdue = burst_start is not None and now - burst_start >= 8 * self._debounce_s
            if settled or overdue:
                pending_since = burst_start = None
                self._run_rescan()

    def _run_rescan(self) -> None:
        try:
            self._rescan()
            self.rescans += 1
        except Exception:
            log.exception("hotplug.rescan_failed")
