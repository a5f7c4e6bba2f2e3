"""Lease lifecycle on the real ledger (SQLite file and PostgreSQL), with a manual ledger clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from functools import partial

import pytest

from poold import errors
from poold.inventory import DeviceSpec
from poold.ledger import devices, leases, reads
from poold.ledger import queries as q
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.space import Catalog
from poold.ledger.tx import Tx
from poold.ledger.views import LeaseView
from poold.models import Claim
from poold.types import MAX_BYTES, DeviceKind, EventKind, LeaseState, MiB
from tests.conftest import HOST, LedgerFactory, emulated_spec


def grant(ledger: Ledger, size: int, **kwargs: object) -> LeaseView:
    request = GrantRequest(size=size, actor="test", **kwargs)  # type: ignore[arg-type]
    return ledger.run(partial(leases.grant, request=request))


def assert_clean(ledger: Ledger) -> None:
    report = ledger.read(fsck)
    assert report.clean, report.violations


def test_grant_rounds_up_to_align_and_names_everything_to_map(ledger: Ledger) -> None:
    lease = grant(ledger, 3 * MiB, ttl_s=30, labels={"model": "llama"})
    assert lease.length == 4 * MiB and lease.offset % (2 * MiB) == 0
    assert lease.chardev == "/nonexistent/emu0" and lease.align == 2 * MiB
    assert lease.state is LeaseState.ACTIVE and lease.ttl_s == 30
    assert (lease.expires_at - lease.granted_at).total_seconds() == 30
    assert lease.labels == {"model": "llama"}
    assert_clean(ledger)


def test_leases_never_overlap_and_capacity_is_exact(ledger: Ledger) -> None:
    granted = [grant(ledger, 8 * MiB) for _ in range(8)]  # fills the 64 MiB device
    extents = sorted((x.offset, x.length) for x in granted)
    assert extents == [(i * 8 * MiB, 8 * MiB) for i in range(8)]
    with pytest.raises(errors.NoCapacity) as refused:
        grant(ledger, 2 * MiB)
    assert str(refused.value) == f"no free extent of {2 * MiB} bytes in pool 'default' now"
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == 64 * MiB and pool.available_bytes == 0
    ledger.run(partial(leases.release, lease_id=granted[3].id, actor="test"))
    again = grant(ledger, 8 * MiB)
    assert (again.offset, again.length) == (granted[3].offset, 8 * MiB)
    assert_clean(ledger)


def test_generation_only_grows(ledger: Ledger) -> None:
    generations = []
    for _ in range(5):
        lease = grant(ledger, 64 * MiB)
        generations.append(lease.generation)
        ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    assert generations == sorted(set(generations))
    # On record with each grant: what an audit matches a holder's mapping against.
    granted = ledger.read(lambda s, _: reads.events(s, kind="lease.granted"))
    assert [e.details["generation"] for e in reversed(granted)] == generations


def test_release_is_idempotent_and_returns_capacity(ledger: Ledger) -> None:
    lease = grant(ledger, 64 * MiB)
    first = ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    second = ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    assert first.state is second.state is LeaseState.RELEASED
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == 0 and pool.available_bytes == 64 * MiB
    kinds = [e.kind for e in ledger.read(lambda s, _: reads.events(s, lease_id=lease.id))]
    assert kinds.count(EventKind.LEASE_RELEASED) == 1
    assert_clean(ledger)


def test_expiry_is_judged_by_the_ledger_clock(ledger: Ledger, clock: ManualClock) -> None:
    lease = grant(ledger, 32 * MiB, ttl_s=10)
    clock.advance(9.9)
    assert ledger.read(lambda s, now: reads.lease(s, lease.id, now)).state is LeaseState.ACTIVE
    clock.advance(0.1)
    # Not reaped yet, but never reported valid past expires_at.
    assert ledger.read(lambda s, now: reads.lease(s, lease.id, now)).state is LeaseState.EXPIRED
    with pytest.raises(errors.LeaseExpired):
        ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=None, actor="test"))
    assert ledger.run(leases.reap) == 1
    assert ledger.run(leases.reap) == 0
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == 0
    kinds = [e.kind for e in ledger.read(lambda s, _: reads.events(s, lease_id=lease.id))]
    assert EventKind.LEASE_EXPIRED in kinds
    assert_clean(ledger)


def test_a_reap_finalises_every_lease_past_expiry_up_to_its_batch_and_counts_them(
        ledger: Ledger, clock: ManualClock) -> None:
    due = [grant(ledger, 2 * MiB, ttl_s=5) for _ in range(3)]
    kept = grant(ledger, 2 * MiB, ttl_s=60)
    clock.advance(6)
    assert ledger.run(partial(leases.reap, limit=2)) == 2  # a batch at a time
    assert ledger.run(leases.reap) == 1
    assert ledger.run(leases.reap) == 0
    ended = [e.lease_id for e in ledger.read(
        lambda s, _: reads.events(s, kind=EventKind.LEASE_EXPIRED))]
    assert sorted(ended) == sorted(x.id for x in due)
    assert ledger.read(lambda s, now: reads.lease(s, kept.id, now)).state is LeaseState.ACTIVE


def test_keepalive_extends_from_now(ledger: Ledger, clock: ManualClock) -> None:
    lease = grant(ledger, 2 * MiB, ttl_s=10)
    clock.advance(8)
    renewed = ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=20, actor="t"))
    assert (renewed.expires_at - lease.granted_at).total_seconds() == 28
    clock.advance(19)
    assert ledger.run(leases.reap) == 0
    assert ledger.read(lambda s, now: reads.lease(s, lease.id, now)).state is LeaseState.ACTIVE


def test_keepalive_of_released_lease_is_a_conflict(ledger: Ledger) -> None:
    lease = grant(ledger, 2 * MiB)
    ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    with pytest.raises(errors.LeaseNotActive):
        ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=None, actor="test"))


@pytest.mark.parametrize("scrub", [False, True], ids=["frees", "scrubs"])
def test_release_after_expiry_finalises_as_expired(make_ledger: LedgerFactory, clock: ManualClock,
                                                   scrub: bool) -> None:
    """Past expires_at the lease already reads `expired` (computed on read); the release must
    still finalise it in the ledger: ended_at, the event, its bytes freed or sent to scrub."""
    ledger = make_ledger(scrub=scrub)
    lease = grant(ledger, 2 * MiB, ttl_s=5)
    clock.advance(6)
    ended = ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    assert ended.state is (LeaseState.SCRUBBING if scrub else LeaseState.EXPIRED)
    assert ended.ended_at == clock.now()
    events = ledger.read(lambda s, _: reads.events(s, lease_id=lease.id))
    assert [(e.kind, e.actor) for e in events] == [
        (EventKind.LEASE_EXPIRED, "reaper"), (EventKind.LEASE_GRANTED, "test")]
    assert events[0].details["scrub"] is scrub
    assert ledger.run(leases.reap) == 0  # nothing left for the reaper: it was finalised
    (pool,) = ledger.read(reads.pools)
    assert pool.leased_bytes == 0
    assert pool.scrubbing_bytes == (2 * MiB if scrub else 0)
    assert [job.lease_id for job in ledger.read(partial(reads.scrubbing, host_id=HOST))] == (
        [lease.id] if scrub else [])
    again = ledger.run(partial(leases.release, lease_id=lease.id, actor="test"))
    assert (again.state, again.ended_at) == (ended.state, ended.ended_at)  # idempotent
    assert len(ledger.read(lambda s, _: reads.events(s, lease_id=lease.id))) == 2
    assert_clean(ledger)


def test_full_pool_reaps_expired_leases_before_refusing(ledger: Ledger, clock: ManualClock
                                                        ) -> None:
    grant(ledger, 64 * MiB, ttl_s=5)
    clock.advance(5)
    assert grant(ledger, 64 * MiB).state is LeaseState.ACTIVE
    assert_clean(ledger)


def test_idempotency_key_replays_and_refuses_mismatch(ledger: Ledger) -> None:
    first = grant(ledger, 4 * MiB, idempotency_key="k1")
    again = grant(ledger, 4 * MiB, idempotency_key="k1")
    assert again.id == first.id
    with pytest.raises(errors.IdempotencyConflict):
        grant(ledger, 8 * MiB, idempotency_key="k1")
    assert len(ledger.read(lambda s, now: reads.leases(s, now))) == 1


def test_a_request_digest_stays_what_the_ledger_stored(ledger: Ledger) -> None:
    """Digests are stored with their idempotency keys: computed otherwise (after an upgrade,
    say), a retry of a grant made before would be refused as another request. These are the
    digests of a plain lease and of an elastic one in a session, as stored today."""
    plain = GrantRequest(size=4 * MiB, actor="test", pool="p", ttl_s=30, labels={"m": "x"},
                         tenant="t", idempotency_key="k")
    assert plain.digest() == (
        "f77b7bc905123adeef44e1dffa9396cc60f3e5bbb9a969cec949d35ff4235a44")
    elastic = replace(plain, session_id="s" * 32, elastic=True)
    assert elastic.digest() == (
        "06b924b1bcd3bc369ad5abac6ad4bae6ed0dfc09dccbc6e7a807df152447852b")


def test_a_new_claim_is_on_record_as_made(ledger: Ledger) -> None:
    """The first grant on a device claims a slice of it: the claim.created event names the
    device and the extent the claim row holds."""
    lease = grant(ledger, 4 * MiB)
    (created,) = ledger.read(lambda s, _: reads.events(s, kind="claim.created"))
    offset, length = ledger.read(lambda s, _: (lambda c: (c.offset, c.length))(
        s.get(Claim, created.details["claim_id"])))
    assert (created.actor, created.host, created.device_id) == ("allocator", HOST,
                                                               lease.device_id)
    assert (created.details["offset"], created.details["length"]) == (offset, length)
    assert offset <= lease.offset < lease.offset + lease.length <= offset + length


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"size": 0}, errors.InvalidRequest, f"size must be between 1 and {MAX_BYTES} bytes, "
         "got 0"),
        ({"size": -5}, errors.InvalidRequest, f"size must be between 1 and {MAX_BYTES} bytes, "
         "got -5"),
        ({"size": 65 * MiB}, errors.LeaseTooLarge, "no online device in pool 'default' can "
         f"hold {65 * MiB} bytes"),
        ({"size": MiB, "pool": "nope"}, errors.UnknownPool, None),
        ({"size": MiB, "ttl_s": 0}, errors.InvalidRequest, None),
        ({"size": MiB, "ttl_s": 10**9}, errors.InvalidRequest, None),
        ({"size": MiB, "device": "dax9.9"}, errors.LeaseTooLarge, "no online device matching "
         f"the hints in pool 'default' can hold {MiB} bytes"),
    ],
)
def test_bad_requests_are_refused_and_leave_nothing(
    ledger: Ledger, kwargs: dict[str, object], error: type[Exception], message: str | None
) -> None:
    """Refused with what was wrong (the messages not given here are checked where their
    rules are: pools, TTLs)."""
    before = len(ledger.read(lambda s, _: reads.events(s)))
    with pytest.raises(error) as refused:
        grant(ledger, **kwargs)  # type: ignore[arg-type]
    assert message is None or str(refused.value) == message
    assert len(ledger.read(lambda s, _: reads.events(s))) == before


def test_an_unknown_lease_is_refused_by_name(ledger: Ledger) -> None:
    """What the caller sent, quoted; a string too long to be an id cut at 64 characters (it
    names no lease, and an error should not echo a megabyte back)."""
    absent = grant(ledger, 2 * MiB).id[:-4] + "0000"
    cases = (("nope", "'nope'"), ("x" * 100, repr("x" * 64)), (absent, repr(absent)))
    for command in (leases.release, leases.revoke, partial(leases.keepalive, ttl_s=None)):
        for lease_id, said in cases:
            with pytest.raises(errors.UnknownLease) as refused:
                ledger.run(partial(command, lease_id=lease_id, actor="test"))
            assert str(refused.value) == f"no lease {said}"
    for lease_id, said in cases:
        with pytest.raises(errors.UnknownLease) as refused:
            ledger.read(lambda s, now, lease_id=lease_id: reads.lease(s, lease_id, now))
        assert str(refused.value) == f"no lease {said}"


def test_another_tenants_lease_does_not_exist_for_it(ledger: Ledger) -> None:
    """A tenant's keepalive, release or read of another tenant's lease is refused as for a lease
    that does not exist, and leaves it as it was."""
    theirs = grant(ledger, 2 * MiB, tenant="a", ttl_s=60)
    for command in (partial(leases.keepalive, ttl_s=600), leases.release):
        with pytest.raises(errors.UnknownLease) as refused:
            ledger.run(partial(command, lease_id=theirs.id, actor="b", tenant_only="b"))
        assert str(refused.value) == f"no lease {theirs.id!r}"
    with pytest.raises(errors.UnknownLease):
        ledger.read(lambda s, now: reads.lease(s, theirs.id, now, tenant_only="b"))
    assert ledger.read(lambda s, now: reads.lease(s, theirs.id, now, tenant_only="a")) == theirs
    assert [e.kind for e in ledger.read(lambda s, _: reads.events(s, lease_id=theirs.id))] == [
        EventKind.LEASE_GRANTED]
    # Its own tenant may.
    renewed = ledger.run(partial(leases.keepalive, lease_id=theirs.id, ttl_s=600, actor="a",
                                 tenant_only="a"))
    assert renewed.ttl_s == 600
    ended = ledger.run(partial(leases.release, lease_id=theirs.id, actor="a", tenant_only="a"))
    assert ended.state is LeaseState.RELEASED


def test_keepalive_without_a_ttl_keeps_the_leases_own_and_records_the_renewal(
        ledger: Ledger, clock: ManualClock) -> None:
    """The pool's default TTL is 60 s; a lease granted for 600 s keeps 600 s when its holder
    renews without saying; the event names the lease, its host and device, the new expiry."""
    lease = grant(ledger, 2 * MiB, ttl_s=600)
    clock.advance(100)
    renewed = ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=None, actor="t"))
    assert renewed.ttl_s == 600 and renewed.expires_at == clock.now() + timedelta(seconds=600)
    assert renewed == ledger.read(lambda s, now: reads.lease(s, lease.id, now))
    shorter = ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=30, actor="t"))
    assert shorter.ttl_s == 30 and shorter.expires_at == clock.now() + timedelta(seconds=30)
    assert shorter == ledger.read(lambda s, now: reads.lease(s, lease.id, now))
    second, first = ledger.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_RENEWED))
    for event, ttl in ((first, 600), (second, 30)):
        assert (event.actor, event.host, event.device_id, event.lease_id) == (
            "t", HOST, lease.device_id, lease.id)
        assert event.details == {"expires_at": (clock.now() + timedelta(seconds=ttl)).isoformat(),
                                 "ttl_s": ttl}


def test_keepalive_refusals_say_when_it_expired_or_how_it_ended(ledger: Ledger,
                                                               clock: ManualClock) -> None:
    expiring = grant(ledger, 2 * MiB, ttl_s=5)
    released = grant(ledger, 2 * MiB)
    ledger.run(partial(leases.release, lease_id=released.id, actor="test"))
    clock.advance(6)
    with pytest.raises(errors.LeaseExpired) as expired:
        ledger.run(partial(leases.keepalive, lease_id=expiring.id, ttl_s=None, actor="t"))
    assert str(expired.value) == (f"lease {expiring.id} expired at "
                                  f"{expiring.expires_at.isoformat()}")
    with pytest.raises(errors.LeaseNotActive) as ended:
        ledger.run(partial(leases.keepalive, lease_id=released.id, ttl_s=None, actor="t"))
    assert str(ended.value) == f"lease {released.id} is released"


def test_revoke_ends_the_lease(ledger: Ledger) -> None:
    lease = grant(ledger, 2 * MiB)
    assert ledger.run(partial(leases.revoke, lease_id=lease.id, actor="admin")).state \
        is LeaseState.REVOKED
    with pytest.raises(errors.LeaseNotActive):
        ledger.run(partial(leases.keepalive, lease_id=lease.id, ttl_s=None, actor="test"))
    assert_clean(ledger)


def test_claims_are_sliced_and_leases_stay_inside_them(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB)], claim_slice=16 * MiB)
    granted = [grant(ledger, 6 * MiB) for _ in range(4)]
    devices = ledger.read(reads.devices)
    assert devices[0].claimed_bytes == 32 * MiB  # two 16 MiB slices hold 4 x 6 MiB
    assert {x.offset // (16 * MiB) for x in granted} == {0, 1}
    big = grant(ledger, 20 * MiB)  # larger than a slice: a claim of two slices
    assert big.length == 20 * MiB
    assert_clean(ledger)


def test_restart_rebuilds_space_from_the_ledger(make_ledger: LedgerFactory) -> None:
    first = make_ledger()
    kept = grant(first, 16 * MiB, ttl_s=600)
    gone = grant(first, 16 * MiB, ttl_s=600)
    first.run(partial(leases.release, lease_id=gone.id, actor="test"))
    first.close()
    second = make_ledger()
    fresh = [grant(second, 16 * MiB) for _ in range(3)]
    assert all(not (f.offset < kept.offset + kept.length and kept.offset < f.offset + f.length)
               for f in fresh)
    with pytest.raises(errors.NoCapacity):
        grant(second, 16 * MiB)
    assert_clean(second)


def test_a_refused_grant_says_what_stands_in_its_way(make_ledger: LedgerFactory) -> None:
    """Draining devices and devices an admin operation holds are states an admin can end, and
    the refusal names them; a lease that no device could ever hold says so, with its hints."""
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), emulated_spec(32 * MiB, "emu1")])

    def refusal(size: int, **hints: object) -> str:
        with pytest.raises(errors.PooldError) as refused:
            grant(ledger, size, **hints)
        return f"{type(refused.value).__name__}: {refused.value.detail}"

    ledger.run(partial(devices.drain, devname="emu0", actor="admin"))
    assert refusal(48 * MiB) == (
        "DeviceDraining: emu0 in pool 'default' is draining: no new leases there (live ones "
        "run on) until an admin undrains it; no other device can hold 50331648 bytes")
    assert refusal(48 * MiB, device="emu0") == (
        "DeviceDraining: emu0 in pool 'default' is draining: no new leases there (live ones "
        "run on) until an admin undrains it")
    served = grant(ledger, 16 * MiB)
    assert served.device == "emu1"  # a device that is not draining serves
    ledger.run(partial(leases.release, lease_id=served.id, actor="test"))
    ledger.run(partial(devices.drain, devname="emu1", actor="admin"))
    assert refusal(16 * MiB).startswith(
        "DeviceDraining: emu0, emu1 in pool 'default' are draining: ")
    for name in ("emu0", "emu1"):
        ledger.run(partial(devices.undrain, devname=name, actor="admin"))
    ledger.run(partial(devices.hold, devname="emu0", actor="admin", operation="reconfigure"))
    assert refusal(48 * MiB) == ("DeviceBusy: emu0 is being changed by an admin operation: "
                                 "retry when it is done")
    ledger.run(partial(devices.hold, devname="emu1", actor="admin", operation="reconfigure"))
    assert refusal(16 * MiB).startswith("DeviceBusy: emu0, emu1 is being changed")
    assert refusal(128 * MiB) == (
        "LeaseTooLarge: no online device in pool 'default' can hold 134217728 bytes")
    for hints in ({"device": "emu1"}, {"numa_node": 3}):
        assert refusal(48 * MiB, **hints) == ("LeaseTooLarge: no online device matching the "
                                              "hints in pool 'default' can hold 50331648 bytes")


def test_a_lease_another_host_expired_first_is_not_expired_again(
        ledger: Ledger, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL another host short of room may expire this host's lease between the
    reaper's read of the due leases and its update (sharing.make_room): the reaper then counts
    it nowhere and records nothing more."""
    due = grant(ledger, 2 * MiB, ttl_s=5)
    clock.advance(6)
    read_before = ledger.run(lambda tx: q.leases.expired_leases(tx.conn, tx.host_id, tx.now, 10))
    assert [x.id for x in read_before] == [due.id]
    assert ledger.run(lambda tx: q.leases.expire_lease(tx.conn, due.id, tx.now))  # the other
    monkeypatch.setattr(q.leases, "expired_leases", lambda *_args: read_before)
    assert ledger.run(leases.reap) == 0
    assert ledger.read(lambda s, _: reads.events(s, kind="lease.expired")) == []


