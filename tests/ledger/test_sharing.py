"""Several hosts on one shared device through one ledger (in process, one writer per host id):
claims grown and trimmed, idle claims given back, lost hosts reclaimed after host_ttl + grace by
the ledger clock, fencing. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

import pytest
import sqlalchemy

from poold import errors
from poold.daemon import reaper
from poold.inventory import DeviceSpec
from poold.ledger import leases, reads, sessions, sharing
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.liveness import Liveness
from poold.ledger.space import Catalog
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView
from poold.models import Claim
from poold.types import DeviceKind, LeaseState, MiB
from tests.conftest import LedgerFactory, emulated_spec

SHARED = replace(emulated_spec(64 * MiB, name="shared0"), shared=True)
TTL, GRACE = 10.0, 5.0


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def grant(ledger: Ledger, size: int, ttl_s: int = 600) -> LeaseView:
    return ledger.run(partial(leases.grant, request=GrantRequest(size=size, actor="t",
                                                                  ttl_s=ttl_s)))


def release(ledger: Ledger, lease_id: str) -> None:
    ledger.run(partial(leases.release, lease_id=lease_id, actor="t"))


def tick(ledger: Ledger, idle_s: float = 30.0) -> None:
    """The daemon's own tick (poold.daemon.reaper, what Daemon.tick runs)."""
    reaper.tick(ledger, ledger.host_id, idle_s)


def hosts_on(make_ledger: LedgerFactory, n: int, spec: DeviceSpec = SHARED,
             claim_slice: int = 16 * MiB, **kwargs: object) -> list[Ledger]:
    return [make_ledger([spec], host_id=f"host-{i}", claim_slice=claim_slice, **kwargs)
            for i in range(n)]


def b_keeps_2_mib_of_its_claim(make_ledger: LedgerFactory
                               ) -> tuple[Ledger, Ledger, list[LeaseView]]:
    """Three hosts on a 64 MiB device: c holds [0, 32) MiB in two claims; b claimed [32, 48)
    for four 2 MiB leases and released all but the first. Returns a, b and b's four leases."""
    a, b, c = hosts_on(make_ledger, 3)
    for _ in range(2):
        grant(c, 16 * MiB)
    small = [grant(b, 2 * MiB) for _ in range(4)]
    for lease in small[1:]:
        release(b, lease.id)
    return a, b, small


def lease_view(ledger: Ledger, lease_id: str) -> LeaseView:
    return ledger.read(lambda s, now: reads.lease(s, lease_id, now))


def clean(ledger: Ledger) -> None:
    report = ledger.read(fsck)
    assert report.violations == []


def test_a_shared_device_is_one_ledger_device_owned_by_no_host(
        make_ledger: LedgerFactory) -> None:
    a, b = hosts_on(make_ledger, 2)
    devices = a.read(reads.devices)
    assert [(d.uid, d.host) for d in devices] == [(SHARED.uid, None)]
    x, y = grant(a, 2 * MiB), grant(b, 2 * MiB)
    assert x.device_id == y.device_id and x.offset != y.offset
    clean(a)


def test_idle_claims_of_other_hosts_are_taken_before_a_refusal(
        make_ledger: LedgerFactory) -> None:
    a, b, c = hosts_on(make_ledger, 3)
    full = [grant(c, 16 * MiB) for _ in range(2)]  # c: [0, 32) MiB
    small = [grant(b, 2 * MiB) for _ in range(4)]  # b: a 16 MiB claim at [32, 48)...
    for lease in small[1:]:
        release(b, lease.id)  # ...of which it keeps [32, 34)
    # a asks for 28 MiB: there is room only once b's claim is trimmed to what it holds.
    big = grant(a, 28 * MiB)
    assert (big.offset, big.length) == (34 * MiB, 28 * MiB)
    # The trim is on record: b's claim ended, and one claim made for what b kept, both b's.
    released = a.read(lambda s, _: reads.events(s, kind="claim.released"))
    (trimmed,) = [e for e in released if e.details.get("reason") == f"trimmed for {a.host_id}"]
    assert (trimmed.actor, trimmed.host, trimmed.device_id) == ("allocator", b.host_id,
                                                                big.device_id)
    old_claim = trimmed.details["claim_id"]
    assert (trimmed.details["offset"], trimmed.details["length"]) == (32 * MiB, 16 * MiB)
    (kept,) = [e for e in a.read(lambda s, _: reads.events(s, kind="claim.created"))
               if e.details.get("reason") == f"trimmed from claim {old_claim}"]
    assert (kept.actor, kept.host, kept.device_id, kept.details["offset"],
            kept.details["length"]) == ("allocator", b.host_id, big.device_id, 32 * MiB, 2 * MiB)
    assert a.read(lambda s, _: s.get(Claim, kept.details["claim_id"]).state) == "active"
    assert a.read(lambda s, _: s.get(Claim, old_claim).ended_at) is not None
    clean(a)
    # b's in-memory space learns its claim changed, and b keeps granting without overlap.
    more = grant(b, 2 * MiB)
    assert more.offset == 62 * MiB
    with pytest.raises(errors.NoCapacity):
        grant(b, 4 * MiB)
    release(b, small[0].id)
    release(b, more.id)
    release(c, full[1].id)
    assert grant(c, 18 * MiB).offset == 16 * MiB  # c's idle claim and b's, trimmed
    clean(a)


