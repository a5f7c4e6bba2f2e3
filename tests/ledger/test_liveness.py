"""This host's fence, on a clock the test moves: when it falls, what lifts it, and that it is
measured from when a heartbeat was submitted, not from when it committed."""

from __future__ import annotations

import pytest

from poold.ledger.liveness import Liveness

TTL, GRACE = 10.0, 5.0


@pytest.fixture
def now() -> list[float]:
    return [100.0]


@pytest.fixture
def live(now: list[float]) -> Liveness:
    return Liveness(TTL, GRACE, monotonic=lambda: now[0])


def test_the_fence_falls_after_host_ttl_of_silence(live: Liveness, now: list[float]) -> None:
    assert live.lost_after_s == TTL + GRACE
    assert (live.fenced, live.silent_s) == (False, 0.0)
    now[0] += TTL
    assert (live.fenced, live.silent_s) == (False, TTL)  # host_ttl_s itself is still in time
    now[0] += 0.001
    assert live.fenced


def test_a_heartbeat_counts_from_when_it_was_submitted(live: Liveness, now: list[float]
                                                       ) -> None:
    submitted = live.started()
    assert submitted == now[0]
    now[0] += 8.0  # the ledger took 8 s to commit it
    live.beat(submitted)
    assert live.silent_s == 8.0
    now[0] += TTL - 8.0 + 0.001
    assert live.fenced  # ttl after the submission, not after the commit
    live.beat(submitted - 50)  # a late answer to an older heartbeat moves nothing back
    assert live.silent_s == pytest.approx(TTL + 0.001)


def test_a_fence_seen_stays_up_until_recovered_after_a_heartbeat(
        live: Liveness, now: list[float]) -> None:
    now[0] += TTL + 1
    assert live.fenced
    live.recovered()  # nothing reached the ledger yet: still fenced
    assert live.fenced
    live.beat(live.started())
    assert live.fenced  # the ledger does not say so yet: clients may have been told "lost"
    now[0] += TTL  # a heartbeat exactly host_ttl_s ago is still in time
    live.recovered()
    assert live.fenced is False and live.silent_s == TTL


def test_a_fence_nobody_saw_needs_no_recovery(live: Liveness, now: list[float]) -> None:
    """Silent past the TTL, but no grant or keepalive asked meanwhile: a heartbeat alone is
    enough, since no client was told its lease was lost."""
    now[0] += TTL + 1
    live.beat(live.started())
    assert not live.fenced
