"""Which pool a device is in: the placement rules' matching (name, identity, either, NUMA node,
the serials of the CXL memdevs behind it), and an admin's assignment outliving the device's
absence while a device placed by the rules is placed again; on both databases."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from poold.inventory import DeviceSpec
from poold.ledger import membership, pools, reads, registry
from poold.ledger.tx import Tx
from poold.models import Pool
from poold.types import DeviceKind, MiB
from tests.conftest import LedgerFactory, emulated_spec

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