def test_every_byte_can_be_leased_whoever_claimed_it(make_ledger: LedgerFactory) -> None:
    hosts = hosts_on(make_ledger, 3)
    for round_ in range(3):
        taken = [grant(h, 2 * MiB) for h in hosts for _ in range(2)]
        for lease in taken:
            release(hosts[int(lease.host[-1])], lease.id)
        # all idle now, claimed in slices by all three: one host takes the whole device
        whole = grant(hosts[round_], 64 * MiB)
        assert whole.offset == 0
        release(hosts[round_], whole.id)
        clean(hosts[0])


def test_idle_claims_go_back_after_claim_idle_s(make_ledger: LedgerFactory,
                                              clock: ManualClock) -> None:
    (a,) = hosts_on(make_ledger, 1)
    lease = grant(a, 2 * MiB)
    release(a, lease.id)
    tick(a, idle_s=30)
    assert a.read(reads.hosts)[0].claims == 1
    clock.advance(29)
    tick(a, idle_s=30)
    assert a.read(reads.hosts)[0].claims == 1
    clock.advance(2)
    tick(a, idle_s=30)
    assert a.read(reads.hosts)[0].claims == 0
    clean(a)


def test_a_lost_host_is_reclaimed_after_ttl_plus_grace_not_before(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    watch_a, watch_b = FakeMonotonic(), FakeMonotonic()
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_a))
    b = make_ledger([SHARED], host_id="host-b", claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_b))
    tick(a)
    tick(b)
    held = [grant(b, 16 * MiB) for _ in range(4)]  # b holds the whole device
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    # b goes silent; a keeps ticking. Before ttl + grace by the ledger clock: nothing moves.
    clock.advance(TTL + GRACE - 1)
    watch_a.now += TTL + GRACE - 1
    tick(a)
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    assert {h.id: h.state for h in a.read(reads.hosts)}["host-b"] == "up"
    clock.advance(2)
    watch_a.now += 2
    tick(a)
    hosts = {h.id: h for h in a.read(reads.hosts)}
    assert hosts["host-b"].state == "lost" and hosts["host-b"].claims == 0
    (declared,) = a.read(lambda s, _: reads.events(s, kind="host.lost"))
    assert (declared.actor, declared.host, declared.details["adopted_by"],
            declared.details["after_s"]) == ("reaper", "host-b", "host-a", TTL + GRACE)
    adopted = a.read(lambda s, _: reads.events(s, kind="claim.adopted"))
    assert {(e.actor, e.host, e.device_id, e.details["from_host"]) for e in adopted} == {
        ("reaper", "host-a", held[0].device_id, "host-b")}
    assert sorted((e.details["offset"], e.details["length"]) for e in adopted) == [
        (i * 16 * MiB, 16 * MiB) for i in range(4)]
    assert {e.details["claim_id"] for e in adopted} == a.read(lambda s, _: {
        c.id for c in s.query(Claim).filter_by(host_id="host-a", state="active")})
    # b's leases are lost and adopted by a, which scrubs them before anyone reuses the bytes.
    for lease in held:
        view = lease_view(a, lease.id)
        assert view.state is LeaseState.SCRUBBING and view.host == "host-a"
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    for lease in held:
        a.run(partial(leases.finish_scrub, lease_id=lease.id))
    assert grant(a, 64 * MiB).offset == 0
    clean(a)
    lost_events = a.read(lambda s, _now: reads.events(s, kind="lease.lost"))
    assert {e.lease_id for e in lost_events} == {lease.id for lease in held}
    # b comes back: fenced (silent past its ttl), it grants nothing until its tick recorded
    # its leases lost, then it rejoins with an empty space.
    watch_b.now += TTL + GRACE + 1
    with pytest.raises(errors.HostFenced):
        grant(b, 2 * MiB)
    with pytest.raises(errors.LeaseNotActive, match="lost"):
        b.run(partial(leases.keepalive, lease_id=held[0].id, ttl_s=None, actor="t"))
    tick(b)
    assert {h.id: h.state for h in b.read(reads.hosts)}["host-b"] == "up"
    with pytest.raises(errors.NoCapacity):
        grant(b, 2 * MiB)
    clean(b)


