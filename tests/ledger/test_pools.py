"""Pool administration in the ledger itself (beneath the API's schema, which bounds most input
first): a quota's bounds, inclusive at both ends, and each refusal saying them; a quota change
recorded with its host, pool, tenant and values; retirement refused while a present device or
this host's config holds the pool, naming them; on both databases."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from poold.errors import (
    Conflict,
    InvalidRequest,
    LeaseTooLarge,
    TenantNotAllowed,
    UnknownPool,
    UnknownTenant,
)
from poold.ledger import leases, membership, pools, reads, registry
from poold.ledger.ledger import Ledger
from poold.ledger.space import Catalog
from poold.ledger.tx import Tx
from poold.models import Pool
from poold.types import MAX_BYTES, MiB
from tests.conftest import HOST, LedgerFactory, emulated_spec

MAX_LEASES = 2**31 - 1


def kept_pool(ledger: Ledger) -> None:
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    ledger.run(partial(pools.create_pool, policy=policy, actor="test"))


def grant_in_kept(ledger: Ledger, tenant: str | None = None) -> None:
    ledger.run(partial(leases.grant, request=leases.GrantRequest(
        size=2 * MiB, actor="test", pool="kept", tenant=tenant)))


def set_quota(ledger: Ledger, tenant: str = "team-a", **limits: Any) -> tuple[Any, Any]:
    def run(tx: Tx) -> tuple[Any, Any]:
        quota = pools.set_pool_quota(tx, "default", tenant, actor="admin:a",
                                     **{"max_bytes": None, "max_leases": None, **limits})
        return quota.max_bytes, quota.max_leases
    return ledger.run(run)


@pytest.mark.parametrize("limits", [
    {"max_bytes": 0}, {"max_bytes": MAX_BYTES}, {"max_leases": 0},
    {"max_leases": MAX_LEASES}, {"max_bytes": 8 * MiB, "max_leases": 3},
])
def test_a_quota_at_its_bounds_is_taken(make_ledger: LedgerFactory,
                                        limits: dict[str, int]) -> None:
    ledger = make_ledger()
    assert set_quota(ledger, **limits) == (limits.get("max_bytes"), limits.get("max_leases"))


@pytest.mark.parametrize(("limits", "refusal"), [
    ({"max_bytes": -1}, f"max_bytes must be between 0 and {MAX_BYTES}, got -1"),
    ({"max_bytes": MAX_BYTES + 1},
     f"max_bytes must be between 0 and {MAX_BYTES}, got {MAX_BYTES + 1}"),
    ({"max_leases": -1}, f"max_leases must be between 0 and {MAX_LEASES}, got -1"),
    ({"max_leases": MAX_LEASES + 1},
     f"max_leases must be between 0 and {MAX_LEASES}, got {MAX_LEASES + 1}"),
    ({"max_leases": 2**32 - 1}, f"max_leases must be between 0 and {MAX_LEASES}, got "),
])
def test_a_quota_past_its_bounds_is_refused_saying_them(
        make_ledger: LedgerFactory, limits: dict[str, int], refusal: str) -> None:
    ledger = make_ledger()
    with pytest.raises(InvalidRequest) as refused:
        set_quota(ledger, **limits)
    assert str(refused.value).startswith(refusal)
    assert ledger.read(lambda s, now: reads.events(s, kind="pool.quota_changed")) == []


def test_a_bad_tenant_name_is_refused_as_one(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    with pytest.raises(InvalidRequest, match=r"^tenant name 'bad name': 1 to "):
        set_quota(ledger, tenant="bad name", max_leases=1)


def test_a_quota_change_is_recorded_with_its_host_pool_tenant_and_values(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_quota(ledger, max_bytes=8 * MiB, max_leases=3)
    assert set_quota(ledger, max_leases=5) == (None, 5)  # a second set replaces both
    second, first = ledger.read(lambda s, now: reads.events(s, kind="pool.quota_changed"))
    assert (first.actor, first.host) == ("admin:a", HOST)
    assert first.details == {"pool": "default", "tenant": "team-a", "max_bytes": 8 * MiB,
                             "max_leases": 3}
    assert second.details == {"pool": "default", "tenant": "team-a", "max_bytes": None,
                              "max_leases": 5}


def test_retiring_the_pool_this_hosts_config_places_devices_in_is_refused(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([])
    kept_pool(ledger)
    with pytest.raises(Conflict) as refused:
        ledger.run(partial(pools.retire_pool, name="kept", actor="a",
                           keep=frozenset({"kept"})))
    assert str(refused.value) == ("pool 'kept' is where this host's config places devices "
                                  "(default_pool or device_pools): change the config first")


def test_retiring_a_pool_is_refused_naming_five_of_its_present_devices(
        make_ledger: LedgerFactory) -> None:
    names = [f"emu{i}" for i in range(6)]
    ledger = make_ledger([emulated_spec(16 * MiB, n) for n in names])
    kept_pool(ledger)
    for d in ledger.read(reads.devices):
        ledger.run(partial(membership.move_device, device_id=d.id, name="kept", actor="a"))
    with pytest.raises(Conflict) as refused:
        ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    assert str(refused.value) == ("pool 'kept' holds 6 device(s) "
                                  "(emu0, emu1, emu2, emu3, emu4): move them out first")


def test_a_device_gone_missing_does_not_hold_its_pool(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([emulated_spec(16 * MiB, "emu0")])
    kept_pool(ledger)
    (emu0,) = ledger.read(reads.devices)
    ledger.run(partial(membership.move_device, device_id=emu0.id, name="kept", actor="a"))

    def vanish(tx: Tx) -> None:
        registry.reconcile_devices(tx, [], tx.session.query(Pool).filter_by(
            name="default").one())
    ledger.run(vanish)
    assert [d.state for d in ledger.read(reads.devices)] == ["missing"]
    ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    (event,) = ledger.read(lambda s, now: reads.events(s, kind="pool.retired"))
    assert (event.host, event.details["pool"]) == (HOST, "kept")


def test_an_edit_of_what_a_pool_has_no_setting_for_is_refused_naming_it(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    for changes, named in (({"name": "renamed"}, "name"),
                           ({"colour": "red", "max_ttl_s": 60}, "colour"),
                           ({"zeal": 1, "colour": "red"}, "colour, zeal")):
        with pytest.raises(InvalidRequest) as refused:
            ledger.run(partial(pools.edit_pool, name="default", changes=changes, actor="a"))
        assert str(refused.value) == f"cannot change {named} of a pool"
    assert ledger.read(lambda s, now: reads.events(s, kind="pool.changed")) == []


def test_an_edit_is_recorded_with_its_host_and_what_changed(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    kept_pool(ledger)
    ledger.run(partial(pools.edit_pool, name="kept", changes={"max_ttl_s": 300}, actor="a"))
    (event,) = ledger.read(lambda s, now: reads.events(s, kind="pool.changed"))
    assert (event.actor, event.host) == ("a", HOST)
    assert event.details == {"pool": "kept", "changed": {"max_ttl_s": [600, 300]}}


def test_an_unknown_pool_and_a_retired_one_are_refused_saying_which(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    kept_pool(ledger)
    ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    for name, refusal in (("nowhere", "no pool 'nowhere'"), ("kept", "pool 'kept' is retired")):
        with pytest.raises(UnknownPool) as refused:
            ledger.run(partial(pools.edit_pool, name=name, changes={"max_ttl_s": 300},
                               actor="a"))
        assert str(refused.value) == refusal
        with pytest.raises(UnknownPool) as refused:
            ledger.run(partial(pools.set_pool_quota, name=name, tenant="team-a",
                               max_bytes=None, max_leases=1, actor="a"))
        assert str(refused.value) == refusal
        with pytest.raises(UnknownPool) as refused:
            ledger.run(partial(leases.grant, request=leases.GrantRequest(
                size=2 * MiB, actor="a", pool=name)))
        assert str(refused.value) == refusal
    assert ledger.read(lambda s, now: reads.events(s, kind="pool.changed")) == []
    assert ledger.read(lambda s, now: reads.events(s, kind="pool.quota_changed")) == []


def test_creating_a_pool_that_exists_is_refused_saying_to_edit_it(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    kept_pool(ledger)
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=30, max_ttl_s=60)
    with pytest.raises(Conflict) as refused:
        ledger.run(partial(pools.create_pool, policy=policy, actor="a"))
    assert str(refused.value) == "pool 'kept' exists: edit it instead"
    shown = ledger.read(lambda s, now: reads.pool(s, now, "kept"))
    assert (shown.default_ttl_s, shown.max_ttl_s) == (60, 600)
    created = ledger.read(lambda s, now: reads.events(s, kind="pool.created"))
    assert [e.details["pool"] for e in created] == ["kept", "default"]


def test_a_creation_is_recorded_with_its_host_and_whole_policy_and_brings_a_retired_pool_back(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    kept_pool(ledger)
    ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    again = pools.PoolPolicy(name="kept", claim_slice=4 * MiB, default_ttl_s=30, max_ttl_s=90,
                             max_lease_size=8 * MiB, scrub_on_release=False, trusted=True,
                             description="back", allowed_tenants=["team-b", "team-a"])
    ledger.run(partial(pools.create_pool, policy=again, actor="admin:a"))
    shown = ledger.read(lambda s, now: reads.pool(s, now, "kept"))
    assert shown.retired_at is None
    assert pools.PoolPolicy.of(shown) == replace(again, allowed_tenants=["team-a", "team-b"])
    brought_back, first = [e for e in ledger.read(
        lambda s, now: reads.events(s, kind="pool.created")) if e.details["pool"] == "kept"]
    assert (brought_back.actor, brought_back.host) == ("admin:a", HOST)
    assert first.details == {"pool": "kept", "policy": {
        "claim_slice": 0, "default_ttl_s": 60, "max_ttl_s": 600, "max_lease_size": None,
        "scrub_on_release": True, "trusted": False, "description": "",
        "allowed_tenants": None}}
    assert brought_back.details == {"pool": "kept", "policy": {
        "claim_slice": 4 * MiB, "default_ttl_s": 30, "max_ttl_s": 90,
        "max_lease_size": 8 * MiB, "scrub_on_release": False, "trusted": True,
        "description": "back", "allowed_tenants": ["team-a", "team-b"]}}


def test_retiring_a_pool_placement_rules_name_is_refused_naming_five_of_them(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    kept_pool(ledger)
    wanted = [membership.Rule("name", f"dax{i}.*", "kept") for i in range(6)]
    ledger.run(partial(membership.set_rules, wanted=wanted, actor="a"))
    with pytest.raises(Conflict) as refused:
        ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    assert str(refused.value) == (
        "placement rules send devices to pool 'kept' (dax0.*, dax1.*, dax2.*, dax3.*, dax4.*): "
        "change the rules first")
    assert ledger.read(lambda s, now: reads.pool(s, now, "kept")).retired_at is None
    assert ledger.read(lambda s, now: reads.events(s, kind="pool.retired")) == []


def test_a_cleared_quota_is_recorded_with_its_host_pool_and_tenant(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_quota(ledger, max_leases=3)
    set_quota(ledger, tenant="team-b", max_leases=2)
    ledger.run(partial(pools.clear_pool_quota, name="default", tenant="team-a",
                       actor="admin:a"))
    cleared = ledger.read(lambda s, now: reads.events(s, kind="pool.quota_changed"))[0]
    assert (cleared.actor, cleared.host) == ("admin:a", HOST)
    assert cleared.details == {"pool": "default", "tenant": "team-a", "cleared": True}
    quotas = ledger.read(lambda s, now: reads.pool(s, now, "default")).quotas
    assert [(q.tenant, q.max_leases) for q in quotas] == [("team-b", 2)]


def test_clearing_a_quota_that_is_not_there_is_refused_saying_which(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_quota(ledger, tenant="team-b", max_leases=2)
    with pytest.raises(UnknownTenant) as refused:
        ledger.run(partial(pools.clear_pool_quota, name="default", tenant="team-a",
                           actor="a"))
    assert str(refused.value) == "tenant 'team-a' has no quota in pool 'default'"
    assert len(ledger.read(lambda s, now: reads.events(s, kind="pool.quota_changed"))) == 1


def test_a_hosts_file_saying_otherwise_than_the_ledger_is_told_setting_by_setting(
        ledger: Ledger) -> None:
    """The ledger's policy wins; what the file says otherwise comes back named by pool and
    setting with both values, and a retired pool the file still names says so too."""
    kept_pool(ledger)
    same = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    assert ledger.run(partial(pools.seed, policy=same))[1] == []
    other = replace(same, max_ttl_s=900, scrub_on_release=not same.scrub_on_release)
    pool, differ = ledger.run(partial(pools.seed, policy=other))
    assert pool.max_ttl_s == 600
    assert differ == [
        pools.Disagreement("kept", "max_ttl_s", 900, 600),
        pools.Disagreement("kept", "scrub_on_release", other.scrub_on_release,
                           same.scrub_on_release)]
    ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    assert ledger.run(partial(pools.seed, policy=same))[1] == [
        pools.Disagreement("kept", "retired", False, True)]


def test_a_pool_without_devices_refuses_a_grant_by_name(ledger: Ledger) -> None:
    """A pool an admin made but gave no device yet: a grant there is refused as too large for
    every device it has (none), not an internal error."""
    kept_pool(ledger)
    with pytest.raises(LeaseTooLarge) as refused:
        grant_in_kept(ledger)
    assert str(refused.value) == f"no online device in pool 'kept' can hold {2 * MiB} bytes"


def test_a_pools_largest_lease_is_granted_and_a_larger_one_refused(ledger: Ledger) -> None:
    """max_lease_size bounds the length a grant takes (its size rounded up to the device's
    2 MiB alignment), inclusive."""
    ledger.run(partial(pools.edit_pool, name="default", changes={"max_lease_size": 8 * MiB},
                       actor="admin:a"))

    def grant(size: int) -> int:
        return ledger.run(partial(leases.grant, request=leases.GrantRequest(
            size=size, actor="test"))).length
    assert grant(8 * MiB) == 8 * MiB
    assert grant(6 * MiB + 1) == 8 * MiB
    with pytest.raises(LeaseTooLarge) as refused:
        grant(8 * MiB + 1)
    assert str(refused.value) == f"no online device in pool 'default' can hold {8 * MiB + 1} bytes"


def test_a_tenant_the_pool_does_not_admit_is_refused_by_name(ledger: Ledger) -> None:
    policy = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600,
                              allowed_tenants=["team-a"])
    ledger.run(partial(pools.create_pool, policy=policy, actor="test"))
    with pytest.raises(TenantNotAllowed) as refused:
        grant_in_kept(ledger, tenant="team-b")
    assert str(refused.value) == "tenant 'team-b' may not lease from pool 'kept'"


def test_a_retired_pool_refuses_a_grant_saying_so(ledger: Ledger) -> None:
    kept_pool(ledger)
    ledger.run(partial(pools.retire_pool, name="kept", actor="a"))
    with pytest.raises(UnknownPool) as refused:
        grant_in_kept(ledger)
    assert str(refused.value) == "pool 'kept' is retired"


def test_ttls_up_to_the_most_a_grant_may_ask_are_a_policy(ledger: Ledger) -> None:
    """The longest TTL a pool may allow is the longest a grant may ask, no less."""
    longest = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60,
                               max_ttl_s=pools.MAX_TTL_S)
    assert longest.checked() == longest
    with pytest.raises(InvalidRequest):
        replace(longest, max_ttl_s=pools.MAX_TTL_S + 1).checked()


def test_events_are_read_up_to_the_limit_asked(ledger: Ledger) -> None:
    for name in ("one", "two", "three"):
        ledger.run(partial(pools.create_pool, policy=pools.PoolPolicy(
            name=name, claim_slice=0, default_ttl_s=60, max_ttl_s=600), actor="a"))
    created = ledger.read(lambda s, _: reads.events(s, kind="pool.created", limit=2))
    assert [e.details["pool"] for e in created] == ["three", "two"]  # newest first


def test_a_bad_policy_is_refused_saying_which_setting_and_why() -> None:
    good = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    for changes, said in (
            ({"name": "-kept"}, f"pool name '-kept': 1 to {pools.NAME_MAX} letters, digits, "
             "'.', '_' or '-', starting with a letter or digit"),
            ({"default_ttl_s": 601}, f"need 1 <= default_ttl_s (601) <= max_ttl_s (600) <= "
             f"{pools.MAX_TTL_S}"),
            ({"claim_slice": -1}, f"claim_slice must be between 0 (whole devices) and "
             f"{MAX_BYTES} bytes, got -1"),
            ({"max_lease_size": 0}, f"max_lease_size must be between 1 and {MAX_BYTES} bytes "
             "(or null: no limit), got 0"),
            ({"description": "a\x07"}, f"description: at most {pools.DESCRIPTION_MAX} "
             "characters, no control characters"),
            ({"allowed_tenants": ["t"] * (pools.ALLOWED_TENANTS_MAX + 1)},
             f"allowed_tenants: at most {pools.ALLOWED_TENANTS_MAX} names")):
        with pytest.raises(InvalidRequest) as refused:
            replace(good, **changes).checked()  # type: ignore[arg-type]
        assert str(refused.value) == said


def test_a_pool_made_after_the_writers_catalog_was_read_is_found(ledger: Ledger) -> None:
    """On PostgreSQL another host's new pool can commit after this writer read its catalog for
    the transaction; a grant naming it reads the catalog again rather than refuse."""
    kept_pool(ledger)

    def named_with_a_stale_catalog(tx: Tx) -> str:
        tx.snapshot = Catalog([], [], version=tx.catalog.version)  # read before any pool
        return leases.pool_named(tx, "kept").name
    assert ledger.run(named_with_a_stale_catalog) == "kept"


def test_a_policy_at_every_bound_is_taken() -> None:
    """Each bound of a policy is inclusive: the least and the most of every setting pass."""
    good = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    for changes in ({"default_ttl_s": 1}, {"default_ttl_s": 600},
                    {"claim_slice": MAX_BYTES},
                    {"max_lease_size": 1}, {"max_lease_size": MAX_BYTES},
                    {"description": "d" * pools.DESCRIPTION_MAX},
                    {"name": "k"}, {"name": "k" * pools.NAME_MAX}):
        policy = replace(good, **changes)  # type: ignore[arg-type]
        assert policy.checked() == policy, changes
    most = [f"t{n}" for n in range(pools.ALLOWED_TENANTS_MAX)]
    assert replace(good, allowed_tenants=most).checked().allowed_tenants == sorted(most)


def test_a_policy_just_past_its_bounds_is_refused() -> None:
    good = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    for changes in ({"default_ttl_s": 0}, {"claim_slice": MAX_BYTES + 1},
                    {"max_lease_size": MAX_BYTES + 1},
                    {"description": "d" * (pools.DESCRIPTION_MAX + 1)},
                    {"name": ""}, {"name": "k" * (pools.NAME_MAX + 1)}):
        with pytest.raises(InvalidRequest):
            replace(good, **changes).checked()  # type: ignore[arg-type]


def test_a_bad_name_is_quoted_by_its_first_64_characters() -> None:
    good = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    long = "a" * 64 + "b" * (pools.NAME_MAX + 1)
    with pytest.raises(InvalidRequest, match=rf"^pool name '{'a' * 64}': 1 to "):
        replace(good, name=long).checked()


def test_a_policy_admitting_a_bad_tenant_name_is_refused_naming_it() -> None:
    good = pools.PoolPolicy(name="kept", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    with pytest.raises(InvalidRequest) as refused:
        replace(good, allowed_tenants=["fine", "bad name"]).checked()
    assert str(refused.value) == (f"tenant name 'bad name': 1 to {pools.NAME_MAX} letters, "
                                  "digits, '.', '_' or '-', starting with a letter or digit")


def test_a_pool_first_named_by_a_hosts_file_is_on_record_as_seeded_from_it(
        ledger: Ledger) -> None:
    """Who made a pool: the daemon, from its config file (not an admin through the API)."""
    seeded = pools.PoolPolicy(name="from-file", claim_slice=0, default_ttl_s=60, max_ttl_s=600)
    ledger.run(partial(pools.seed, policy=seeded))
    (created,) = [e for e in ledger.read(lambda s, _: reads.events(s, kind="pool.created"))
                  if e.details.get("pool") == "from-file"]
    assert (created.actor, created.host, created.details) == (
        "daemon", HOST, {"pool": "from-file", "seeded": "config"})
