"""Which pool a device is in: the placement rules' matching (name, identity, either, NUMA node,
the serials of the CXL memdevs behind it), and an admin's assignment outliving the device's
absence while a device placed by the rules is placed again; on both databases."""

from __future__ import annotations

from dataclasses import asdict, replace
from functools import partial

import pytest
from sqlalchemy import select

from poold.errors import DeviceBusy, InvalidRequest, UnknownDevice
from poold.inventory import DeviceSpec
from poold.ledger import leases, membership, pools, reads, registry
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.ledger.views import DeviceView
from poold.models import Pool, PoolRule
from poold.types import DeviceKind, MiB
from tests.conftest import HOST, LedgerFactory, emulated_spec

CXL = DeviceSpec(uid="cxl:0x4a3b/0x0,0x4a3c/0x10000000+0x1000", kind=DeviceKind.DEVDAX,
                 devname="dax3.0", chardev="/dev/dax3.0", size=MiB, align=MiB, numa_node=2)


@pytest.mark.parametrize(("field", "pattern", "matches"), [
    ("name", "dax3.*", True), ("name", "dax1.*", False),
    ("identity", "cxl:0x4a3b/*", True), ("identity", "dax3.0", False),
    ("device", "dax3.*", True), ("device", "cxl:*", True), ("device", "emu*", False),
    ("numa_node", "2", True), ("numa_node", "[01]", False),
    ("serial", "0x4a3c", True), ("serial", "0x4a*", True), ("serial", "0x10000000", False),
])
def test_a_rule_matches_its_field(field: str, pattern: str, matches: bool) -> None:
    assert membership.Rule(field, pattern, "p").matches(CXL) is matches


def test_only_cxl_identities_have_serials() -> None:
    assert membership.serials(CXL.uid) == ["0x4a3b", "0x4a3c"]
    assert membership.serials("hmem:/sys/devices/platform/hmem.0@0x1000") == []
    assert not membership.Rule("numa_node", "*", "p").matches(replace(CXL, numa_node=None))


def test_an_assigned_device_keeps_its_pool_when_it_comes_back(make_ledger: LedgerFactory
                                                               ) -> None:
    emu0, emu1 = emulated_spec(64 * MiB, "emu0"), emulated_spec(64 * MiB, "emu1")
    ledger = make_ledger([emu0, emu1])
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    ledger.run(partial(pools.create_pool, policy=policy, actor="test"))
    ids = {d.devname: d.id for d in ledger.read(reads.devices)}
    ledger.run(partial(membership.move_device, device_id=ids["emu0"], name="kept",
                       actor="test"))

    def reconcile(specs: list[DeviceSpec], place_in: str) -> None:
        def run(tx: Tx) -> None:
            target = tx.session.query(Pool).filter_by(name=place_in).one()
            registry.reconcile_devices(tx, specs, target)
        ledger.run(run)

    reconcile([], "default")  # both gone
    assert {d.state for d in ledger.read(reads.devices)} == {"missing"}
    reconcile([emu0, emu1], "default")  # back: the rules (here "default") place emu1 only
    shown = {d.devname: d for d in ledger.read(reads.devices)}
    assert (shown["emu0"].pool, shown["emu0"].pool_assigned) == ("kept", True)
    assert (shown["emu1"].pool, shown["emu1"].pool_assigned) == ("default", False)


def kept_pool(ledger: Ledger) -> None:
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    ledger.run(partial(pools.create_pool, policy=policy, actor="test"))


def move(ledger: Ledger, device_id: int, name: str = "kept") -> None:
    ledger.run(partial(membership.move_device, device_id=device_id, name=name, actor="admin:a"))


def device_row(ledger: Ledger, devname: str) -> DeviceView:
    return next(d for d in ledger.read(reads.devices) if d.devname == devname)


def test_a_move_is_recorded_with_its_host_device_and_both_pools(make_ledger: LedgerFactory
                                                                 ) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    kept_pool(ledger)
    emu0 = device_row(ledger, "emu0")
    move(ledger, emu0.id)
    (event,) = [e for e in ledger.read(lambda s, now: reads.events(s, kind="device.changed"))]
    assert (event.actor, event.host, event.device_id) == ("admin:a", HOST, emu0.id)
    assert event.details["devname"] == "emu0"
    assert event.details["changed"] == {"pool": ["default", "kept"]}
    assert (device_row(ledger, "emu0").pool, device_row(ledger, "emu0").pool_assigned) == (
        "kept", True)