def test_adopting_a_lost_hosts_unscrubbed_claims_frees_their_bytes_at_once_and_says_why(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    watch_a, watch_b = FakeMonotonic(), FakeMonotonic()
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_a))
    b = make_ledger([SHARED], host_id="host-b", claim_slice=16 * MiB,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_b))
    tick(a)
    tick(b)
    live = grant(b, 4 * MiB)  # b's first claim holds it
    for gone in [grant(b, 16 * MiB) for _ in range(3)]:
        release(b, gone.id)  # three more claims of b, idle now (kept for claim_idle_s)
    claims_of_b = b.read(lambda s, _: {c.id: (c.offset, c.length) for c in s.query(Claim)
                                       .filter_by(host_id="host-b", state="active")})
    assert len(claims_of_b) == 4
    clock.advance(TTL + GRACE + 1)
    watch_a.now += TTL + GRACE + 1
    tick(a)  # b is lost: a adopts its claims and its lease
    adopted_at = clock.now()
    view = lease_view(a, live.id)
    assert (view.state, view.host) == (LeaseState.LOST, "host-a")
    assert view.ended_at == adopted_at  # ended by the ledger clock, at the adoption
    (lost,) = a.read(lambda s, _now: reads.events(s, kind="lease.lost"))
    assert (lost.actor, lost.host, lost.lease_id) == ("reaper", "host-b", live.id)
    assert (lost.details["reason"], lost.details["by"]) == ("host host-b lost", "host-a")
    # What held no lease went back at once; so did the lost lease's claim, its bytes unscrubbed.
    released = a.read(lambda s, _now: reads.events(s, kind="claim.released"))
    gave_back = {e.details["claim_id"]: (e.details["offset"], e.details["length"])
                 for e in released if e.details["reason"] == "host host-b lost"}
    assert gave_back == claims_of_b
    assert {(e.actor, e.host) for e in released if e.details["claim_id"] in gave_back} == {
        ("reaper", "host-a")}
    assert a.read(lambda s, _: s.query(Claim).filter_by(state="active").count()) == 0
    ended = a.read(lambda s, _: {c.id: c.ended_at for c in s.query(Claim)})
    assert {ended[c] for c in claims_of_b} == {adopted_at}  # by the ledger clock, at adoption
    every_byte = [grant(a, 16 * MiB) for _ in range(4)]  # at once, without another tick
    assert sorted(x.offset for x in every_byte) == [i * 16 * MiB for i in range(4)]
    clean(a)


def test_a_fenced_host_records_its_leases_lost_when_the_ledger_is_back(
        make_ledger: LedgerFactory) -> None:
    watch = FakeMonotonic()
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB,
                    liveness=Liveness(TTL, GRACE, monotonic=watch))
    tick(a)
    lease = grant(a, 4 * MiB)
    session = a.run(partial(sessions.open_session,
                            request=sessions.OpenRequest(actor="t", ttl_s=600)))
    watch.now += TTL + 0.5
    with pytest.raises(errors.HostFenced) as fenced:
        grant(a, 2 * MiB)
    assert str(fenced.value) == ("host host-a lost the ledger for longer than its host_ttl: it "
                                 "grants nothing until its heartbeat is back")
    # What its clients hear: the lease is lost, and so is every lease of the session.
    with pytest.raises(errors.HostFenced) as fenced:
        a.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=None, actor="t"))
    assert str(fenced.value) == f"lease {lease.id} is lost: host host-a lost the ledger"
    with pytest.raises(errors.HostFenced) as fenced:
        a.run(partial(sessions.keepalive, session_id=session.id, actor="t"))
    assert str(fenced.value) == f"session {session.id} is lost: host host-a lost the ledger"
    tick(a)  # the heartbeat gets through again
    assert lease_view(a, lease.id).state is LeaseState.LOST
    assert grant(a, 2 * MiB).length == 2 * MiB
    clean(a)


def test_a_lease_lost_in_a_pool_its_writer_had_not_read_yet_is_still_scrubbed(
        make_ledger: LedgerFactory) -> None:
    """On PostgreSQL another host can add a pool after this writer read its catalog for the
    transaction; a lease lost there is looked up again, and zeroed before reuse like any."""
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB, scrub=True)
    held = grant(a, 4 * MiB)

    def lose_with_a_stale_catalog(tx: Tx) -> int:
        tx.snapshot = Catalog([], [], version=tx.catalog.version)  # read before any pool
        return sharing.lose_own_leases(tx, "fenced")
    assert a.run(lose_with_a_stale_catalog) == 1
    assert lease_view(a, held.id).state is LeaseState.SCRUBBING  # not granted again unzeroed


