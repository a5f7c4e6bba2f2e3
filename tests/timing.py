"""Waiting on events, and seeds for randomised tests, the same way in every test.

The suite must pass on a loaded 2-core machine (a CI run and mutation testing beside it), where
any wall-clock interval may stretch by seconds. So a test waits on the event itself (`until`),
with a deadline that is the configured period that should bring it times generous slack
(`patience`), and judges "not before" and "within" from the ledger's own timestamps rather than
from its own clock. A deadline only says when to give up on an event that is missing.

A randomised test takes its seed from `run_seed`: POOLD_TEST_SEED when set, else a fresh one, and
prints it (pytest shows a failing test's output), so the run can be repeated.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SEED_VARIABLE = "POOLD_TEST_SEED"
# A period the code is configured to keep may take this many times as long on a loaded machine.
SLACK_FACTOR = 4.0
# Beyond that, how long a test waits for an event before calling it missing...
SLACK_S = 15.0
# ... and how late a task that was due may act (scheduling, a busy ledger writer), judged on
# the ledger's own timestamps.
LATE_S = 2.0
# How long a cold `poold serve` may take to answer: 3-5 s on an idle machine (mostly imports);
# on a loaded one, several starting at once have taken half a minute.
START_S = 120.0
# The timeout of one request a test makes while it waits for something (a daemon coming up):
# answering may take seconds on a loaded machine; a refused connection fails at once anyway.
PROBE_S = 10.0
# The web UI redraws the page on screen every second (api/ui/static/poll.js POLL_MS).
UI_POLL_S = 1.0


def patience(*periods_s: float) -> float:
    """Seconds to wait for an event that the code brings about within the sum of `periods_s`
    (a TTL, a grace, a reaper tick...) on an idle machine."""
    return SLACK_FACTOR * sum(periods_s) + SLACK_S


def tolerance(*periods_s: float) -> float:
    """The most seconds, by the ledger's timestamps, that a task due within the sum of
    `periods_s` (a reaper tick after an expiry...) may take on a loaded machine."""
    return SLACK_FACTOR * sum(periods_s) + LATE_S


def ui_wait_ms(*periods_s: float) -> float:
    """A Playwright timeout, in milliseconds, for the page to show what happened: its next poll
    (plus `periods_s` for the daemon to act), with a loaded machine's slack."""
    return 1000 * patience(UI_POLL_S, *periods_s)


def until(what: str, check: Callable[[], T], timeout_s: float, interval_s: float = 0.05) -> T:
    """Poll `check` until it returns something truthy, and return that; fail saying `what`
    never happened once `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"never within {timeout_s:g} s: {what}"
        time.sleep(interval_s)
    return found


def run_seed() -> int:
    """The seed of this run of a randomised test: POOLD_TEST_SEED, or a new one; printed so
    that a failure shows how to repeat it."""
    given = os.environ.get(SEED_VARIABLE)
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    print(f"seed {seed} (rerun with {SEED_VARIABLE}={seed})")
    return seed
