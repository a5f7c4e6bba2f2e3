"""Tenants in the ledger: a quota change is recorded with its host, tenant and both values and
answered with what the tenant holds now; tenants are listed by name with their quotas and live
leases; an unknown tenant is refused by name; tokens are listed oldest first (ties by id); on
both databases."""

from __future__ import annotations

from functools import partial

import pytest

from poold import errors
from poold.errors import UnknownTenant
from poold.ledger import leases, pools, reads, tenants
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.tenants import TenantView
from poold.types import MiB, Role
from tests.conftest import HOST, LedgerFactory


def set_tenant(ledger: Ledger, name: str, max_bytes: int | None,
               max_leases: int | None) -> TenantView:
    return ledger.run(partial(tenants.set_tenant, name=name, max_bytes=max_bytes,
                              max_leases=max_leases, actor="admin:a"))


def grant(ledger: Ledger, tenant: str, size: int) -> None:
    ledger.run(partial(leases.grant, request=GrantRequest(size=size, actor="t", ttl_s=600,
                                                          tenant=tenant)))


def test_a_quota_change_is_recorded_with_its_host_tenant_and_values(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_tenant(ledger, "team-a", 64 * MiB, 4)
    set_tenant(ledger, "team-a", None, 7)  # a second one replaces both
    second, first = ledger.read(lambda s, now: reads.events(s, kind="tenant.changed"))
    assert (first.actor, first.host) == ("admin:a", HOST)
    assert first.details == {"tenant": "team-a", "max_bytes": 64 * MiB, "max_leases": 4}
    assert (second.actor, second.host) == ("admin:a", HOST)
    assert second.details == {"tenant": "team-a", "max_bytes": None, "max_leases": 7}


def test_a_quota_change_answers_with_what_the_tenant_holds_now(make_ledger: LedgerFactory
                                                               ) -> None:
    ledger = make_ledger()
    set_tenant(ledger, "team-a", None, None)
    grant(ledger, "team-a", 2 * MiB)
    grant(ledger, "team-a", 4 * MiB)
    grant(ledger, "team-b", 2 * MiB)
    # Lowered below what it holds: its leases stay, and the answer says so.
    assert set_tenant(ledger, "team-a", 4 * MiB, 1) == TenantView(
        name="team-a", max_bytes=4 * MiB, max_leases=1, leased_bytes=6 * MiB, live_leases=2)


def test_tenants_are_listed_by_name_with_their_quotas_and_live_leases(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_tenant(ledger, "zeta", 32 * MiB, None)
    set_tenant(ledger, "alpha", None, 3)
    set_tenant(ledger, "mid", 16 * MiB, 2)
    grant(ledger, "zeta", 4 * MiB)
    grant(ledger, "alpha", 2 * MiB)
    grant(ledger, "alpha", 2 * MiB)
    listed = ledger.read(tenants.tenants)
    assert listed == [
        TenantView(name="alpha", max_bytes=None, max_leases=3, leased_bytes=4 * MiB,
                   live_leases=2),
        TenantView(name="mid", max_bytes=16 * MiB, max_leases=2, leased_bytes=0,
                   live_leases=0),
        TenantView(name="zeta", max_bytes=32 * MiB, max_leases=None, leased_bytes=4 * MiB,
                   live_leases=1),
    ]
    assert ledger.read(lambda s, now: tenants.tenant(s, "zeta", now)) == listed[2]


def test_an_unknown_tenant_is_refused_by_name(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    set_tenant(ledger, "team-a", None, None)
    with pytest.raises(UnknownTenant) as refused:
        ledger.read(lambda s, now: tenants.tenant(s, "team-z", now))
    assert str(refused.value) == "no tenant 'team-z'"


def test_tokens_are_listed_oldest_first_and_those_made_together_by_id(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    ledger = make_ledger()

    def create() -> str:
        view, _bearer = ledger.run(partial(tenants.create_token, name="t", role=Role.ADMIN,
                                           tenant=None, actor="admin:a"))
        return view.id

    # Ids are random: make tokens a second apart until one sorts before an earlier one, then
    # tokens in one instant until one sorts before one made with it.
    apart = [create()]
    while apart == sorted(apart):
        clock.advance(1)
        apart.append(create())
    clock.advance(1)
    together = [create()]
    while together == sorted(together):
        together.append(create())
    assert [t.id for t in ledger.read(tenants.tokens)] == [*apart, *sorted(together)]


def refused(ledger: Ledger, tenant: str, size: int) -> str:
    with pytest.raises(errors.QuotaExceeded) as exc:
        grant(ledger, tenant, size)
    return str(exc.value)


@pytest.mark.parametrize("where", ["tenant", "pool"])
def test_a_quota_is_reached_exactly_and_refused_one_past_it(make_ledger: LedgerFactory,
                                                             where: str) -> None:
    """Leases up to the limit are granted, the one past it is refused saying what is held; a
    release makes room again. The same for a tenant's global quota and its quota in a pool."""
    ledger = make_ledger()

    def limit(name: str, max_bytes: int | None, max_leases: int | None) -> None:
        if where == "tenant":
            set_tenant(ledger, name, max_bytes, max_leases)
        else:
            ledger.run(partial(pools.set_pool_quota, name="default", tenant=name,
                               max_bytes=max_bytes, max_leases=max_leases, actor="admin:a"))

    which = "its quota" if where == "tenant" else "its quota in pool 'default'"
    limit("counted", None, 2)
    grant(ledger, "counted", 2 * MiB)
    grant(ledger, "counted", 2 * MiB)
    assert refused(ledger, "counted", 2 * MiB) == \
        f"tenant 'counted' holds 2 leases; {which} is 2"
    limit("sized", 6 * MiB, None)
    grant(ledger, "sized", 2 * MiB)
    grant(ledger, "sized", 4 * MiB)  # exactly the quota
    assert refused(ledger, "sized", 2 * MiB) == \
        f"tenant 'sized' holds {6 * MiB} bytes; {2 * MiB} more would pass {which} of {6 * MiB}"
    held = ledger.read(lambda s, now: reads.leases(s, now, tenant="sized"))
    ledger.run(partial(leases.release, lease_id=held[0].id, actor="t"))
    grant(ledger, "sized", 2 * MiB)


def test_a_tenants_first_lease_creates_it_with_the_default_quotas(
        make_ledger: LedgerFactory) -> None:
    """A tenant nobody set up gets the daemon's default quotas with its first lease, on record
    (who, where, what); they hold from that lease on."""
    ledger = make_ledger(tenant_defaults=(4 * MiB, 3))
    grant(ledger, "newcomer", 2 * MiB)
    assert ledger.read(lambda s, now: tenants.tenant(s, "newcomer", now)) == TenantView(
        name="newcomer", max_bytes=4 * MiB, max_leases=3, leased_bytes=2 * MiB, live_leases=1)
    (made,) = ledger.read(lambda s, now: reads.events(s, kind="tenant.changed"))
    assert (made.actor, made.host) == ("daemon", HOST)
    assert made.details == {"tenant": "newcomer", "max_bytes": 4 * MiB, "max_leases": 3,
                            "reason": "first lease"}
    assert refused(ledger, "newcomer", 4 * MiB).endswith(f"of {4 * MiB}")
    # They hold for the first lease too: one past them is refused, and leaves no tenant.
    assert refused(ledger, "greedy", 8 * MiB) == (
        f"tenant 'greedy' holds 0 bytes; {8 * MiB} more would pass its quota of {4 * MiB}")
    with pytest.raises(UnknownTenant):
        ledger.read(lambda s, now: tenants.tenant(s, "greedy", now))


def test_a_grant_its_quota_refuses_leaves_its_extent_to_the_next(
        make_ledger: LedgerFactory) -> None:
    """The extent a grant had placed before its quota refused it is free again at once: the
    next grant (another tenant's) takes it, not the one after it."""
    ledger = make_ledger()
    set_tenant(ledger, "capped", 0, None)
    assert refused(ledger, "capped", 2 * MiB) == (
        f"tenant 'capped' holds 0 bytes; {2 * MiB} more would pass its quota of 0")
    lease = ledger.run(partial(leases.grant, request=GrantRequest(size=2 * MiB, actor="t",
                                                                  tenant="open")))
    assert lease.offset == 0