WHOLE = replace(emulated_spec(64 * MiB, "dax0.0"), kind=DeviceKind.DEVDAX, shared=True)


def test_a_device_handed_out_whole_is_bound_on_record_by_its_first_lease(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([WHOLE])
    first = grant(ledger, 2 * MiB, tenant="team-a")
    (event,) = ledger.read(lambda s, _: reads.events(s, kind="device.changed"))
    assert (event.actor, event.host, event.device_id) == ("test", HOST, first.device_id)
    assert event.details == {"devname": "dax0.0", "changed": {"tenant_scope": "team-a"}}


def test_a_device_another_host_bound_meanwhile_refuses_and_frees_the_room(
        make_ledger: LedgerFactory) -> None:
    """Host b's catalog still shows the device free when host a's grant binds it (on
    PostgreSQL, a commit between b's catalog read and its grant): b's grant for another tenant
    is refused naming why, and the extent it had placed is free again for the bound tenant."""
    a = make_ledger([WHOLE], host_id="host-a", claim_slice=16 * MiB)
    b = make_ledger([WHOLE], host_id="host-b", claim_slice=16 * MiB)
    before = b.run(lambda tx: tx.catalog)  # the device unbound
    grant(a, 2 * MiB, tenant="team-a")

    def grant_with(tx: Tx, tenant: str) -> LeaseView:
        tx.snapshot = before
        return leases.grant(tx, GrantRequest(size=2 * MiB, actor="test", ttl_s=600,
                                             tenant=tenant))
    with pytest.raises(errors.DeviceBound,
                       match=r"^dax0\.0 was just bound to another tenant's leases$"):
        b.run(partial(grant_with, tenant="team-b"))
    again = b.run(partial(grant_with, tenant="team-a"))  # the same room, unbound by nothing
    assert again.offset == 16 * MiB  # b's claim, first extent: the refused grant left none
    assert b.read(fsck).clean


def test_devices_bound_to_other_tenants_refuse_a_grant_naming_each(
        make_ledger: LedgerFactory) -> None:
    """Both devices handed out whole serve a tenant each: a third tenant is refused, told
    which devices (not which tenants) stand in its way."""
    other = replace(emulated_spec(64 * MiB, "dax1.0"), kind=DeviceKind.DEVDAX, shared=True)
    ledger = make_ledger([WHOLE, other])
    bound = {grant(ledger, 2 * MiB, tenant=t).device_id for t in ("team-a", "team-b")}
    assert len(bound) == 2
    with pytest.raises(errors.DeviceBound) as refused:
        grant(ledger, 2 * MiB, tenant="team-c")
    assert str(refused.value) == (
        "dax0.0, dax1.0 in pool 'default' serve(s) another tenant's leases: a device handed out "
        "whole serves one tenant at a time (a trusted pool shares it); an admin frees one with "
        "`poold device unbind-tenant` once that tenant's leases ended")


def test_a_release_is_recorded_with_the_extent_it_freed(ledger: Ledger) -> None:
    lease = grant(ledger, 2 * MiB)
    ledger.run(partial(leases.release, lease_id=lease.id, actor="holder"))
    (event,) = ledger.read(lambda s, _: reads.events(s, kind=EventKind.LEASE_RELEASED))
    assert (event.actor, event.host, event.device_id, event.lease_id) == (
        "holder", HOST, lease.device_id, lease.id)
    assert event.details == {"offset": lease.offset, "length": lease.length,
                             "generation": lease.generation, "scrub": False}


def test_a_writer_whose_catalog_missed_a_pool_reads_it_again(ledger: Ledger) -> None:
    """On PostgreSQL another host can add a pool after this writer read its catalog for the
    transaction: a lease in it is still renewed and shown, its pool looked up again."""
    lease = grant(ledger, 2 * MiB, ttl_s=60)

    def stale(tx: Tx) -> None:
        tx.snapshot = Catalog([], [], version=tx.catalog.version)  # read before any pool

    def renew(tx: Tx) -> LeaseView:
        stale(tx)
        return leases.keepalive(tx, lease.id, 120, "t")

    def show(tx: Tx) -> LeaseView:
        stale(tx)
        record = q.leases.lease_record(tx.conn, lease.id)
        assert record is not None
        return leases.view(tx, record)

    renewed = ledger.run(renew)
    assert (renewed.pool, renewed.ttl_s) == ("default", 120)
    assert ledger.run(show) == renewed


def test_a_tenants_grant_takes_memory_made_per_lease_before_binding_a_whole_device(
        make_ledger: LedgerFactory) -> None:
    """A devdax device is handed out whole, so its first lease binds it to that tenant: a grant
    that fits elsewhere goes elsewhere first, whichever device the pool lists first, and a
    device bound to the tenant already comes before one it would newly bind."""
    whole = [DeviceSpec(uid=f"test:{name}", kind=DeviceKind.DEVDAX, devname=name,
                        chardev=f"/nonexistent/{name}", size=64 * MiB, align=2 * MiB)
             for name in ("dax0.0", "dax1.0")]
    ledger = make_ledger(specs=[*whole, emulated_spec(size=8 * MiB)])
    assert grant(ledger, 4 * MiB, tenant="a").device == "emu0"
    big = grant(ledger, 32 * MiB, tenant="a")  # only a whole device holds it: the first binds
    assert big.device == "dax0.0"
    assert grant(ledger, 8 * MiB, tenant="a").device == "dax0.0"  # emu0 is short: its own
    assert {d.devname: d.tenant_scope for d in ledger.read(
        lambda s, now: reads.devices(s, now))} == {"dax0.0": "a", "dax1.0": None, "emu0": None}


BAD_TEXT = "\x00" + "y" * 70  # a NUL, and more than the 64 characters a refusal quotes


@pytest.mark.parametrize("field", [
    {"pool": BAD_TEXT}, {"idempotency_key": BAD_TEXT}, {"tenant": BAD_TEXT},
    {"device": BAD_TEXT}, {"labels": {BAD_TEXT: "v"}}, {"labels": {"k": BAD_TEXT}},
])
def test_control_characters_in_a_grants_text_are_refused_quoting_them(
        ledger: Ledger, field: dict[str, object]) -> None:
    """Beneath the API's own check: the ledger refuses them itself (on PostgreSQL a NUL would
    fail the whole batch's transaction), quoting the first 64 characters, and grants nothing."""
    with pytest.raises(errors.InvalidRequest) as refused:
        ledger.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                              **field)))  # type: ignore[arg-type]
    assert str(refused.value) == f"control characters in {BAD_TEXT[:64]!r}"
    assert ledger.read(lambda s, now: reads.leases(s, now)) == []
