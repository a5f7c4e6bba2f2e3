"""Elastic leases in the admin UI: the leases page tags an elastic lease, and one the daemon asked
back for a waiting grant says by when it must be given back; the memory map marks both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from poold.types import MiB
from tests.browser.conftest import EMULATED, Served, logged_in, serve
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # A long grace: the lease asked back stays asked (not revoked) while the pages are read.
    with serve(tmp_path_factory, tree=None, reclaim_grace_s=600) as served:
        yield served


@pytest.fixture(scope="module")
def elastic(served: Served) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two elastic leases fill the device; a grant that waited half a second asked one back."""
    held = []
    for _ in range(2):
        granted = served.api("POST", "/v1/leases", json={
            "size": 32 * MiB, "ttl_s": 3600, "device": EMULATED, "elastic": True})
        assert granted.status_code == 201, granted.text
        held.append(granted.json())
    waited = served.api("POST", "/v1/leases", json={"size": 32 * MiB, "wait_s": 0.5})
    assert waited.status_code == 507, waited.text
    leases = {x["id"]: x for x in served.api("GET", "/v1/leases").json()}
    asked = [leases[x["id"]] for x in held if leases[x["id"]]["reclaim_by"]]
    kept = [leases[x["id"]] for x in held if not leases[x["id"]]["reclaim_by"]]
    assert len(asked) == len(kept) == 1
    return asked[0], kept[0]


def test_the_leases_page_tags_elastic_leases_and_the_one_asked_back(
        page: Page, served: Served, elastic: tuple[dict[str, Any], dict[str, Any]]) -> None:
    asked, kept = elastic
    logged_in(page, served)
    page.goto(f"{served.url}/ui/#/leases")
    row = page.wait_for_selector(f'tr[data-lease="{asked["id"]}"] .tag.reclaiming',
                                 timeout=ui_wait_ms())
    assert row is not None and row.inner_text().startswith("give back by ")
    tag = page.wait_for_selector(f'tr[data-lease="{kept["id"]}"] .tag.elastic',
                                 timeout=ui_wait_ms())
    assert tag is not None and tag.inner_text() == "elastic"


def test_the_memory_map_marks_them(page: Page, served: Served,
                                   elastic: tuple[dict[str, Any], dict[str, Any]]) -> None:
    asked, kept = elastic
    logged_in(page, served)
    page.goto(f"{served.url}/ui/#/map/{asked['device_id']}")
    page.wait_for_selector(f'.extent.lease.elastic.reclaiming[data-lease="{asked["id"]}"]',
                           timeout=ui_wait_ms())
    extent = page.wait_for_selector(f'.extent.lease.elastic[data-lease="{kept["id"]}"]',
                                    timeout=ui_wait_ms())
    assert extent is not None and "reclaiming" not in (extent.get_attribute("class") or "")
    extent.click()
    details = page.wait_for_selector("#map-details dl", timeout=ui_wait_ms())
    assert details is not None and "elastic" in details.inner_text()
