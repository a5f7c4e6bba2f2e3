"""Random grant/keepalive/release/clock/reap sequences against the real ledger (both databases),
checked against a tiny model after every step: DESIGN.md's invariants hold and every lease reads
exactly the state the model predicts (expiry by the ledger clock included)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poold import errors
from poold.ledger import leases, reads
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.types import LeaseState, MiB, round_up

DEVICE = 64 * MiB

ops = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(1, 20 * MiB), st.integers(1, 30)),
        st.tuples(st.just("release"), st.integers(0, 99), st.just(0)),
        st.tuples(st.just("keepalive"), st.integers(0, 99), st.integers(1, 30)),
        st.tuples(st.just("advance"), st.integers(0, 15), st.just(0)),
        st.tuples(st.just("reap"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


class Model:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.leases: dict[str, LeaseView] = {}  # as last answered by the ledger
        self.ended: dict[str, LeaseState] = {}

    def state(self, lease_id: str) -> LeaseState:
        if lease_id in self.ended:
            return self.ended[lease_id]
        if self.leases[lease_id].expires_at <= self.clock.now():
            return LeaseState.EXPIRED
        return LeaseState.ACTIVE

    def valid(self) -> list[LeaseView]:
        return [x for i, x in self.leases.items() if self.state(i) is LeaseState.ACTIVE]


def largest_hole(valid: list[LeaseView]) -> int:
    edges = sorted((x.offset, x.offset + x.length) for x in valid)
    starts = [0] + [end for _, end in edges]
    ends = [start for start, _ in edges] + [DEVICE]
    return max(e - s for s, e in zip(starts, ends, strict=True))


def step(ledger: Ledger, model: Model, op: tuple[str, int, int]) -> None:
    kind, a, b = op
    ids = sorted(model.leases)
    if kind == "grant":
        try:
            view = ledger.run(partial(leases.grant, request=GrantRequest(size=a, actor="p",
                                                                        ttl_s=b)))
        except errors.NoCapacity:
            assert largest_hole(model.valid()) < round_up(a, 2 * MiB), "refused with room free"
            return
        assert view.length == round_up(a, 2 * MiB)
        model.leases[view.id] = view
    elif kind == "release" and ids:
        lease_id = ids[a % len(ids)]
        expected = model.state(lease_id)
        ended = ledger.run(partial(leases.release, lease_id=lease_id, actor="p"))
        want = LeaseState.RELEASED if expected is LeaseState.ACTIVE else expected
        assert ended.state is want
        model.ended[lease_id] = want
    elif kind == "keepalive" and ids:
        lease_id = ids[a % len(ids)]
        try:
            model.leases[lease_id] = ledger.run(
                partial(leases.keepalive, lease_id=lease_id, ttl_s=b, actor="p"))
            assert model.state(lease_id) is LeaseState.ACTIVE
            assert model.leases[lease_id].expires_at == model.clock.now() + timedelta(seconds=b)
        except (errors.LeaseExpired, errors.LeaseNotActive):
            assert model.state(lease_id) is not LeaseState.ACTIVE
    elif kind == "advance":
        model.clock.advance(a)
    elif kind == "reap":
        ledger.run(leases.reap)
        for lease_id in model.leases:
            if model.state(lease_id) is LeaseState.EXPIRED:
                model.ended[lease_id] = LeaseState.EXPIRED


def check(ledger: Ledger, model: Model) -> None:
    report = ledger.read(fsck)
    assert report.clean, report.violations
    for lease_id in model.leases:
        assert ledger.read(lambda s, now, i=lease_id: reads.lease(s, i, now)).state is \
            model.state(lease_id)
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == sum(x.length for x in model.valid())


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_random_lifecycles_match_the_model(make_ledger: object, clock: ManualClock,
                                           ops: list[tuple[str, int, int]]) -> None:
    ledger = _ledger(make_ledger)
    # Examples share one ledger: end what the previous example left, then start a fresh model.
    for view in ledger.read(lambda s, now: reads.leases(s, now, state=LeaseState.ACTIVE)):
        ledger.run(partial(leases.release, lease_id=view.id, actor="p"))
    ledger.run(leases.reap)
    model = Model(clock)
    for op in ops:
        step(ledger, model, op)
        check(ledger, model)


_LEDGERS: dict[int, Ledger] = {}


def _ledger(make_ledger: object) -> Ledger:
    """One ledger per test invocation (hypothesis reuses the function-scoped fixture)."""
    key = id(make_ledger)
    if key not in _LEDGERS:
        assert callable(make_ledger)
        _LEDGERS.clear()
        _LEDGERS[key] = make_ledger()
    return _LEDGERS[key]
