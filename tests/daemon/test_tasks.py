"""The daemon's background loops (poold/daemon/tasks.py): a failing pass is logged and the loop
goes on; a woken loop runs at each wake, once for a burst, and by itself when nothing wakes it."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from poold.daemon.tasks import every, when_woken
from tests.timing import patience


async def _until(what: str, done: threading.Event) -> None:
    if not await asyncio.to_thread(done.wait, patience()):
        raise AssertionError(f"timed out waiting until {what}")


def test_a_failing_pass_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    passes: list[int] = []
    second = threading.Event()

    def action() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("first pass fails")
        second.set()

    async def scenario() -> None:
        task = asyncio.create_task(every(0.0, "reaper", action))
        try:
            await _until("the pass after the failure ran", second)
        finally:
            task.cancel()

    with caplog.at_level(logging.ERROR, logger="poold.daemon.tasks"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records] == ["task.failed task=reaper"]
    assert caplog.records[0].exc_info is not None  # with its traceback


def test_a_woken_loop_runs_at_each_wake_once_per_burst(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    passes: list[int] = []
    ran = [threading.Event() for _ in range(3)]

    def action() -> None:
        passes.append(len(passes))
        ran[len(passes) - 1].set()
        if len(passes) == 2:
            raise RuntimeError("a failing pass does not stop the loop")

    async def scenario() -> None:
        wake = asyncio.Event()
        task = asyncio.create_task(when_woken(wake, idle_s=3600, gap_s=0.0, name="scrubber",
                                              action=action))
        try:
            for _ in range(5):  # a burst before the loop looks: one pass
                wake.set()
            await _until("the woken pass ran", ran[0])
            await asyncio.sleep(0.2)  # nothing woke it since: no pass (idle_s is an hour)
            assert passes == [0]
            wake.set()
            await _until("the second wake's pass ran", ran[1])
            wake.set()
            await _until("a wake after a failed pass still runs one", ran[2])
        finally:
            task.cancel()

    with caplog.at_level(logging.ERROR, logger="poold.daemon.tasks"):
        asyncio.run(scenario())
    assert passes == [0, 1, 2]
    assert [r.getMessage() for r in caplog.records] == ["task.failed task=scrubber"]


def test_a_loop_nothing_wakes_still_runs_every_idle_period() -> None:
    passes = threading.Event()

    async def scenario() -> None:
        task = asyncio.create_task(when_woken(asyncio.Event(), idle_s=0.05, gap_s=0.0,
                                              name="scrubber", action=passes.set))
        try:
            await _until("the idle fallback ran a pass", passes)
        finally:
            task.cancel()

    asyncio.run(scenario())