def test_a_host_that_ticks_is_never_lost(make_ledger: LedgerFactory, clock: ManualClock) -> None:
    a, b = hosts_on(make_ledger, 2, liveness=Liveness(TTL, GRACE))
    lease = grant(b, 2 * MiB)
    for _ in range(5):
        clock.advance(TTL)
        tick(b)
        tick(a)
    assert lease_view(a, lease.id).state is LeaseState.ACTIVE
    assert {h.state for h in a.read(reads.hosts)} == {"up"}


def test_another_hosts_expired_leases_are_reclaimed_before_a_refusal(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    a, b = hosts_on(make_ledger, 2)
    held = [grant(b, 16 * MiB, ttl_s=5) for _ in range(4)]  # b holds the whole device
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    # Past their expiry by the ledger clock, and b has not ticked since: b's reaper has not
    # finalised them. a, short of room, expires them itself instead of refusing.
    clock.advance(6)
    assert all(lease_view(a, lease.id).ended_at is None for lease in held)  # read as expired,
    # not yet finalised
    taken = grant(a, 48 * MiB)
    assert taken.length == 48 * MiB
    for lease in held:
        view = lease_view(a, lease.id)
        assert view.state is LeaseState.EXPIRED and view.ended_at is not None
        assert view.host == "host-1"
    expired = a.read(lambda s, _now: reads.events(s, kind="lease.expired"))
    assert {e.lease_id: (e.host, e.details["expired_by"]) for e in expired} == {
        lease.id: ("host-1", "host-0") for lease in held}
    clean(a)
    # b learns its claims were trimmed away and grants only what is left, without overlap.
    more = grant(b, 16 * MiB)
    assert not (more.offset < taken.offset + taken.length and taken.offset < more.offset + 16 * MiB)
    with pytest.raises(errors.NoCapacity):
        grant(b, 2 * MiB)
    clean(b)


def test_another_hosts_expired_leases_keep_their_bytes_until_scrubbed(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    a, b = hosts_on(make_ledger, 2, scrub=True)
    held = [grant(b, 32 * MiB, ttl_s=5) for _ in range(2)]
    clock.advance(6)
    # Expired by a, but their bytes are not a's to reuse until b zeroed them.
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    assert {lease_view(a, lease.id).state for lease in held} == {LeaseState.SCRUBBING}
    for lease in held:  # each expiry recorded whole: whose, where, by whom
        (event,) = a.read(lambda s, _, i=lease.id: reads.events(s, lease_id=i,
                                                                kind="lease.expired"))
        assert (event.actor, event.host, event.device_id) == ("reaper", b.host_id,
                                                              lease.device_id)
        assert {k: event.details[k] for k in ("offset", "length", "generation",
                                               "expired_by")} == {
            "offset": lease.offset, "length": lease.length, "generation": lease.generation,
            "expired_by": a.host_id}
    b.run(partial(leases.finish_scrub, lease_id=held[0].id))
    assert grant(a, 32 * MiB).length == 32 * MiB
    clean(a)


def test_another_hosts_expired_lease_on_a_carved_region_waits_for_its_device_to_go(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """In a pool that does not scrub, an expired lease's bytes are free at once, except on a
    region carved per lease: its own dax device must be gone before another is made there."""
    region = replace(SHARED, uid="test:region0", devname="dax0", kind=DeviceKind.DAX_REGION)
    a, b = hosts_on(make_ledger, 2, spec=region)
    held = grant(b, 64 * MiB, ttl_s=5)
    clock.advance(6)
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    assert lease_view(a, held.id).state is LeaseState.SCRUBBING


def test_losing_own_leases_ends_only_the_named_active_ones(make_ledger: LedgerFactory) -> None:
    """What a fence or a restart that lost some memory does: each named active lease of this
    host ends as lost (its event says why and who holds its bytes now), the others live on,
    ended ones stay as they ended, and the count is of leases lost this time."""
    ledger = make_ledger()
    kept, lost, released, _also_kept = (grant(ledger, 2 * MiB) for _ in range(4))
    ledger.run(partial(leases.release, lease_id=released.id, actor="t"))
    assert ledger.run(partial(sharing.lose_own_leases, reason="memory gone",
                              only={lost.id, released.id})) == 1
    assert ledger.run(partial(sharing.lose_own_leases, reason="again",
                              only={lost.id, released.id})) == 0
    views = {x.id: ledger.read(lambda s, now, i=x.id: reads.lease(s, i, now))
             for x in (kept, lost, released)}
    assert {i: v.state for i, v in views.items()} == {
        kept.id: LeaseState.ACTIVE, lost.id: LeaseState.LOST, released.id: LeaseState.RELEASED}
    assert views[lost.id].ended_at is not None and views[kept.id].ended_at is None
    (event,) = ledger.read(lambda s, _: reads.events(s, lease_id=lost.id, kind="lease.lost"))
    assert (event.actor, event.host) == ("reaper", ledger.host_id)
    assert event.details["reason"] == "memory gone" and event.details["by"] == ledger.host_id
    assert (event.device_id, event.details["offset"], event.details["length"],
            event.details["generation"]) == (lost.device_id, lost.offset, lost.length,
                                             lost.generation)
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == 4 * MiB  # the lost lease's bytes are free again
    assert ledger.run(partial(sharing.lose_own_leases, reason="fenced")) == 2  # all the rest
    assert ledger.read(fsck).clean


def test_a_host_trimming_its_own_claim_forgets_the_bytes_it_gave_up(
        make_ledger: LedgerFactory) -> None:
    """To fit a large lease a host trims its own half-empty claim: what it gave up becomes part
    of the new claim, and the old claim's holes must never be placed into again."""
    (a,) = hosts_on(make_ledger, 1)
    small = grant(a, 2 * MiB)  # a's first claim: [0, 16) MiB, of which it uses [0, 2)
    big = grant(a, 60 * MiB)  # only fits once [2, 16) is no longer a's idle claim
    assert (small.offset, big.offset) == (0, 2 * MiB)
    last = grant(a, 2 * MiB)
    assert last.offset == 62 * MiB  # not into [2, 16) of the claim that is gone
    with pytest.raises(errors.NoCapacity):
        grant(a, 2 * MiB)
    assert a.read(fsck).clean
    clean(a)


def test_a_claim_is_trimmed_to_the_runs_of_leases_it_holds(make_ledger: LedgerFactory) -> None:
    """Touching leases make one run, a gap between them two: each run becomes a claim of its
    own, and the gaps and the tail are free for the host that needed room."""
    a, b, c = hosts_on(make_ledger, 3)
    full = [grant(c, 16 * MiB) for _ in range(2)]  # c: [0, 32) MiB
    small = [grant(b, 2 * MiB) for _ in range(8)]  # b: [32, 48) in 2 MiB leases
    for i in (1, 4, 5, 6, 7):
        release(b, small[i].id)  # b keeps [32, 34) and [36, 40)
    big = grant(a, 24 * MiB)
    assert (big.offset, big.length) == (40 * MiB, 24 * MiB)
    runs = sorted((e.details["offset"], e.details["length"]) for e in a.read(
        lambda s, _: reads.events(s, kind="claim.created"))
        if str(e.details.get("reason", "")).startswith("trimmed from claim"))
    assert runs == [(32 * MiB, 2 * MiB), (36 * MiB, 4 * MiB)]
    assert grant(a, 2 * MiB).offset == 34 * MiB  # the gap between the runs
    assert a.read(fsck).clean
    clean(a)
    for lease in [*full, small[0], small[2], small[3]]:
        release(b if lease in small else c, lease.id)


def test_a_lost_lease_on_a_carved_region_waits_for_its_device_to_go(
        make_ledger: LedgerFactory) -> None:
    """In a pool that does not scrub, a lost lease's bytes are free at once, except on a region
    carved per lease: its own dax device must be gone before another is made there."""
    region = replace(emulated_spec(64 * MiB, name="dax0"), uid="test:region0",
                     kind=DeviceKind.DAX_REGION)
    ledger = make_ledger([region])
    lease = grant(ledger, 64 * MiB)
    assert ledger.run(partial(sharing.lose_own_leases, reason="fenced")) == 1
    assert lease_view(ledger, lease.id).state is LeaseState.SCRUBBING
    with pytest.raises(errors.NoCapacity):
        grant(ledger, 2 * MiB)
    clean(ledger)


def test_a_lost_leases_bytes_are_granted_again_in_the_same_claim(
        make_ledger: LedgerFactory) -> None:
    """Nothing to give back or trim: the host's claim (here the whole device) has room again
    the moment its lease is lost."""
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")], claim_slice=16 * MiB)
    lost = grant(ledger, 16 * MiB)
    ledger.run(partial(sharing.lose_own_leases, reason="memory gone"))
    assert lease_view(ledger, lost.id).state is LeaseState.LOST
    again = grant(ledger, 16 * MiB)
    assert (again.device_id, again.offset) == (lost.device_id, lost.offset)
    assert ledger.read(lambda s, _: reads.events(s, kind="claim.released")) == []
    assert len(ledger.read(lambda s, _: reads.events(s, kind="claim.created"))) == 1
    clean(ledger)


def test_an_adopted_claim_still_holding_bytes_is_the_adopters_to_grant_in(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """A lost host's claim whose lease is being scrubbed stays claimed, now by the adopter,
    which grants in its free room (around the scrubbing lease) before claiming anything new."""
    watch_a, watch_b = FakeMonotonic(), FakeMonotonic()
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_a))
    b = make_ledger([SHARED], host_id="host-b", claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_b))
    tick(a)
    tick(b)
    held = grant(b, 2 * MiB)  # b's one claim: [0, 16) MiB
    clock.advance(TTL + GRACE + 1)
    watch_a.now += TTL + GRACE + 1
    tick(a)
    assert (lease_view(a, held.id).state, lease_view(a, held.id).host) == (
        LeaseState.SCRUBBING, "host-a")
    mine = [grant(a, 2 * MiB) for _ in range(7)]
    assert sorted(x.offset for x in mine) == [i * 2 * MiB for i in range(1, 8)]
    created = a.read(lambda s, _: reads.events(s, kind="claim.created"))
    assert [e.host for e in created] == ["host-b"]  # a claimed nothing of its own
    a.run(partial(leases.finish_scrub, lease_id=held.id))
    assert grant(a, 2 * MiB).offset == 0
    clean(a)


def test_a_grant_short_of_room_adopts_a_lost_hosts_claims_on_a_device_it_never_saw_too(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """A lost host found by a grant that needs room (not by a tick): the adopter learns of the
    shared device the lost host registered after it started from the ledger (its catalog never
    had it), and gives the idle claim there back like any other. What lies on the lost host's
    own device stays its own."""
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB,
                    liveness=Liveness(TTL, GRACE, monotonic=FakeMonotonic()))
    tick(a)
    grant(a, 2 * MiB)  # a's claim: [0, 16) MiB
    later = replace(emulated_spec(16 * MiB, "shared-b"), shared=True)
    b = make_ledger([SHARED, later, emulated_spec(16 * MiB, "emu-b")], host_id="host-b",
                    claim_slice=16 * MiB, liveness=Liveness(TTL, GRACE, monotonic=FakeMonotonic()))
    tick(b)
    held = [grant(b, 16 * MiB) for _ in range(3)]  # b: [16, 64) MiB of the first device

    def on(device: str) -> LeaseView:
        return b.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                                ttl_s=600, device=device)))
    there = on("shared-b")
    release(b, there.id)  # its claim on shared-b stays, idle
    own = on("emu-b")
    clock.advance(TTL + GRACE + 1)  # b is silent; a has not ticked since
    assert grant(a, 16 * MiB).length == 16 * MiB
    assert {lease_view(a, x.id).state for x in held} == {LeaseState.LOST}
    released = a.read(lambda s, _now: reads.events(s, kind="claim.released"))
    assert there.device_id in {e.device_id for e in released
                               if e.details["reason"] == "host host-b lost"}
    left = a.read(lambda s, _: [c.device_id for c in s.query(Claim)
                                .filter_by(host_id="host-b", state="active")])
    assert left == [own.device_id]
    assert lease_view(a, own.id).host == "host-b"
    clean(a)


