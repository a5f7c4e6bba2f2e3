"""How the ledger writer's thread wakes the scrubber (poold.daemon.app._leases_ended): every end it
tells reaches a pass, and a scrubber already woken costs the serving loop no second wake."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

import pytest

from poold.daemon import app as daemon_app
from poold.daemon.tasks import when_woken
from tests.timing import patience


class Told:
    """The scrubber's side of the seam: what the writer told it, taken by each pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._told: dict[str, bool] = {}
        self.taken: list[str] = []
        self.passes = 0

    def note_ended(self, ended: Mapping[str, bool]) -> None:
        with self._lock:
            self._told.update(ended)

    def run_once(self) -> None:
        with self._lock:
            told, self._told = self._told, {}
        self.taken.extend(told)
        self.passes += 1


def _counting_wakes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    wakes = [0]
    wake = daemon_app._wake

    def counted(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        wakes[0] += 1
        wake(loop, event)
    monkeypatch.setattr(daemon_app, "_wake", counted)
    return wakes


def test_a_scrubber_woken_already_is_told_without_a_second_wake(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wakes = _counting_wakes(monkeypatch)
    told = Told()

    async def scenario() -> None:
        loop, event = asyncio.get_running_loop(), asyncio.Event()
        await asyncio.to_thread(daemon_app._leases_ended, told, loop, event, {"a": False})
        await asyncio.sleep(0)  # the wake's callback runs
        assert event.is_set() and wakes == [1]
        await asyncio.to_thread(daemon_app._leases_ended, told, loop, event, {"b": True})
        assert wakes == [1]  # set already: no second wake
        event.clear()  # a pass began
        await asyncio.to_thread(daemon_app._leases_ended, told, loop, event, {"c": False})
        await asyncio.sleep(0)
        assert event.is_set() and wakes == [2]

    asyncio.run(scenario())
    told.run_once()
    assert sorted(told.taken) == ["a", "b", "c"]


def test_every_end_told_during_a_burst_reaches_a_pass() -> None:
    told = Told()
    ends = [f"lease-{i}" for i in range(300)]

    async def scenario() -> None:
        loop, event = asyncio.get_running_loop(), asyncio.Event()
        task = asyncio.create_task(when_woken(event, 3600, 0.005, "scrubber", told.run_once))

        def writer() -> None:  # batches of 3, as fast as it can, while passes run
            for i in range(0, len(ends), 3):
                daemon_app._leases_ended(told, loop, event, dict.fromkeys(ends[i:i + 3], False))
        try:
            await asyncio.to_thread(writer)
            # Nothing but the wakes runs a pass here (its idle period is an hour).
            deadline = loop.time() + patience()
            while len(told.taken) < len(ends) and loop.time() < deadline:
                await asyncio.sleep(0.01)
        finally:
            task.cancel()

    asyncio.run(scenario())
    assert sorted(told.taken) == sorted(ends)