def test_moving_a_device_into_its_own_pool_makes_the_assignment_explicit(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    emu0 = device_row(ledger, "emu0")
    assert (emu0.pool, emu0.pool_assigned) == ("default", False)  # placed by the rules
    move(ledger, emu0.id, "default")
    assert (device_row(ledger, "emu0").pool, device_row(ledger, "emu0").pool_assigned) == (
        "default", True)
    assert ledger.read(lambda s, now: reads.events(s, kind="device.changed")) == []


def test_an_unknown_device_is_refused_by_its_id(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    kept_pool(ledger)
    with pytest.raises(UnknownDevice, match=r"^no device 9999$"):
        move(ledger, 9999)


def test_a_device_holding_leases_is_refused_naming_three_of_them(make_ledger: LedgerFactory
                                                                   ) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0")])
    kept_pool(ledger)
    held = [ledger.run(partial(leases.grant, request=GrantRequest(
        size=2 * MiB, actor="test", ttl_s=600, device="emu0"))).id for _ in range(4)]
    with pytest.raises(DeviceBusy) as refused:
        move(ledger, device_row(ledger, "emu0").id)
    message = str(refused.value)
    named = message.split("lease(s) (", 1)[1].split(")", 1)[0].split(", ")
    assert message.startswith("emu0 holds 4 lease(s) (")
    assert message.endswith("): drain it and let them end, or revoke them, then move it")
    assert len(named) == 3 and set(named) <= set(held)
    assert device_row(ledger, "emu0").pool == "default"


def test_leases_on_another_device_do_not_hold_a_move(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), emulated_spec(64 * MiB, "emu1")])
    kept_pool(ledger)
    ledger.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="test",
                                                          ttl_s=600, device="emu1")))
    move(ledger, device_row(ledger, "emu0").id)
    assert (device_row(ledger, "emu0").pool, device_row(ledger, "emu1").pool) == (
        "kept", "default")


def test_another_hosts_claim_refuses_a_move_naming_that_host(make_ledger: LedgerFactory
                                                              ) -> None:
    shared = replace(emulated_spec(64 * MiB, name="shared0"), shared=True)
    here = make_ledger([shared, emulated_spec(64 * MiB, "emu0")], host_id="host-a",
                       claim_slice=16 * MiB)
    there = make_ledger([shared], host_id="host-b", claim_slice=16 * MiB)
    kept_pool(here)
    lease = there.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                                ttl_s=600)))
    there.run(partial(leases.release, lease_id=lease.id, actor="t"))  # its claim stays, idle
    with pytest.raises(DeviceBusy, match=r"^shared0: host\(s\) host-b hold claims on it; "):
        move(here, device_row(here, "shared0").id)
    move(here, device_row(here, "emu0").id)  # a claim on another device is no refusal
    move(there, device_row(there, "shared0").id)  # its own claim does not refuse its move
    assert device_row(here, "shared0").pool == "kept"


def set_rules(ledger: Ledger, wanted: list[membership.Rule]) -> list[membership.Rule]:
    return ledger.run(partial(membership.set_rules, wanted=wanted, actor="admin:a"))