def test_a_claim_a_lease_crosses_is_left_alone_and_the_others_are_still_trimmed(
        make_ledger: LedgerFactory) -> None:
    """A damaged ledger (a lease crossing its claim's edge: fsck reports it) does not stop the
    host that needs room from trimming the other claims on the device."""
    a, b, c = hosts_on(make_ledger, 3)
    grant(a, 4 * MiB)  # a's claim: [0, 16) MiB
    release(b, grant(b, 2 * MiB).id)  # b's claim: [16, 32), idle
    full = [grant(c, 16 * MiB) for _ in range(2)]  # c: [32, 64), full

    def damage(tx: Tx) -> None:
        claim = tx.session.query(Claim).filter_by(host_id=a.host_id).one()
        claim.offset, claim.length = 2 * MiB, 14 * MiB
    a.run(damage)  # a's lease [0, 4) now crosses its claim [2, 16)
    taken = grant(c, 16 * MiB)  # only fits once b's idle claim is given back
    assert (taken.offset, taken.length) == (16 * MiB, 16 * MiB)
    released = c.read(lambda s, _: reads.events(s, kind="claim.released"))
    assert [e.host for e in released] == [b.host_id]
    assert c.read(fsck).violations != []  # a's claim, left as it was
    assert {lease_view(c, x.id).state for x in full} == {LeaseState.ACTIVE}


