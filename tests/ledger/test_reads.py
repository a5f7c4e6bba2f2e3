"""The ledger's read views that the API draws from, on both databases: one device's extents
(the memory map), where a lease's memory is (fd.sock), and the refusals for what is not there."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from poold import errors
from poold.ledger import leases, membership, pools, reads
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.types import DeviceKind, LeaseState, MiB
from tests.conftest import LedgerFactory, emulated_spec


def grant(ledger: Ledger, device: str, size: int, ttl_s: int = 600) -> LeaseView:
    request = GrantRequest(size=size, actor="test", ttl_s=ttl_s, device=device)
    return ledger.run(partial(leases.grant, request=request))


def test_one_devices_extents_are_its_own_and_its_figures_live(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), emulated_spec(64 * MiB, "emu1")],
                         claim_slice=16 * MiB)
    kept = grant(ledger, "emu0", 4 * MiB)
    due = grant(ledger, "emu0", 2 * MiB, ttl_s=5)
    elsewhere = grant(ledger, "emu1", 8 * MiB)
    clock.advance(6)  # `due` has expired; nobody reaped it yet
    device, claims, held = ledger.read(
        lambda s, now: reads.device_extents(s, kept.device_id, now))
    assert device.devname == "emu0"
    assert [(c.offset, c.length) for c in claims] == [(0, 16 * MiB)]  # emu1's claim is not here
    assert {x.id: x.state for x in held} == {kept.id: LeaseState.ACTIVE,
                                             due.id: LeaseState.EXPIRED}
    assert (device.leased_bytes, device.live_leases) == (4 * MiB, 1)  # by the ledger's now
    assert (device.size, device.claimed_bytes, device.free_bytes) == (
        64 * MiB, 16 * MiB, 48 * MiB)  # free: not claimed by any host
    assert elsewhere.device_id != kept.device_id
    with pytest.raises(errors.UnknownDevice, match=r"^no device 999$"):
        ledger.read(lambda s, now: reads.device_extents(s, 999, now))


def test_leases_are_listed_newest_first_those_granted_together_by_id_up_to_the_limit(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    first = grant(ledger, "emu0", 2 * MiB)
    clock.advance(1)
    together = [grant(ledger, "emu0", 2 * MiB) for _ in range(5)]  # one ledger instant
    newest_first = [*sorted(x.id for x in together), first.id]
    assert [x.id for x in ledger.read(lambda s, now: reads.leases(s, now))] == newest_first
    assert [x.id for x in ledger.read(lambda s, now: reads.leases(s, now, limit=2))] == \
        newest_first[:2]


def test_leases_listed_for_a_host_are_that_hosts_only(make_ledger: LedgerFactory) -> None:
    shared = replace(emulated_spec(64 * MiB, "shared0"), shared=True)
    a = make_ledger([shared], host_id="host-a", claim_slice=16 * MiB)
    b = make_ledger([shared], host_id="host-b", claim_slice=16 * MiB)
    mine, theirs = grant(a, "shared0", 2 * MiB), grant(b, "shared0", 2 * MiB)
    for host, lease in (("host-a", mine), ("host-b", theirs)):
        assert [x.id for x in a.read(lambda s, now, h=host: reads.leases(s, now, host=h))] == \
            [lease.id]


def test_leases_listed_for_a_tenant_or_a_pool_are_theirs_only(make_ledger: LedgerFactory) -> None:
    """The filters a tenant's reads rest on: another tenant's leases, and another pool's, are
    never in the list."""
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), emulated_spec(64 * MiB, "emu1")])
    policy = pools.PoolPolicy(name="other", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    ledger.run(partial(pools.create_pool, policy=policy, actor="t"))
    ids = {d.devname: d.id for d in ledger.read(reads.devices)}
    ledger.run(partial(membership.move_device, device_id=ids["emu1"], name="other", actor="t"))

    def granted(tenant: str, pool: str) -> str:
        request = GrantRequest(size=2 * MiB, actor="t", ttl_s=600, tenant=tenant, pool=pool)
        return ledger.run(partial(leases.grant, request=request)).id

    a_default, b_default = granted("a", "default"), granted("b", "default")
    a_other = granted("a", "other")

    def listed(**filters: str) -> set[str]:
        return {x.id for x in ledger.read(lambda s, now: reads.leases(s, now, **filters))}

    assert listed(tenant="a") == {a_default, a_other}
    assert listed(tenant="b") == {b_default}
    assert listed(pool="other") == {a_other}
    assert listed(pool="default") == {a_default, b_default}
    assert listed(tenant="a", pool="default") == {a_default}


def test_leases_listed_by_state_go_by_the_ledger_clock_before_the_reaper(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """A lease is active until its expires_at and expired from that instant on, as the ledger
    clock reads it, whether or not the reaper has finalised it; an ended one is its state."""
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    due_now = grant(ledger, "emu0", 2 * MiB, ttl_s=10)
    later = grant(ledger, "emu0", 2 * MiB, ttl_s=11)
    done = grant(ledger, "emu0", 2 * MiB)
    ledger.run(partial(leases.release, lease_id=done.id, actor="test"))
    clock.advance(10)  # due_now's expires_at, to the microsecond; nobody reaped it

    def listed(state: LeaseState) -> set[str]:
        return {x.id for x in ledger.read(lambda s, now: reads.leases(s, now, state=state))}
    assert listed(LeaseState.ACTIVE) == {later.id}
    assert listed(LeaseState.EXPIRED) == {due_now.id}
    assert listed(LeaseState.RELEASED) == {done.id}


def test_a_device_or_host_with_nothing_counts_zero(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    (device,) = ledger.read(reads.devices)
    assert (device.claimed_bytes, device.leased_bytes, device.scrubbing_bytes,
            device.live_leases, device.free_bytes) == (0, 0, 0, 0, 64 * MiB)
    with pytest.raises(errors.UnknownHost, match=r"^no host 'nowhere'$"):
        ledger.read(lambda s, now: reads.host(s, "nowhere", now))
    with pytest.raises(errors.UnknownPool, match=r"^no pool 'nowhere'$"):
        ledger.read(lambda s, now: reads.leases(s, now, pool="nowhere"))
    with pytest.raises(errors.UnknownPool, match=r"^no pool 'nowhere'$"):
        ledger.read(lambda s, now: reads.pool(s, now, "nowhere"))


def test_lease_memory_says_the_kind_and_node_of_the_leases_device(
        make_ledger: LedgerFactory) -> None:
    on_node = replace(emulated_spec(64 * MiB, "ram1"), kind=DeviceKind.SYSTEM_RAM, numa_node=1)
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), on_node])
    for devname, kind, node in (("emu0", DeviceKind.EMULATED, None),
                                ("ram1", DeviceKind.SYSTEM_RAM, 1)):
        lease = grant(ledger, devname, 2 * MiB)
        view, found_kind, found_node = ledger.read(
            lambda s, now, i=lease.id: reads.lease_memory(s, i, now))
        assert (view.id, view.device, found_kind, found_node) == (lease.id, devname, kind, node)
        shown = ledger.read(lambda s, now, i=view.device_id: reads.device_extents(s, i, now))[0]
        assert (shown.devname, shown.kind, shown.numa_node) == (devname, kind, node)
    with pytest.raises(errors.UnknownLease):
        ledger.read(lambda s, now: reads.lease_memory(s, "0" * 32, now))


def test_pools_are_listed_live_ones_only_with_their_figures_and_quotas_by_tenant(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")], claim_slice=16 * MiB)
    for name in ("early", "late"):  # "early" is listed before "late", and retired
        ledger.run(partial(pools.create_pool, policy=pools.PoolPolicy(
            name=name, claim_slice=0, default_ttl_s=60, max_ttl_s=600), actor="test"))
    ledger.run(partial(pools.retire_pool, name="early", actor="test"))
    for tenant in ("team-z", "team-a"):
        ledger.run(partial(pools.set_pool_quota, name="default", tenant=tenant,
                           max_bytes=None, max_leases=9, actor="test"))
    grant(ledger, "emu0", 2 * MiB)
    listed = {p.name: p for p in ledger.read(lambda s, now: reads.pools(s, now))}
    assert set(listed) == {"default", "late"}
    shown = listed["default"]
    assert (shown.size, shown.claimed_bytes, shown.leased_bytes, shown.free_bytes,
            shown.available_bytes) == (64 * MiB, 16 * MiB, 2 * MiB, 48 * MiB, 62 * MiB)
    assert [q.tenant for q in shown.quotas] == ["team-a", "team-z"]
    assert {p.name for p in ledger.read(lambda s, now: reads.pools(s, now, retired=True))} == {
        "default", "early", "late"}


def test_a_hosts_memory_and_region_leases_are_its_own_that_hold_their_extent(
        make_ledger: LedgerFactory) -> None:
    """What a daemon looks for when it starts: its leases whose memory is an object of its own
    (emulated and system-ram devices: memfds), with kind and state, and its leases on regions
    carved per lease (each its own dax device); a scrubbing one still holds its extent. Another
    host's, a finished one and one on a device of another kind are not among them."""
    specs = [replace(emulated_spec(64 * MiB, "emu0"), shared=True),
             replace(emulated_spec(64 * MiB, "ram0"), kind=DeviceKind.SYSTEM_RAM, shared=True),
             replace(emulated_spec(64 * MiB, "region0"), kind=DeviceKind.DAX_REGION,
                     shared=True),
             replace(emulated_spec(64 * MiB, "dax1.0"), kind=DeviceKind.DEVDAX, shared=True)]
    a = make_ledger(specs, host_id="host-a", claim_slice=16 * MiB, scrub=True)
    b = make_ledger(specs, host_id="host-b", claim_slice=16 * MiB, scrub=True)
    mine = {name: grant(a, name, 2 * MiB) for name in ("emu0", "ram0", "region0", "dax1.0")}
    ended_ram, ended_region, finished = (grant(a, name, 2 * MiB)
                                         for name in ("ram0", "region0", "emu0"))
    for lease in (ended_ram, ended_region, finished):
        a.run(partial(leases.release, lease_id=lease.id, actor="t"))
    a.run(lambda tx: leases.finish_scrub(tx, finished.id))
    theirs = [grant(b, name, 2 * MiB) for name in ("emu0", "ram0", "region0")]

    assert a.read(lambda s, now: reads.memory_leases(s, now, host_id="host-a")) == {
        mine["emu0"].id: (DeviceKind.EMULATED, LeaseState.ACTIVE),
        mine["ram0"].id: (DeviceKind.SYSTEM_RAM, LeaseState.ACTIVE),
        ended_ram.id: (DeviceKind.SYSTEM_RAM, LeaseState.SCRUBBING)}
    regions = a.read(lambda s, now: reads.region_leases(s, now, host_id="host-a"))
    assert sorted((x.id, x.device, x.state) for x in regions) == sorted([
        (mine["region0"].id, "region0", LeaseState.ACTIVE),
        (ended_region.id, "region0", LeaseState.SCRUBBING)])
    assert set(a.read(lambda s, now: reads.memory_leases(s, now, host_id="host-b"))) == {
        theirs[0].id, theirs[1].id}


def test_events_after_an_id_are_those_recorded_since_it(ledger: Ledger) -> None:
    """The cursor a reader keeps (the API's after_id, the daemon's reclaim counter)."""
    for _ in range(3):
        ledger.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t")))
    every = ledger.read(lambda s, _now: reads.events(s, kind="lease.granted"))
    assert len(every) == 3
    oldest = min(e.id for e in every)
    since = ledger.read(lambda s, _now: reads.events(s, kind="lease.granted", after_id=oldest))
    assert {e.id for e in since} == {e.id for e in every} - {oldest}
