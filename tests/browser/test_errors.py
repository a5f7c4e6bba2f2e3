"""Error and empty states: when the daemon stops, the page on screen says so (a banner over what
it last showed; a page opened meanwhile says it could not load) and recovers by itself, without
a reload, when the daemon is back; every page says clearly when it has nothing to show."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from poold.types import MiB
from tests.browser.conftest import Served, log_in, logged_in, screenshot, serve
from tests.daemon_fixtures import free_port, stop_keeper
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

DOWN = "the daemon did not answer"


def offline(page: Page) -> None:
    page.wait_for_selector("#live.error", timeout=ui_wait_ms())
    assert page.inner_text("#live") == "offline"


def test_the_page_says_the_daemon_stopped_and_recovers_when_it_is_back(
        page: Page, tmp_path_factory: pytest.TempPathFactory) -> None:
    state, port = tmp_path_factory.mktemp("restarted"), free_port()
    try:
        _stop_and_come_back(page, tmp_path_factory, state, port)
    finally:
        stop_keeper(state)


def _stop_and_come_back(page: Page, tmp_path_factory: pytest.TempPathFactory, state: Path,
                        port: int) -> None:
    # The lease's memory outlives the stop in the fd keeper, as it does outside systemd.
    with serve(tmp_path_factory, state=state, port=port, fd_store="keeper") as served:
        lease = served.grant(4 * MiB, tenant="team-a")
        logged_in(page, served)
        page.goto(f"{served.url}/ui/#/leases")
        page.wait_for_selector(f'tr[data-lease="{lease["id"]}"]')
        page.evaluate("window.sameDocument = true")  # gone if anything reloads the page
    # The daemon has stopped: what was loaded stays, under a banner that says why.
    offline(page)
    banner = page.wait_for_selector("#banner:not([hidden])", timeout=ui_wait_ms())
    assert banner is not None
    text = banner.inner_text()
    assert "Live update failed" in text and DOWN in text, text
    assert "Showing what was loaded at" in text and "retrying every 1 s" in text, text
    assert page.is_visible(f'tr[data-lease="{lease["id"]}"]')
    assert screenshot(page, "daemon-stopped.png").stat().st_size > 0

    with serve(tmp_path_factory, state=state, port=port, fd_store="keeper") as again:
        # Back on the same port, same ledger and credential: the same page catches up.
        page.wait_for_selector("#live.ok", timeout=ui_wait_ms())
        page.wait_for_selector("#banner", state="hidden", timeout=ui_wait_ms())
        assert page.is_visible(f'tr[data-lease="{lease["id"]}"][data-state="active"]')
        revoked = again.api("POST", f"/v1/leases/{lease['id']}/revoke")
        assert revoked.status_code == 200, revoked.text
        page.wait_for_selector(f'tr[data-lease="{lease["id"]}"][data-state="revoked"]')

    # A page opened while it is down cannot show anything, and says so in its place...
    offline(page)
    page.click('#nav a[data-page="overview"]')
    error = page.wait_for_selector("#page-overview .error-state", timeout=ui_wait_ms())
    assert error is not None
    assert "Could not load this page" in error.inner_text() and DOWN in error.inner_text()
    assert "It loads by itself once the daemon answers" in error.inner_text()
    # ...and loads by itself when the daemon is back.
    with serve(tmp_path_factory, state=state, port=port, fd_store="keeper") as again:
        page.wait_for_selector("#page-overview .card.pool", timeout=ui_wait_ms())
        assert not page.is_visible("#page-overview .error-state")
        assert not page.is_visible("#banner")
        pools = {p["name"]: p for p in again.api("GET", "/v1/capacity").json()["pools"]}
        page.wait_for_selector(f'.card.pool[data-pool="cxl"] >> text={pools["cxl"]["devices"]}'
                               " device")
    assert page.evaluate("window.sameDocument") is True


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon with nothing to lease: no emulated device, and a recorded kernel with a CXL
    memdev but no region, so no dax device."""
    with serve(tmp_path_factory, tree="sysfs-a-cxl1-before-region", emulate_size=None) as served:
        yield served


@pytest.mark.parametrize(("route", "where", "says"), [
    ("overview", "#device-capacity", "No devices: the daemon found no DAX device"),
    ("devices", "#page-devices", "No devices in the ledger"),
    ("devices", "#page-devices", "The kernel shows no DAX device."),
    ("map", "#page-map", "No devices to map."),
    ("leases", "#leases", "No leases yet. Clients lease with POST /v1/leases."),
])
def test_empty_pages_say_so(page: Page, bare: Served, route: str, where: str, says: str) -> None:
    log_in_anywhere(page, bare)
    page.goto(f"{bare.url}/ui/#/{route}")
    # Visible when found (the page redraws every second, so ask by selector, not by a handle
    # to what the next redraw replaces).
    shown = f"{where} .empty >> text={says}"
    assert page.wait_for_selector(shown, timeout=ui_wait_ms()) is not None
    assert page.is_visible(shown)
    assert not page.is_visible(".error-state") and not page.is_visible("#banner")


def log_in_anywhere(page: Page, served: Served) -> None:
    """Logged in, whatever the overview shows (an empty daemon may have no pool card)."""
    log_in(page, served, served.admin_token)
    page.wait_for_selector("#page-overview")


def test_an_empty_device_map_and_an_unmatched_event_filter_say_so(page: Page,
                                                                  served: Served) -> None:
    logged_in(page, served)
    nothing = next(d for d in served.api("GET", "/v1/devices").json()
                   if d["live_leases"] == 0 and d["claimed_bytes"] == 0)
    page.goto(f"{served.url}/ui/#/map/{nothing['id']}")
    says = f"Nothing is claimed or leased on {nothing['devname']}"
    assert page.wait_for_selector(f"#page-map .empty >> text={says}",
                                  timeout=ui_wait_ms()) is not None
    page.goto(f"{served.url}/ui/#/events")
    page.wait_for_selector("#events tbody tr")
    page.fill("#filter-kind", "no.such.kind")
    assert "No event matches this kind." in page.inner_text("#events .empty")