def test_a_host_grants_again_in_its_own_claims_that_trimming_shrank(
        make_ledger: LedgerFactory) -> None:
    """Trimming rebuilds the host's own claims around their leases; room freed in one later is
    granted there, not in a new claim."""
    (a,) = hosts_on(make_ledger, 1)
    first = grant(a, 2 * MiB)  # claim [0, 16) MiB
    rest = grant(a, 14 * MiB)
    gap, kept = grant(a, 2 * MiB), grant(a, 2 * MiB)  # claim [16, 32): [16, 18), [18, 20)
    [grant(a, 16 * MiB) for _ in range(2)]  # [32, 64): the device is all claimed
    release(a, rest.id)
    release(a, gap.id)
    big = grant(a, 16 * MiB)  # fits no claim: the two are trimmed to [0, 2) and [18, 20)
    assert (big.offset, kept.offset) == (2 * MiB, 18 * MiB)
    release(a, first.id)
    assert grant(a, 2 * MiB).offset == 0  # in the shrunk claim, not a new one at [20, 32)
    clean(a)


# PostgreSQL only: another transaction holding a lease row (SQLite's writer locks the whole file).
@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_a_claim_whose_lease_another_transaction_is_changing_is_skipped_not_the_rest(
        make_ledger: LedgerFactory, ledger_url: str) -> None:
    """Trimming for room leaves alone a claim whose lease another host's transaction holds
    locked right now (its owner is changing it) and goes on to the next claims."""
    a, b, c = hosts_on(make_ledger, 3)
    busy = grant(a, 2 * MiB)  # a's claim: [0, 16) MiB, first on the device
    release(b, grant(b, 2 * MiB).id)  # b's claim: [16, 32), idle
    full = [grant(c, 16 * MiB) for _ in range(2)]  # c: [32, 64), full
    engine = sqlalchemy.create_engine(ledger_url)
    try:
        with engine.connect() as other, other.begin():  # a's writer, mid-change of its lease
            other.execute(sqlalchemy.text("SELECT id FROM leases WHERE id = :id FOR UPDATE"),
                          {"id": busy.id})
            taken = grant(c, 16 * MiB)  # only fits once b's idle claim is given back
    finally:
        engine.dispose()
    assert (taken.offset, taken.length) == (16 * MiB, 16 * MiB)
    released = c.read(lambda s, _: reads.events(s, kind="claim.released"))
    assert [e.host for e in released] == [b.host_id]  # a's claim untouched
    assert {lease_view(c, x.id).state for x in [busy, *full]} == {LeaseState.ACTIVE}