def test_rules_at_their_bounds_are_taken(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    most = [membership.Rule("name", f"emu{i}", "default") for i in range(membership.RULES_MAX)]
    assert len(set_rules(ledger, most)) == membership.RULES_MAX
    longest = membership.Rule("identity", "x" * 256, "default")
    assert set_rules(ledger, [longest]) == [longest]


@pytest.mark.parametrize(("wanted", "refusal"), [
    ([membership.Rule("name", "emu*", "default")] * (membership.RULES_MAX + 1),
     f"at most {membership.RULES_MAX} rules"),
    ([membership.Rule("colour", "red", "default")],
     "rule field 'colour': one of device, name, identity, numa_node, serial"),
    ([membership.Rule("name", "", "default")],
     "rule pattern '': 1 to 256 characters, no control characters"),
    ([membership.Rule("name", "y" * 257, "default")],
     f"rule pattern {'y' * 64!r}: 1 to 256 characters, no control characters"),
    ([membership.Rule("name", "emu\x00", "default")],
     "rule pattern 'emu\\x00': 1 to 256 characters, no control characters"),
])
def test_a_bad_rule_is_refused_saying_why_and_changes_nothing(
        make_ledger: LedgerFactory, wanted: list[membership.Rule], refusal: str) -> None:
    ledger = make_ledger()
    before = ledger.read(lambda s, now: membership.rules(s))
    with pytest.raises(InvalidRequest) as refused:
        set_rules(ledger, wanted)
    assert str(refused.value) == refusal
    assert ledger.read(lambda s, now: membership.rules(s)) == before


def test_a_rules_change_is_recorded_with_its_host_and_both_lists(make_ledger: LedgerFactory
                                                                 ) -> None:
    ledger = make_ledger()
    first = [membership.Rule("name", "emu*", "default")]
    set_rules(ledger, first)
    second = [membership.Rule("serial", "0x4a*", "default"), *first]
    set_rules(ledger, second)
    assert set_rules(ledger, second) == second  # the same list again: no change, no record
    changes = ledger.read(lambda s, now: reads.events(s, kind="pool.rules_changed"))
    latest = changes[0]
    assert (latest.actor, latest.host) == ("admin:a", HOST)
    assert latest.details["rules"] == [asdict(r) for r in second]
    assert latest.details["was"] == [asdict(r) for r in first]
    assert [e.details["rules"] for e in changes].count([asdict(r) for r in second]) == 1


def test_other_hosts_claims_refuse_a_move_naming_them_all_and_what_to_do(
        make_ledger: LedgerFactory) -> None:
    shared = replace(emulated_spec(64 * MiB, name="shared0"), shared=True)
    here = make_ledger([shared], host_id="host-a", claim_slice=16 * MiB)
    kept_pool(here)
    for host in ("host-c", "host-b"):
        there = make_ledger([shared], host_id=host, claim_slice=16 * MiB)
        lease = there.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                                    ttl_s=600)))
        there.run(partial(leases.release, lease_id=lease.id, actor="t"))  # claim idle, kept
    with pytest.raises(DeviceBusy) as refused:
        move(here, device_row(here, "shared0").id)
    assert str(refused.value) == (
        "shared0: host(s) host-b, host-c hold claims on it; drain it and let their idle claims "
        "go back, then move it")
    assert device_row(here, "shared0").pool == "default"
    assert here.read(lambda s, now: reads.events(s, kind="device.changed")) == []


def test_a_configs_rules_are_seeded_once_and_an_admins_edit_is_never_undone(
        make_ledger: LedgerFactory) -> None:
    """The first daemon to start with rules in its config writes them to the ledger; one that
    starts with none leaves seeding to a later one; once seeded, no daemon's config (a restart,
    another host's) undoes what an admin made of them, even none."""
    ledger = make_ledger()
    config = [membership.Rule("name", "emu*", "default")]
    assert ledger.run(lambda tx: membership.seed_rules(tx, [])) == []
    assert ledger.run(lambda tx: membership.seed_rules(tx, config)) == config
    assert set_rules(ledger, []) == []
    other = [membership.Rule("numa_node", "0", "default")]
    for again in (config, other):
        assert ledger.run(lambda tx, c=again: membership.seed_rules(tx, c)) == []
    (seeded,) = [e for e in ledger.read(lambda s, now: reads.events(s, kind="pool.rules_changed"))
                 if e.actor == "daemon"]
    assert seeded.details["rules"] == [asdict(r) for r in config]


def test_rules_are_read_in_their_order_however_the_rows_lie(make_ledger: LedgerFactory) -> None:
    """First match wins, so the order is the rules' positions, not the order the database
    happens to return rows in (here written last position first)."""
    ledger = make_ledger()
    first, second = (membership.Rule("name", "emu*", "default"),
                     membership.Rule("identity", "test:*", "default"))

    def stored_backwards(tx: Tx) -> None:
        pool_id = tx.session.scalars(select(Pool.id).where(Pool.name == "default")).one()
        for position, rule in ((1, second), (0, first)):
            tx.session.add(PoolRule(position=position, field=rule.field, pattern=rule.pattern,
                                    pool_id=pool_id))
            tx.session.flush()

    ledger.run(stored_backwards)
    assert ledger.read(lambda s, now: membership.rules(s)) == [first, second]
