"""Guarded background tasks: each eternal loop logs its own failure at once and keeps going."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


async def _one_pass(name: str, action: Callable[[], object]) -> None:
    """One run of a blocking `action` in a worker thread. A failure is logged with the task's
    name and the loop carries on: one bad pass must not stop the reaper for good."""
    try:
        await asyncio.to_thread(action)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("task.failed task=%s", name)


async def every(period_s: float, name: str, action: Callable[[], object]) -> None:
    """Run a blocking `action` in a worker thread every `period_s` until cancelled."""
    while True:
        await _one_pass(name, action)
        await asyncio.sleep(period_s)


async def when_woken(wake: asyncio.Event, idle_s: float, gap_s: float, name: str,
                     action: Callable[[], object]) -> None:
    """Run a blocking `action` in a worker thread each time `wake` is set, and every `idle_s`
    without a wake (for what nobody announces); passes at least `gap_s` apart, so a burst of
    wakes is one pass."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), idle_s)
        wake.clear()  # a wake during the pass asks for the next one
        await _one_pass(name, action)
        await asyncio.sleep(gap_s)