def test_a_lost_hosts_own_device_is_neither_placed_on_nor_adopted_by_another(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """Another host's own device (hmem, legacy pmem) is reached by no other host: a writer's
    catalog never offers it, and when its host is lost what lies there stays that host's (its
    chardev on the adopter names another device, maybe the adopter's own: zeroing through it
    would wipe a stranger's bytes). It ends when that host comes back, fenced; a lease there is
    still described to other hosts (its device read on its own, not from their catalog)."""
    watch_a, watch_b = FakeMonotonic(), FakeMonotonic()
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_a))
    b = make_ledger([emulated_spec(32 * MiB, name="b-own")], host_id="host-b",
                    claim_slice=16 * MiB, scrub=True,
                    liveness=Liveness(TTL, GRACE, monotonic=watch_b))
    tick(a)
    tick(b)
    own = b.run(partial(leases.grant, request=GrantRequest(size=4 * MiB, actor="t", ttl_s=600,
                                                           device="b-own")))
    shared = b.run(partial(leases.grant, request=GrantRequest(size=4 * MiB, actor="t",
                                                              ttl_s=600, device="shared0")))
    assert grant(a, 48 * MiB).device == "shared0"
    with pytest.raises(errors.NoCapacity):  # b's own device has room, but not for a
        grant(a, 16 * MiB)
    clock.advance(TTL + GRACE + 1)
    watch_a.now += TTL + GRACE + 1
    tick(a)
    adopted = a.read(lambda s, _: reads.events(s, kind="claim.adopted"))
    assert {e.device_id for e in adopted} == {shared.device_id}
    assert (lease_view(a, shared.id).state, lease_view(a, shared.id).host) == (
        LeaseState.SCRUBBING, "host-a")
    assert lease_view(a, own.id).host == "host-b"
    waiting = {j.lease_id: j for j in a.read(partial(reads.scrubbing, host_id="host-a"))}
    assert shared.id in waiting and own.id not in waiting
    with pytest.raises(errors.InvalidRequest, match="belongs to host host-b"):
        a.run(partial(leases.release, lease_id=own.id, actor="t"))
    # b comes back fenced: its tick records the lease lost, and its own scrubber zeroes it.
    watch_b.now += TTL + GRACE + 1
    tick(b)
    assert [j.lease_id for j in b.read(partial(reads.scrubbing, host_id="host-b"))] == [own.id]
    ended = a.run(partial(leases.release, lease_id=own.id, actor="t"))  # as it ended
    assert (ended.state, ended.device, ended.host) == (LeaseState.SCRUBBING, "b-own", "host-b")
    clean(a)


