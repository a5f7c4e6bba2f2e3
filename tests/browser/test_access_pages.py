"""The tenants and tokens pages: an admin creates a tenant and sets its quotas, which its grants
then meet; creates a token whose secret is shown once, works, and is gone from the page once
closed; revokes it after a confirmation, and the daemon refuses it. Each step checked through
the API; refusals shown as the API says them; both pages fit a laptop."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import LAPTOPS, Served, logged_in, overflow
from tests.browser.test_pools_page import answer, shows
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

pytestmark = pytest.mark.slow


def go(page: Page, served: Served, name: str) -> Page:
    logged_in(page, served)
    page.goto(f"{served.url}/ui/#/{name}")
    page.wait_for_selector(f"#page-{name} #{name[:-1]}-new")
    return page


def test_an_admin_creates_a_tenant_and_sets_its_quotas(page: Page, served: Served) -> None:
    go(page, served, "tenants")
    page.click("#tenant-new")
    page.fill('#page-form input[name="name"]', "team-quota")
    page.fill('#page-form input[name="max_bytes"]', "4MiB")
    page.fill('#page-form input[name="max_leases"]', "lots")
    page.click("#page-form-save")
    assert "max_leases" in page.inner_text("#page-form .form-error")  # checked before asking
    page.fill('#page-form input[name="max_leases"]', "1")
    page.click("#page-form-save")
    assert "1 leases at most" in answer(page, "Create tenant team-quota?")
    page.wait_for_selector('#page-tenants tr[data-tenant="team-quota"]', timeout=ui_wait_ms())
    tenant = served.api("GET", "/v1/tenants/team-quota").json()
    assert (tenant["max_bytes"], tenant["max_leases"]) == (4 * 2**20, 1)

    bearer = served.api("POST", "/v1/tokens", json={"name": "q", "role": "tenant",
                                                    "tenant": "team-quota"}).json()["bearer"]
    assert served.api("POST", "/v1/leases", token=bearer, json={"size": 2**20}).status_code == 201
    refused = served.api("POST", "/v1/leases", token=bearer, json={"size": 2**20})
    assert (refused.status_code, refused.json()["error"]) == (429, "QuotaExceeded")
    shows(page, 'tr[data-tenant="team-quota"] [data-field="leases"]', "1 of 1")

    page.click('#page-tenants tr[data-tenant="team-quota"] button[data-action="quotas"]')
    page.fill('#page-form input[name="max_leases"]', "")
    page.click("#page-form-save")
    answer(page, "Change team-quota's quotas?")
    shows(page, 'tr[data-tenant="team-quota"] [data-field="leases"]', "1 of unlimited")
    assert served.api("POST", "/v1/leases", token=bearer, json={"size": 2**20}).status_code == 201

    page.click('#page-tenants tr[data-tenant="team-quota"] [data-action="leases"]')
    page.wait_for_selector("#page-leases #filter-tenant")
    assert page.input_value("#filter-tenant") == "team-quota"


def test_a_token_is_shown_once_works_and_is_revoked(page: Page, served: Served) -> None:
    go(page, served, "tokens")
    page.click("#token-new")
    page.fill('#page-form input[name="name"]', "engine-7")
    page.select_option('#page-form select[name="role"]', "tenant")
    page.click("#page-form-save")  # a tenant token without its tenant: refused here
    assert "names its tenant" in page.inner_text("#page-form .form-error")
    page.fill('#page-form input[name="tenant"]', "team-tok")
    page.click("#page-form-save")
    answer(page, "Create a tenant token for engine-7?")
    page.wait_for_selector("#token-made #token-secret")
    bearer = page.input_value("#token-secret")
    assert bearer.startswith("pd_")
    made = next(t for t in served.api("GET", "/v1/tokens").json() if t["name"] == "engine-7")
    assert (made["role"], made["tenant"], made["revoked_at"]) == ("tenant", "team-tok", None)
    assert served.api("GET", "/v1/auth/whoami", token=bearer).json()["tenant"] == "team-tok"
    page.click("#token-done")
    page.wait_for_selector(f'#page-tokens tr[data-token="{made["id"]}"]', timeout=ui_wait_ms())
    assert bearer not in page.content()  # shown once: gone from the page

    page.click(f'#page-tokens tr[data-token="{made["id"]}"] button[data-action="revoke"]')
    answer(page, "Revoke engine-7?", ok=False)
    assert served.api("GET", "/v1/auth/whoami", token=bearer).status_code == 200
    page.click(f'#page-tokens tr[data-token="{made["id"]}"] button[data-action="revoke"]')
    answer(page, "Revoke engine-7?")
    page.wait_for_selector(f'#page-tokens tr[data-token="{made["id"]}"] .state.revoked',
                           timeout=ui_wait_ms())
    assert served.api("GET", "/v1/auth/whoami", token=bearer).status_code == 401


@pytest.mark.parametrize("viewport", LAPTOPS, ids=lambda v: f"{v['width']}px")
@pytest.mark.parametrize("name", ["tenants", "tokens"])
def test_the_access_pages_fit_a_laptop(page: Page, served: Served, name: str,
                                       viewport: ViewportSize) -> None:
    served.api("PUT", "/v1/tenants/team-with-a-rather-long-name-for-its-org",
               json={"max_bytes": 2**40, "max_leases": 1000})
    served.api("POST", "/v1/tokens", json={
        "name": "vllm-worker-on-gpu-node-rack-7-slot-3", "role": "tenant",
        "tenant": "team-with-a-rather-long-name-for-its-org"})
    go(page, served, name)
    page.set_viewport_size(viewport)
    page.wait_for_selector(f"#page-{name} table", timeout=ui_wait_ms())
    assert overflow(page) == []
