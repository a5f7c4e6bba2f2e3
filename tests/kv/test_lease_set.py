"""The KV store's leases, one rule at a time, against the real daemon: which lease a slot comes
from, when a lease counts as idle, what a lease that is given up or lost still shows (nothing),
and that closing one never raises (tests/kv/test_store.py shows the same through the store)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from poold import errors
from poold.client import PooldClient
from poold.kv.leases import LeaseSet, LeaseSlab
from poold.types import KiB, MiB
from tests.kv.clock import FakeClock
from tests.timing import patience, until

BS = 64 * KiB
LEASE = 2 * MiB
IDLE_S = 5.0


def lease_set(client: PooldClient, clock: FakeClock, ttl_s: int = 30) -> LeaseSet:
    return LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=4 * LEASE,
                    ttl_s=ttl_s, idle_release_s=IDLE_S, clock=clock)


def grow(leases: LeaseSet) -> LeaseSlab:
    slab = leases.grow()
    assert slab is not None
    return slab


def close_all(leases: LeaseSet) -> None:
    for slab in leases.take_all():
        slab.close("test over")
    leases.close()


def test_the_leases_share_one_session_that_closing_ends(client: PooldClient) -> None:
    leases = lease_set(client, FakeClock(0.0))
    slabs = [grow(leases) for _ in range(3)]
    (session_id,) = {slab.lease.info.session_id for slab in slabs}
    assert session_id is not None
    session = client.get_session(session_id)
    assert session.state == "active" and sorted(session.leases) == sorted(s.id for s in slabs)
    assert session.labels == {}  # the set's labels (none here) go on the session too
    close_all(leases)
    assert client.get_session(session_id).state == "closed"
    assert {client.get_lease(s.id).state for s in slabs} <= {"released", "scrubbing"}


def test_a_lost_session_is_replaced_by_the_next_growth(client: PooldClient) -> None:
    leases = lease_set(client, FakeClock(0.0), ttl_s=3)
    first = grow(leases)
    old = first.lease.info.session_id
    client.raw("POST", f"/v1/sessions/{old}/revoke")
    until("the set's lease is lost", lambda: not first.usable, patience(3))
    assert leases.take_lost() == [first]
    second = grow(leases)
    assert second.lease.info.session_id not in (None, old)
    assert client.get_session(second.lease.info.session_id or "").state == "active"
    close_all(leases)


def test_a_lease_never_used_is_idle_from_its_grant(client: PooldClient) -> None:
    clock = FakeClock(0.0)
    leases = lease_set(client, clock)
    clock.now = 10.0
    slab = grow(leases)
    clock.now = 10.0 + IDLE_S - 0.1
    assert leases.take_idle() == []
    clock.now = 10.0 + IDLE_S
    assert leases.take_idle() == [slab] and leases.released == 1
    slab.close("idle")
    other = grow(leases)
    clock.now += IDLE_S
    assert leases.take_idle() == [other] and leases.released == 2  # counts on, not afresh
    other.close("idle")
    last = grow(leases)
    assert leases.take_all() == [last] and leases.released == 3
    assert leases.take_all() == [] and leases.released == 3
    last.close("test over")


@pytest.mark.parametrize("many", [False, True])
def test_a_lease_in_use_is_not_idle_until_its_last_slot_is_freed(client: PooldClient,
                                                                 many: bool) -> None:
    clock = FakeClock(0.0)
    leases = lease_set(client, clock)
    slab = grow(leases)
    slots = slab.alloc_many(2) if many else [slab.alloc()]
    assert None not in slots and len(slots) == (2 if many else 1)
    clock.now = 100.0
    assert leases.take_idle() == []  # in use since long ago
    for slot in slots:
        assert slot is not None
        slab.free(slot, clock.now)
    clock.now = 100.0 + IDLE_S - 0.1
    assert leases.take_idle() == []  # idle since the last free, not since the grant
    clock.now = 100.0 + IDLE_S
    assert leases.take_idle() == [slab]
    slab.close("idle")
    close_all(leases)


def test_slots_come_from_the_oldest_lease_still_in_use(client: PooldClient) -> None:
    leases = lease_set(client, FakeClock(0.0))
    first, second = grow(leases), grow(leases)
    first.close("given up")
    assert not first.usable and first.slab.free_count > 0
    picked = leases.alloc()
    assert picked is not None and picked[0] is second
    assert {slab for slab, _slot in leases.alloc_many(3)} == {second}
    first.close("closed again")
    assert first.dead_reason == "given up"  # the first reason stands
    with pytest.raises(errors.LeaseLost, match=f"^lease {first.id} is no longer held$"):
        first.buffer()
    assert client.get_lease(first.id).state in ("released", "scrubbing")  # given back
    close_all(leases)


def test_a_lost_lease_shows_nothing_though_still_mapped(client: PooldClient) -> None:
    leases = lease_set(client, FakeClock(0.0), ttl_s=3)
    slab = grow(leases)
    slab.buffer()[:4] = b"mine"
    client.raw("POST", f"/v1/leases/{slab.id}/revoke")
    until_lost(slab)
    assert slab.mapping is not None and not slab.usable  # not closed yet, and yet:
    with pytest.raises(errors.LeaseLost, match=f"^lease {slab.id} is no longer held$"):
        slab.buffer()
    with pytest.raises(errors.LeaseLost, match=f"^lease {slab.id} is no longer held$"):
        slab.tensor(0, BS, None)
    assert leases.take_lost() == [slab] and leases.lost == 1 and leases.alloc() is None
    slab.close("lost")  # releasing a revoked lease is moot: no error
    again = grow(leases)
    client.raw("POST", f"/v1/leases/{again.id}/revoke")
    until_lost(again)
    assert leases.take_lost() == [again] and leases.lost == 2  # counted on
    again.close("lost")
    close_all(leases)


def until_lost(slab: LeaseSlab) -> None:
    """Its keepalive hears of the revocation within a third of its TTL."""
    until("the keepalive hears of the revocation", lambda: slab.lease.lost,
          patience(slab.lease.info.ttl_s))


def test_closing_a_lease_the_daemon_cannot_hear_about_raises_nothing(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    leases = lease_set(client, FakeClock(0.0))
    slab = grow(leases)

    def unreachable(lease_id: str) -> None:
        raise errors.TransportError(f"cannot release {lease_id}: daemon gone")

    monkeypatch.setattr(client, "release", unreachable)
    slab.close("shutting down")
    assert not slab.usable and slab.mapping is None and slab.readonly is None
    monkeypatch.undo()
    client.release(slab.id)  # what the daemon would have heard
    close_all(leases)


def test_a_lease_set_is_refused_that_could_never_hold_a_block(client: PooldClient) -> None:
    assert LeaseSet(client, block_size=BS, lease_bytes=BS, budget_bytes=BS, ttl_s=30,
                    idle_release_s=IDLE_S).lease_bytes == BS  # one block is enough
    with pytest.raises(ValueError, match=r"^lease_bytes must hold at least one block$"):
        LeaseSet(client, block_size=BS, lease_bytes=BS - 1, budget_bytes=LEASE, ttl_s=30,
                 idle_release_s=IDLE_S)
    with pytest.raises(ValueError, match=r"^budget_bytes must allow at least one lease$"):
        LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=LEASE - 1, ttl_s=30,
                 idle_release_s=IDLE_S)
    with pytest.raises(ValueError, match=r"^elastic leases need on_reclaim to give them back$"):
        LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=LEASE, ttl_s=30,
                 idle_release_s=IDLE_S, elastic=True)


def test_growth_asks_for_what_the_store_was_told_and_stops_at_the_budget(
        client: PooldClient) -> None:
    clock = FakeClock(0.0)
    leases = LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=2 * LEASE,
                      ttl_s=7, idle_release_s=IDLE_S, labels={"engine": "test"},
                      pool="default", clock=clock)
    slab = grow(leases)
    info = client.get_lease(slab.id)
    assert (info.ttl_s, info.pool, info.labels, info.length) == (7, "default",
                                                                 {"engine": "test"}, LEASE)
    assert client.get_session(info.session_id or "").labels == {"engine": "test"}
    grow(leases)
    assert leases.grow() is None and leases.grow() is None
    assert (leases.budget_refusals, leases.granted, leases.leased_bytes) == (2, 2, 2 * LEASE)
    close_all(leases)


def test_a_refused_grow_backs_off_before_asking_again(client: PooldClient) -> None:
    clock = FakeClock(0.0)
    leases = LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=2 * LEASE,
                      ttl_s=30, idle_release_s=IDLE_S, pool="no-such-pool",
                      grow_backoff_s=2.0, clock=clock)
    assert leases.grow() is None and leases.grow_failures == 1  # UnknownPool
    clock.now = 1.9
    assert leases.grow() is None and leases.grow_failures == 1  # not asked again yet
    clock.now = 2.0
    assert leases.grow() is None and leases.grow_failures == 2
    assert leases.slabs == []


def test_a_lease_rounded_past_the_budget_is_given_back_and_growth_stops(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's align rounds 3 MiB up to 4 MiB, past a 3 MiB budget: given back (even if
    the daemon cannot hear of it: nothing raises), and never asked for again."""
    def three_mib() -> LeaseSet:
        return LeaseSet(client, block_size=BS, lease_bytes=3 * MiB, budget_bytes=3 * MiB,
                        ttl_s=30, idle_release_s=IDLE_S, clock=FakeClock(0.0))

    leases = three_mib()
    assert leases.grow() is None and leases.budget_refusals == 1
    assert [x.id for x in client.leases() if x.state == "active"] == []  # given back
    assert leases.grow() is None and leases.budget_refusals == 1  # and not asked again
    monkeypatch.setattr(client, "release", _unreachable)
    assert three_mib().grow() is None
    monkeypatch.undo()
    for info in client.leases():  # what the daemon would have heard
        if info.state == "active":
            client.release(info.id)


