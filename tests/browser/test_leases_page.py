"""The leases page's filters (state, pool, host, tenant) and sorting by expiry and by age, on
leases of two hosts, two pools, three tenants and two states: the rows shown are exactly the
API's leases that match, in the order asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from poold.types import MiB
from tests.browser.conftest import HOST_ID, HOST_NAME, Cluster, logged_in
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

Lease = dict[str, Any]


@pytest.fixture(scope="module")
def leases(cluster: Cluster) -> Iterator[list[str]]:
    """Leases of every kind the filters tell apart (ids)."""
    served = cluster.served
    ids = [
        served.grant(2 * MiB, tenant="team-a", ttl_s=600)["id"],
        served.grant(4 * MiB, tenant="team-b", ttl_s=300, device="dax0.0", pool="cxl")["id"],
        cluster.peer.grant(6 * MiB, tenant="team-a", ttl_s=900).id,
        cluster.peer.grant(2 * MiB, tenant="Team-C", ttl_s=120).id,
    ]
    revoked = served.grant(2 * MiB, tenant="team-c", ttl_s=1200)["id"]
    assert served.api("POST", f"/v1/leases/{revoked}/revoke").status_code == 200
    yield [*ids, revoked]


@pytest.fixture
def leases_page(page: Page, cluster: Cluster, leases: list[str]) -> Page:
    logged_in(page, cluster.served)
    page.goto(f"{cluster.served.url}/ui/#/leases")
    for lease_id in leases:  # every one has arrived, the revoked one as revoked
        page.wait_for_selector(f'tr[data-lease="{lease_id}"]', timeout=ui_wait_ms())
    page.wait_for_selector(f'tr[data-lease="{leases[-1]}"][data-state="revoked"]',
                           timeout=ui_wait_ms())
    return page


def shown(page: Page) -> list[str]:
    ids: list[str] = page.eval_on_selector_all("#leases tbody tr",
                                               "rows => rows.map((r) => r.dataset.lease)")
    return ids


def api_leases(cluster: Cluster) -> list[Lease]:
    found: list[Lease] = cluster.served.api("GET", "/v1/leases?limit=1000").json()
    return found


def expect(page: Page, cluster: Cluster, keep: Callable[[Lease], bool]) -> set[str]:
    """The rows shown are exactly the API's leases that `keep` keeps (and the count says so)."""
    everything = api_leases(cluster)
    wanted = {lease["id"] for lease in everything if keep(lease)}
    page.wait_for_function(
        "(n) => document.querySelectorAll('#leases tbody tr').length === n"
        " || (n === 0 && document.querySelector('#leases .empty'))", arg=len(wanted))
    assert set(shown(page)) == wanted
    count = page.inner_text("#lease-count")
    assert count.startswith(f"{len(wanted)} of {len(everything)} lease"), count
    return wanted


def test_filter_by_state(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    leases_page.select_option("#filter-state", "revoked")
    assert expect(leases_page, cluster, lambda x: x["state"] == "revoked") == {leases[-1]}
    leases_page.select_option("#filter-state", "active")
    active = expect(leases_page, cluster, lambda x: x["state"] == "active")
    assert set(leases[:4]) <= active and leases[-1] not in active
    leases_page.select_option("#filter-state", "")
    expect(leases_page, cluster, lambda _x: True)


def test_filter_by_pool(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    leases_page.select_option("#filter-pool", "cxl")
    assert expect(leases_page, cluster, lambda x: x["pool"] == "cxl") == {leases[1]}
    leases_page.select_option("#filter-pool", "default")
    assert leases[1] not in expect(leases_page, cluster, lambda x: x["pool"] == "default")
    leases_page.select_option("#filter-pool", "")


def test_filter_by_host(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    hosts = leases_page.eval_on_selector_all("#filter-host option",
                                             "options => options.map((o) => o.value)")
    assert hosts == ["", HOST_ID, "host-b"]  # ids, shown by name
    names = leases_page.eval_on_selector_all("#filter-host option",
                                             "options => options.map((o) => o.textContent)")
    assert names == ["all", HOST_NAME, "host-b"]
    leases_page.select_option("#filter-host", "host-b")
    assert expect(leases_page, cluster, lambda x: x["host"] == "host-b") == set(leases[2:4])
    leases_page.select_option("#filter-host", label=HOST_NAME)
    mine = expect(leases_page, cluster, lambda x: x["host"] == HOST_ID)
    assert {leases[0], leases[1], leases[4]} <= mine
    leases_page.select_option("#filter-host", "")


def test_filter_by_tenant(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    leases_page.fill("#filter-tenant", "team-a")
    assert expect(leases_page, cluster,
                  lambda x: x["tenant"] == "team-a") == {leases[0], leases[2]}
    leases_page.fill("#filter-tenant", "TEAM-C")  # a part of the name, in any case
    assert expect(leases_page, cluster, lambda x: "team-c" in (x["tenant"] or "").lower()
                  ) == {leases[3], leases[4]}
    leases_page.select_option("#filter-host", "host-b")  # filters combine
    assert expect(leases_page, cluster, lambda x: x["id"] == leases[3]) == {leases[3]}
    leases_page.fill("#filter-tenant", "nobody")
    expect(leases_page, cluster, lambda _x: False)
    assert "No lease matches these filters" in leases_page.inner_text("#leases")
    leases_page.fill("#filter-tenant", "")
    leases_page.select_option("#filter-host", "")


def order_of(cluster: Cluster, ids: list[str], key: str) -> list[datetime]:
    by_id = {lease["id"]: lease for lease in api_leases(cluster)}
    return [datetime.fromisoformat(by_id[i][key]) for i in ids]


def test_sort_by_expiry(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    leases_page.click('th[data-key="expires_at"]')
    assert "sorted-asc" in (leases_page.get_attribute('th[data-key="expires_at"]', "class") or "")
    ascending = shown(leases_page)
    assert set(leases) <= set(ascending)
    times = order_of(cluster, ascending, "expires_at")
    assert times == sorted(times)
    # Soonest first: the 120 s lease before the 300 s one before the 600 s one...
    mine = [i for i in ascending if i in leases[:4]]
    assert mine == [leases[3], leases[1], leases[0], leases[2]]
    leases_page.click('th[data-key="expires_at"]')
    descending = shown(leases_page)
    assert order_of(cluster, descending, "expires_at") == sorted(times, reverse=True)


def test_sort_by_age(leases_page: Page, cluster: Cluster, leases: list[str]) -> None:
    # Newest first until asked otherwise.
    newest_first = shown(leases_page)
    times = order_of(cluster, newest_first, "granted_at")
    assert times == sorted(times, reverse=True)
    assert [i for i in newest_first if i in leases] == leases[::-1]
    leases_page.click('th[data-key="granted_at"]')  # the sorted column again: oldest first
    oldest_first = shown(leases_page)
    assert order_of(cluster, oldest_first, "granted_at") == sorted(times)
    assert [i for i in oldest_first if i in leases] == leases
