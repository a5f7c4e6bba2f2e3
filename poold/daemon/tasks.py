"""Guarded background tasks: each eternal loop logs its own failure at once and keeps going."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


async def every(period_s: float, name: str, action: Callable[[], object]) -> None:
    """Run a blocking `action` in a worker thread every `period_s` until cancelled.

    A failure is logged with the task's name and the loop carries on: one bad pass must not stop
    the reaper for good.
    """
    while True:
        try:
            await asyncio.to_thread(action)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task.failed task=%s", name)
        await asyncio.sleep(period_s)
