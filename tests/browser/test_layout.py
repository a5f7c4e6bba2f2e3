"""Laptop screens: at 1366x768 and 1280x800 no page sticks out sideways (the document, a table
within its frame, or any element), with every page full of what it shows: two pools, three hosts
(one lost), leases of two hosts with long tenant names and labels, the kernel's topology."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from poold.types import MiB
from tests.browser.conftest import LAPTOPS, Cluster, logged_in, overflow

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

pytestmark = pytest.mark.slow

# Route -> what shows that its data is drawn.
LOADED = {
    "overview": "#device-capacity tr[data-device]",
    "devices": "#page-devices tr[data-dax]",
    "map": ".extent.lease",
    "leases": "#leases tbody tr",
    "hosts": '#hosts tr[data-host="host-gone"]',
    "events": "#events tbody tr",
}


@pytest.mark.parametrize("size", LAPTOPS, ids=lambda s: f"{s['width']}x{s['height']}")
def test_every_page_fits_a_laptop_screen(page: Page, cluster: Cluster,
                                         size: ViewportSize) -> None:
    served = cluster.served
    labels = {"model": "llama-3.1-70b-instruct", "job": "nightly-eval-2026-11-30-batch-7"}
    served.grant(4 * MiB, tenant="inference-team-with-a-long-name", labels=labels)
    served.grant(8 * MiB, tenant="team-cxl", device="dax0.0", pool="cxl", labels=labels)
    cluster.peer.grant(6 * MiB, tenant="team-b", labels=labels)
    page.set_viewport_size(size)
    page.goto(f"{served.url}/ui/")
    page.wait_for_selector("#login-submit")
    assert overflow(page) == [], "login"
    logged_in(page, served)
    for route, loaded in LOADED.items():
        page.goto(f"{served.url}/ui/#/{route}")
        page.wait_for_selector(loaded)
        assert overflow(page) == [], route
    # The hover summary and the details of a lease stay on screen too.
    page.goto(f"{served.url}/ui/#/map")
    extent = page.wait_for_selector(".extent.lease")
    assert extent is not None
    extent.click()
    page.wait_for_selector(".extent.lease.selected")
    page.hover(".extent.lease.selected")
    assert page.is_visible("#tooltip")
    assert overflow(page) == [], "map with a lease selected"