def test_a_lease_that_cannot_be_mapped_is_given_back_and_growth_backs_off(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from poold.client.lease import Lease

    def unmappable(self: Lease, *, prefault: bool = True) -> None:
        raise errors.ClientError(f"cannot map {self.id}")

    clock = FakeClock(0.0)
    leases = lease_set(client, clock)
    monkeypatch.setattr(Lease, "map", unmappable)
    monkeypatch.setattr(client, "release", _unreachable)  # and the daemon is gone meanwhile
    assert leases.grow() is None and leases.grow_failures == 1 and leases.slabs == []
    monkeypatch.undo()
    assert leases.grow() is None and leases.grow_failures == 1  # backing off
    clock.advance(1.5)  # past the back-off: asked again, and it fails again
    monkeypatch.setattr(Lease, "map", unmappable)
    assert leases.grow() is None and leases.grow_failures == 2 and leases.slabs == []
    monkeypatch.undo()
    for info in client.leases():  # what the daemon would have heard
        if info.state == "active":
            client.release(info.id)


def _unreachable(lease_id: str) -> None:
    raise errors.TransportError(f"cannot release {lease_id}: daemon gone")


def test_each_lease_reports_how_long_it_sat_empty(client: PooldClient) -> None:
    """What the set's session tells the daemon, for it to ask back the coldest lease first:
    seconds since a lease's last block went, 0 while it holds one."""
    clock = FakeClock(10.0)
    leases = lease_set(client, clock)
    empty, used = grow(leases), grow(leases)
    slot = used.alloc()
    assert slot is not None
    clock.now = 14.0
    assert leases._idle_s() == {empty.id: 4.0, used.id: 0.0}
    used.free(slot, clock.now)
    clock.now = 15.5
    assert leases._idle_s() == {empty.id: 5.5, used.id: 1.5}
    close_all(leases)


def test_leases_asked_back_are_handed_over_once_and_counted_across_asks(
        client: PooldClient) -> None:
    leases = lease_set(client, FakeClock(0.0))
    first, second, kept = grow(leases), grow(leases), grow(leases)
    leases.asked.extend([first.id, "not-a-lease-of-the-set"])
    assert leases.take_asked() == [first] and leases.take_asked() == []
    leases.asked.append(second.id)
    assert leases.take_asked() == [second]
    assert leases.reclaimed == 2 and leases.slabs == [kept]
    for slab in (first, second):
        slab.close("given back")
    close_all(leases)


def test_a_session_that_could_not_be_opened_is_opened_by_the_next_growth(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(0.0)
    leases = lease_set(client, clock)

    def unreachable(**_kwargs: object) -> None:
        raise errors.TransportError("daemon gone")
    monkeypatch.setattr(client, "session", unreachable)
    assert leases.grow() is None and leases.grow_failures == 1
    monkeypatch.undo()
    clock.now = 60.0  # past the back-off
    slab = grow(leases)
    assert client.get_session(slab.lease.info.session_id or "").state == "active"
    close_all(leases)


def test_closing_the_set_never_raises_when_the_daemon_cannot_hear(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch) -> None:
    leases = lease_set(client, FakeClock(0.0))
    slab = grow(leases)
    session = client.get_session(slab.lease.info.session_id or "")

    def gone(*_args: object, **_kwargs: object) -> None:
        raise errors.TransportError("daemon gone")
    for held in leases.take_all():
        held.close("test over")
    monkeypatch.setattr(type(leases._session), "close", gone)
    leases.close()  # nothing raises
    monkeypatch.undo()
    client.raw("DELETE", f"/v1/sessions/{session.id}")
    assert client.get_session(session.id).state == "closed"


@pytest.mark.parametrize("elastic", [False, True])
def test_only_an_elastic_set_listens_for_leases_asked_back(client: PooldClient,
                                                          elastic: bool) -> None:
    """Asks come over a long poll the session holds open; a set that cannot be asked (not
    elastic) keeps no such connection and thread."""
    leases = LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=LEASE, ttl_s=30,
                      idle_release_s=IDLE_S, clock=FakeClock(0.0), elastic=elastic,
                      on_reclaim=lambda: None)
    slab = grow(leases)
    listener = f"poold-reclaim-{(slab.lease.info.session_id or '')[:8]}"
    assert (listener in {t.name for t in threading.enumerate()}) is elastic
    close_all(leases)


def test_a_set_says_it_waits_for_room_only_while_a_growth_waits(client: PooldClient) -> None:
    """`waiting_for_room` lets the reclaim thread give back while a growth holds the store's
    lock; at any other time that thread must leave the lock's holder alone."""
    leases = LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=2 * LEASE,
                      ttl_s=30, idle_release_s=IDLE_S, clock=FakeClock(0.0), grow_wait_s=5.0)
    assert not leases.waiting_for_room
    grow(leases)
    assert not leases.waiting_for_room
    close_all(leases)


@pytest.mark.parametrize(("grow_wait_s", "waits"), [(0.0, False), (0.5, True), (5.0, True)])
def test_a_growth_says_it_waits_while_its_grant_may_wait(
        client: PooldClient, monkeypatch: pytest.MonkeyPatch, grow_wait_s: float,
        waits: bool) -> None:
    """While the grant is on its way, the set says it waits for room exactly when the grant may
    wait (any wait_s above 0, a short one too): only then may the reclaim thread give back from
    under the growth's lock."""
    leases = LeaseSet(client, block_size=BS, lease_bytes=LEASE, budget_bytes=2 * LEASE,
                      ttl_s=30, idle_release_s=IDLE_S, clock=FakeClock(0.0),
                      grow_wait_s=grow_wait_s)
    during: list[tuple[bool, float]] = []
    grant = client.grant

    def watched(*args: Any, **kwargs: Any) -> Any:
        during.append((leases.waiting_for_room, kwargs["wait_s"]))
        return grant(*args, **kwargs)

    monkeypatch.setattr(client, "grant", watched)
    grow(leases)
    assert during == [(waits, grow_wait_s)] and not leases.waiting_for_room
    close_all(leases)
