"""The admin UI in a real browser against a real daemon: log in, see leases appear live, revoke
one, refuse wrong and non-admin credentials, and screenshot the overview and a memory map."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from poold.types import MiB
from tests.browser.conftest import HOST_ID, Served, human, log_in, screenshot
from tests.timing import patience, ui_wait_ms, until

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow


def state_of(served: Served, lease: dict[str, Any]) -> str:
    return str(served.api("GET", f"/v1/leases/{lease['id']}").json()["state"])


def leases_page(page: Page, served: Served) -> None:
    page.goto(f"{served.url}/ui/#/leases")
    page.wait_for_selector("#page-leases #lease-count")


def test_log_in_with_the_admin_credential(admin_page: Page, served: Served) -> None:
    assert admin_page.is_visible("#top")
    assert "admin:" in admin_page.inner_text("#whoami")
    # The token lives in this tab's sessionStorage and is sent as the bearer.
    stored = admin_page.evaluate("sessionStorage.getItem('poold.token')")
    assert stored == served.admin_token


def test_wrong_credential_is_refused(page: Page, served: Served) -> None:
    log_in(page, served, "pd_nosuchtoken_0123456789abcdef")
    message = page.wait_for_selector("#login-message:not([hidden])")
    assert message is not None
    assert "refused" in message.inner_text()
    assert not page.is_visible("#top")
    assert page.evaluate("sessionStorage.getItem('poold.whoami')") is None


def test_non_admin_credential_is_refused(page: Page, served: Served) -> None:
    created = served.api("POST", "/v1/tokens",
                         json={"name": "ui-tenant", "role": "tenant", "tenant": "team-ui"})
    assert created.status_code == 201, created.text
    log_in(page, served, created.json()["bearer"])
    message = page.wait_for_selector("#login-message:not([hidden])")
    assert message is not None
    assert "needs an admin token" in message.inner_text()
    assert not page.is_visible("#top")


def test_a_refused_token_returns_to_the_login_page(admin_page: Page, served: Served) -> None:
    admin_page.evaluate("sessionStorage.setItem('poold.token', 'pd_revoked_0000')")
    message = admin_page.wait_for_selector("#login-message:not([hidden])", timeout=ui_wait_ms())
    assert message is not None
    assert "Log in again" in message.inner_text()
    assert admin_page.url.endswith("#/login")


def test_a_lease_granted_through_the_api_appears_within_two_seconds(
        admin_page: Page, served: Served) -> None:
    leases_page(admin_page, served)
    lease = served.grant(4 * MiB, labels={"test": "appears"})
    row = admin_page.wait_for_selector(f'tr[data-lease="{lease["id"]}"]', timeout=ui_wait_ms())
    assert row is not None
    assert "active" in row.inner_text()
    assert "test=appears" in row.inner_text()


def test_revoking_in_the_ui_revokes_in_the_api(admin_page: Page, served: Served) -> None:
    lease = served.grant(2 * MiB, labels={"test": "revoke"})
    leases_page(admin_page, served)
    admin_page.click(f'button.revoke[data-lease="{lease["id"]}"]')
    assert admin_page.is_visible("#confirm")
    assert lease["id"] in admin_page.inner_text("#confirm-body")
    admin_page.click("#confirm-ok")
    until("the lease is revoked", lambda: state_of(served, lease) == "revoked", patience())
    admin_page.wait_for_selector(f'tr[data-lease="{lease["id"]}"][data-state="revoked"]',
                                 timeout=ui_wait_ms())


def test_cancelling_the_confirmation_keeps_the_lease(admin_page: Page, served: Served) -> None:
    lease, later = (served.grant(2 * MiB, labels={"test": "cancel"}) for _ in range(2))
    leases_page(admin_page, served)
    admin_page.click(f'button.revoke[data-lease="{lease["id"]}"]')
    admin_page.click("#confirm-cancel")
    # A revoke confirmed after the cancel lands; one the cancel had sent would have gone first.
    admin_page.click(f'button.revoke[data-lease="{later["id"]}"]', timeout=ui_wait_ms())
    admin_page.click("#confirm-ok")
    until("the later revoke lands", lambda: state_of(served, later) == "revoked", patience())
    assert state_of(served, lease) == "active"


def test_leases_filter_and_sort(admin_page: Page, served: Served) -> None:
    small = served.grant(2 * MiB, labels={"job": "filter-a"})
    big = served.grant(6 * MiB, labels={"job": "filter-b"})
    leases_page(admin_page, served)
    admin_page.wait_for_selector(f'tr[data-lease="{big["id"]}"]')
    admin_page.fill("#filter-label", "job=filter-a")
    admin_page.wait_for_selector(f'tr[data-lease="{big["id"]}"]', state="detached")
    assert admin_page.is_visible(f'tr[data-lease="{small["id"]}"]')
    admin_page.fill("#filter-label", "job")
    admin_page.click('th[data-key="length"]')  # ascending by size
    ids = admin_page.eval_on_selector_all("#leases tbody tr",
                                          "rows => rows.map(r => r.dataset.lease)")
    assert ids.index(small["id"]) < ids.index(big["id"])
    admin_page.fill("#filter-label", "no-such-label")
    assert "No lease matches" in admin_page.inner_text("#leases")


def test_overview_shows_capacity_and_is_screenshotted(admin_page: Page, served: Served) -> None:
    for tenant, size in (("team-a", 8), ("team-b", 12), ("team-a", 4), (None, 6)):
        served.grant(size * MiB, tenant=tenant, labels={"model": "llama-70b"})
    served.grant(64 * MiB, tenant="team-b", device="dax0.0", pool="cxl")
    served.grant(32 * MiB, tenant="team-c", device="dax0.0", pool="cxl")
    admin_page.goto(f"{served.url}/ui/#/overview")
    for pool in served.api("GET", "/v1/capacity").json()["pools"]:
        card = f'.card.pool[data-pool="{pool["name"]}"]'
        # Live: the cards catch up with the grants above without a reload.
        admin_page.wait_for_function(
            "([sel, n]) => document.querySelector(sel)?.innerText.includes(n)",
            arg=[card, f"{pool['live_leases']} live lease"], timeout=ui_wait_ms())
        figure = f'{card} .figure[data-kind="leased"]'
        assert admin_page.inner_text(f"{figure} b") == human(pool["bytes"]["leased"])
        # Every part of the split is checked in tests/browser/test_overview.py.
    assert admin_page.is_visible('#device-capacity tr[data-device] a[href^="#/map/"]')
    assert screenshot(admin_page, "overview.png").stat().st_size > 0


def test_memory_map_shows_extents_with_their_holders(admin_page: Page, served: Served) -> None:
    lease = served.grant(10 * MiB, tenant="team-map", labels={"model": "llama"})
    admin_page.goto(f"{served.url}/ui/#/map/{served.device_id()}")
    extent = admin_page.wait_for_selector(f'.extent.lease[data-lease="{lease["id"]}"]')
    assert extent is not None
    extent.hover()
    tooltip = admin_page.inner_text("#tooltip")
    holder = lease.get("tenant") or "(none)"
    assert f"tenant {holder}" in tooltip and "generation" in tooltip and "10 MiB" in tooltip
    extent.click()  # selects it: the map is redrawn with it outlined
    extent = admin_page.wait_for_selector(f'.extent.lease.selected[data-lease="{lease["id"]}"]')
    assert extent is not None
    details = admin_page.inner_text("#map-details")
    assert lease["id"] in details and "expires" in details
    # Drawn to scale: the extent's share of the lane is its share of the device.
    lane = admin_page.eval_on_selector(".lane.leases", "el => el.getBoundingClientRect().width")
    width = extent.evaluate("el => el.getBoundingClientRect().width")
    size = next(d["size"] for d in served.api("GET", "/v1/devices").json()
                if d["id"] == served.device_id())
    assert abs(width / lane - lease["length"] / size) < 0.01
    assert screenshot(admin_page, "memory-map.png").stat().st_size > 0


def test_devices_page_shows_the_topology(admin_page: Page, served: Served) -> None:
    admin_page.goto(f"{served.url}/ui/#/devices")
    row = admin_page.wait_for_selector(f'#page-devices tr[data-device="{served.device_id()}"]')
    assert row is not None
    text = admin_page.inner_text("#page-devices")
    for shown in ("dax0.0", "mem0", "region0", "DAX devices", "CXL memdevs", "NUMA nodes"):
        assert shown in text, shown
    dax = admin_page.inner_text(f'#page-devices tr[data-device="{served.device_id("dax0.0")}"]')
    assert "devdax" in dax and "yes" in dax and "mem0" in dax  # joined with the topology


def test_drain_and_undrain_from_the_devices_page(admin_page: Page, served: Served) -> None:
    dax = served.device_id("dax0.0")
    admin_page.goto(f"{served.url}/ui/#/devices")
    admin_page.click(f'tr[data-device="{dax}"] button.drain')
    assert "Drain dax0.0" in admin_page.inner_text("#confirm-title")
    admin_page.click("#confirm-ok")
    admin_page.wait_for_selector(f'tr[data-device="{dax}"] button.undrain', timeout=ui_wait_ms())
    device = next(d for d in served.api("GET", "/v1/capacity").json()["devices"] if d["id"] == dax)
    assert device["state"] == "draining"
    assert device["bytes"]["draining"] == device["bytes"]["size"] - device["bytes"]["leased"]
    admin_page.click(f'tr[data-device="{dax}"] button.undrain')
    admin_page.click("#confirm-ok")
    admin_page.wait_for_selector(f'tr[data-device="{dax}"] button.drain', timeout=ui_wait_ms())
    assert "undrain done" in admin_page.inner_text("#toasts")


def test_hosts_page_shows_heartbeat_and_memory(admin_page: Page, served: Served) -> None:
    admin_page.goto(f"{served.url}/ui/#/hosts")
    row = admin_page.wait_for_selector(f'#hosts tr[data-host="{HOST_ID}"]')
    assert row is not None
    text = row.inner_text()
    assert "up" in text and "ago" in text and "of" in text  # memory "used of total"


def test_events_are_newest_first_and_live(admin_page: Page, served: Served) -> None:
    admin_page.goto(f"{served.url}/ui/#/events")
    admin_page.wait_for_selector("#events tbody tr")
    lease = served.grant(2 * MiB)
    admin_page.wait_for_selector(f'#events tbody tr:first-child >> text="{lease["id"][:8]}…"',
                                 timeout=ui_wait_ms())
    ids = admin_page.eval_on_selector_all("#events tbody tr",
                                          "rows => rows.map(r => +r.dataset.event)")
    assert ids == sorted(ids, reverse=True)
