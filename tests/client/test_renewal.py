"""The SDK's renewal loop (poold.client.renewal) on a fake clock: when it renews, how it retries
an unreachable daemon until the holder's own expiry, and what loses the holder at once.

The clock and the sleep between renewals are replaced (`Schedule`), so the schedule is followed
renewal by renewal without waiting on it: a wait of 10 s passes at once on the fake clock. The
renewals themselves run on the loop's real thread, as in the SDK.
"""

from __future__ import annotations

import threading

import pytest

from poold import errors
from poold.client.renewal import RETRY_S, Renewal
from tests.timing import patience

Outcome = tuple[float, "int | errors.PooldError"]  # (seconds the renewal takes, TTL or error)


class Schedule:
    """A fake clock and the script of renewals: each takes its time on the clock and returns
    its TTL or raises its error. Waits pass at once on the clock; once the script is spent, the
    next wait stops the loop."""

    def __init__(self, outcomes: list[Outcome], now: float = 100.0) -> None:
        self.now = now
        self.outcomes = list(outcomes)
        self.waits: list[float] = []
        self.sent_at: list[float] = []
        self.lost: list[str] = []

    def monotonic(self) -> float:
        return self.now

    def renew(self) -> int:
        self.sent_at.append(self.now)
        took, result = self.outcomes.pop(0)
        self.now += took
        if isinstance(result, errors.PooldError):
            raise result
        return result

    def lose(self, reason: str) -> None:
        self.lost.append(reason)


class ScriptedStop(threading.Event):
    def __init__(self, schedule: Schedule) -> None:
        super().__init__()
        self.schedule = schedule

    def wait(self, timeout: float | None = None) -> bool:
        if self.is_set() or not self.schedule.outcomes:
            return True
        assert timeout is not None
        self.schedule.waits.append(timeout)
        self.schedule.now += timeout
        return False


def run(ttl_s: int, outcomes: list[Outcome]) -> Schedule:
    schedule = Schedule(outcomes)
    renewal = Renewal("test-renewal", ttl_s, schedule.renew, schedule.lose,
                      monotonic=schedule.monotonic, stop=ScriptedStop(schedule))
    renewal._thread.join(patience(0))
    assert not renewal._thread.is_alive()
    return schedule


def test_it_renews_a_third_of_the_ttl_after_each_renewal_was_sent() -> None:
    # The third renewal's answer takes longer than a period: the next one goes at once.
    done = run(30, [(2.0, 30), (0.5, 30), (12.0, 30), (0.0, 30)])
    assert done.sent_at == [110.0, 120.0, 130.0, 142.0]
    assert done.waits == [10.0, 8.0, 9.5, 0.0]
    assert done.lost == []


def test_a_tiny_ttl_still_waits_between_renewals() -> None:
    assert run(0, [(0.0, 0)]).waits == [0.05]


@pytest.mark.parametrize("error", [errors.TransportError("connection refused"),
                                   errors.LedgerUnavailable("ledger restarting")])
def test_an_unreachable_daemon_is_retried_sooner_until_the_holders_expiry(
        error: errors.PooldError) -> None:
    # TTL 3 s from 100: renewals every second, retries every RETRY_S, lost at 103 exactly.
    assert RETRY_S == 0.5
    done = run(3, [(0.0, error)] * 10)
    assert done.sent_at == [101.0, 101.5, 102.0, 102.5, 103.0]
    assert done.lost == [f"daemon unreachable until expiry ({error})"]


def test_each_renewal_moves_the_expiry_that_retries_run_until() -> None:
    # Renewed at 101 for 6 s: retried until 107, not until the first TTL's 103.
    error = errors.TransportError("connection refused")
    done = run(3, [(0.0, 6)] + [(0.0, error)] * 20)
    assert done.sent_at[:3] == [101.0, 102.0, 102.5]
    assert done.sent_at[-1] == 107.0 and len(done.lost) == 1


@pytest.mark.parametrize("error", [errors.LeaseExpired("expired at 12:00"),
                                   errors.UnknownLease("no lease abc"),
                                   errors.SessionNotActive("session closed"),
                                   errors.HostFenced("no ledger for 30 s")])
def test_an_answer_that_the_holder_is_gone_loses_it_at_once(error: errors.PooldError) -> None:
    done = run(30, [(0.0, error), (0.0, 30)])
    assert done.sent_at == [110.0]  # not retried
    assert done.lost == [f"{type(error).__name__}: {error.detail}"]


def test_stop_waits_for_the_renewal_in_flight_and_may_be_called_from_the_loop() -> None:
    entered, gate = threading.Event(), threading.Event()
    stop_errors: list[BaseException] = []

    def renew() -> int:
        entered.set()
        assert gate.wait(patience(0))
        return 1

    renewal = Renewal("test-renewal", 0, renew, lambda _reason: None)
    assert renewal._thread.daemon  # a holder that never releases does not keep its process up
    assert entered.wait(patience(0))
    stopper = threading.Thread(target=renewal.stop)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # waiting for the renewal in flight
    gate.set()
    stopper.join(patience(0))
    assert not stopper.is_alive() and not renewal._thread.is_alive()

    built = threading.Event()

    def gone() -> int:
        raise errors.LeaseExpired("gone")

    def lose(_reason: str) -> None:
        try:
            assert built.wait(patience(0))
            looping.stop()  # from the loop's own thread: no join of itself
        except BaseException as exc:  # any error is the finding
            stop_errors.append(exc)

    looping = Renewal("test-renewal", 0, gone, lose)
    built.set()
    looping._thread.join(patience(0))
    assert not looping._thread.is_alive() and stop_errors == []