def test_a_host_trims_its_own_claim_that_another_hosts_trim_made_while_it_was_unaware(
        make_ledger: LedgerFactory) -> None:
    """b's claim is trimmed by a (b keeps a new, smaller claim that b's writer has not read
    yet); b then empties it and asks for more than its stale space can place: making room, b
    trims its own new claim, which its space never held, and answers the grant as usual."""
    a, b, small = b_keeps_2_mib_of_its_claim(make_ledger)
    grant(a, 28 * MiB)  # b's claim trimmed to [32, 34), a new claim b's space does not know
    release(b, small[0].id)  # the new claim is idle in the ledger
    with pytest.raises(errors.NoCapacity):
        grant(b, 15 * MiB)  # nothing has 15 MiB in a row: [32, 34) and [62, 64) are free
    trimmed = [e for e in b.read(lambda s, _: reads.events(s, kind="claim.released"))
               if e.host == b.host_id and e.details.get("reason") == f"trimmed for {b.host_id}"]
    assert [(e.details["offset"], e.details["length"]) for e in trimmed] == [(32 * MiB, 2 * MiB)]
    assert grant(b, 2 * MiB).offset in (32 * MiB, 62 * MiB)
    clean(a)


def test_claims_idle_long_enough_go_back_each_on_record(make_ledger: LedgerFactory,
                                                         clock: ManualClock) -> None:
    """Only claims that held no lease for idle_s go back; the answer counts them, and each one's
    release names its host, device, claim and extent, and why."""
    a = make_ledger([SHARED], host_id="host-a", claim_slice=16 * MiB)
    kept = grant(a, 4 * MiB)  # its claim stays
    idle = [grant(a, 16 * MiB) for _ in range(2)]
    for lease in idle:
        release(a, lease.id)
    claims = a.read(lambda s, _: {c.id: (c.offset, c.length) for c in s.query(Claim)
                                  .filter_by(host_id="host-a", state="active")})
    assert len(claims) == 3
    assert a.run(partial(sharing.release_idle_claims, idle_s=30)) == 0  # not idle long enough
    clock.advance(31)
    assert a.run(partial(sharing.release_idle_claims, idle_s=30)) == 2
    events = a.read(lambda s, _: reads.events(s, kind="claim.released"))
    assert {(e.actor, e.host, e.device_id, e.details["reason"]) for e in events} == {
        ("allocator", "host-a", kept.device_id, "idle")}
    gone = {e.details["claim_id"]: (e.details["offset"], e.details["length"]) for e in events}
    assert len(gone) == 2 and all(claims[c] == extent for c, extent in gone.items())
    assert a.run(partial(sharing.release_idle_claims, idle_s=30)) == 0
    assert lease_view(a, kept.id).state is LeaseState.ACTIVE
    clean(a)


def test_a_reloaded_space_holds_this_hosts_claims_and_leases_only(
        make_ledger: LedgerFactory, caplog: pytest.LogCaptureFixture) -> None:
    """Another host trimmed b's claim: b's next tick reloads its space from the ledger, from b's
    own claims and leases; the other hosts' leases on the device are theirs, not misfiled ones
    of b's (each of which would be logged as an invariant broken)."""
    a, b, small = b_keeps_2_mib_of_its_claim(make_ledger)
    grant(a, 28 * MiB)  # a trims b's claim to [32, 34): b's space is stale
    with caplog.at_level(logging.INFO, logger="poold.ledger"):
        tick(b)
    assert f"space.reloaded host={b.host_id}" in caplog.text
    assert "space.misfiled_lease" not in caplog.text
    assert grant(b, 2 * MiB).offset != small[0].offset  # b's lease still holds its bytes
    clean(b)


def test_a_lease_in_another_hosts_session_is_refused_saying_where_to_lease(
        make_ledger: LedgerFactory) -> None:
    """A session lives on the host that opened it (its keepalive renews what that host holds):
    another host's grant in it is refused, saying what to do instead."""
    a, b = hosts_on(make_ledger, 2)
    session = b.run(partial(sessions.open_session,
                            request=sessions.OpenRequest(actor="t", ttl_s=600)))
    with pytest.raises(errors.InvalidRequest) as refused:
        a.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                         session_id=session.id)))
    assert str(refused.value) == (f"session {session.id} belongs to host {b.host_id}; lease "
                                  "there, or open a session on this host")
    assert a.read(lambda s, now: reads.leases(s, now)) == []
