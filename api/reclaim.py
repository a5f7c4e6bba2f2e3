"""Grants that wait for room, and the feed that tells holders of elastic leases to give back.

A grant that finds no room and may wait (`wait_s`) joins its pool's queue: waiting grants are
answered in order of arrival, one retrying at a time. The one at the head asks holders of
elastic leases in the pool to give back what it needs (poold.ledger.reclaims.ask), wakes every
holder listening on its session's reclaim feed, and retries as bytes come back, until it is
placed or its time is up (507 NoCapacity, saying it waited).

`ReclaimFeed` wakes the listeners of this daemon at once when this daemon asks; an ask made by
another host's daemon (a shared pool) is seen at the listeners' next look at the ledger, at most
`CROSS_HOST_POLL_S` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

from api.metrics import Metrics
from poold.errors import NoCapacity
from poold.ledger import leases, reclaims
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView

T = TypeVar("T")

# How often a listener looks at the ledger for asks this daemon did not make (another host's).
CROSS_HOST_POLL_S = 1.0
# A waiting grant retries this soon after an ask, doubling up to the last (bytes come back as
# holders release and the scrubber zeroes them: milliseconds to a second).
RETRY_S = (0.005, 0.05)


# Long polls of the reclaim feeds one principal may hold open at once (the SDK holds one a
# session); past it, a poll is answered at once instead of waiting: a client cannot hold the
# daemon's connections with polls.
MAX_LISTENING = 64


class ReclaimFeed:
    """Wakes whoever waits on asks (the session feeds) when this daemon asks."""

    def __init__(self, max_listening: int = MAX_LISTENING) -> None:
        self._asked = asyncio.Event()
        self.max_listening = max_listening
        self._listening: defaultdict[str, int] = defaultdict(int)

    @contextlib.contextmanager
    def listening(self, who: str) -> Iterator[bool]:
        """One long poll of `who`'s; yields whether it may wait (under max_listening)."""
        self._listening[who] += 1
        try:
            yield self._listening[who] <= self.max_listening
        finally:
            self._listening[who] -= 1
            if not self._listening[who]:
                del self._listening[who]

    def asked(self) -> None:
        self._asked.set()
        self._asked = asyncio.Event()  # the next waiters wait for the next ask

    async def wait(self, timeout_s: float) -> None:
        """Until this daemon asks again, or `timeout_s` (capped for other hosts' asks)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._asked.wait(), min(timeout_s, CROSS_HOST_POLL_S))


class WaitingGrants:
    def __init__(self, ledger: Ledger, feed: ReclaimFeed, metrics: Metrics,
                 grace_s: float) -> None:
        self._ledger, self._feed, self._metrics = ledger, feed, metrics
        self._grace_s = grace_s
        self._turns: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._waiting: defaultdict[str, int] = defaultdict(int)

    def waiting(self, pool: str | None = None) -> int:
        """How many grants wait for room in `pool` (None: the default pool) now."""
        return self._waiting[pool or self._ledger.default_pool]

    def waiting_by_pool(self) -> dict[str, int]:
        """How many grants wait for room now, by the pools any has waited in."""
        return dict(self._waiting)

    async def grant(self, request: leases.GrantRequest, wait_s: float) -> LeaseView:
        """Grant now, or, the pool being full, wait up to `wait_s` for room as described.
        Never cancelled midway: a grant the writer commits is always answered."""
        try:
            return await self._submit(partial(leases.grant, request=request))
        except NoCapacity:
            if wait_s <= 0:
                raise
        started = time.monotonic()
        pool = request.pool or self._ledger.default_pool  # one queue, named or not
        turn = self._turns[pool]
        self._waiting[pool] += 1
        try:
            try:  # asyncio.Lock hands itself to its waiters in the order they came
                await asyncio.wait_for(turn.acquire(), wait_s)
            except TimeoutError:
                raise _waited_in_vain(request, wait_s) from None
            try:
                return await self._in_turn(request, started + wait_s, wait_s)
            finally:
                turn.release()
        finally:
            self._waiting[pool] -= 1
            self._metrics.grant_wait.observe(time.monotonic() - started)

    async def _in_turn(self, request: leases.GrantRequest, deadline: float,
                       wait_s: float) -> LeaseView:
        delay = RETRY_S[0]
        while True:
            outcome = await self._submit(partial(_grant_or_ask, request=request,
                                                 grace_s=self._grace_s))
            if isinstance(outcome, LeaseView):
                return outcome
            if outcome.asked_bytes:
                self._metrics.reclaim_asked_bytes.inc(outcome.asked_bytes)
                self._feed.asked()
                delay = RETRY_S[0]
            left = deadline - time.monotonic()
            if left <= 0:
                raise _waited_in_vain(request, wait_s)
            await asyncio.sleep(min(delay, left))
            delay = min(2 * delay, RETRY_S[1])

    async def _submit(self, command: Callable[[Tx], T]) -> T:
        return await self._ledger.call(command)


def _grant_or_ask(tx: Tx, request: leases.GrantRequest,
                  grace_s: float) -> LeaseView | reclaims.Asked:
    """One transaction: revoke what holders kept past their deadline (rather than wait for the
    reaper's next tick), grant if there is room now, else ask for what the grant lacks. In one,
    so bytes given back between a refusal and an ask are never asked for twice. What a refused
    grant wrote (expired leases reaped, idle claims freed) is what the reaper would write."""
    reclaims.revoke_overdue(tx)
    try:
        return leases.grant(tx, request)
    except NoCapacity:
        return reclaims.ask(tx, request.pool, request.size, request.actor, grace_s,
                            request.session_id)


def _waited_in_vain(request: leases.GrantRequest, wait_s: float) -> NoCapacity:
    return NoCapacity(f"no free extent of {request.size} bytes in pool "
                      f"{request.pool or 'default'!r} within {wait_s:g} s of waiting (elastic "
                      "leases asked back, and leases ending, did not make room)")
