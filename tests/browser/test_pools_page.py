"""The pools page: an admin creates a pool, restricts it to a tenant, sets that tenant's quota
there and retires the pool, each after its confirmation and each checked through the API; a
form the daemon refuses shows the refusal as the API said it and changes nothing; a cancelled
confirmation changes nothing; the table fits a laptop's width."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import LAPTOPS, Served, logged_in, overflow, screenshot
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

pytestmark = pytest.mark.slow


def pools(served: Served) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in served.api("GET", "/v1/pools").json()}


@pytest.fixture
def pools_page(page: Page, served: Served) -> Page:
    logged_in(page, served)
    page.goto(f"{served.url}/ui/#/pools")
    page.wait_for_selector('#page-pools tr[data-pool="default"]')
    return page


def answer(page: Page, title: str, ok: bool = True) -> str:
    page.wait_for_selector("#confirm[open]")
    assert page.inner_text("#confirm-title") == title
    body = page.inner_text("#confirm-body")
    page.click("#confirm-ok" if ok else "#confirm-cancel")
    page.wait_for_selector("#confirm", state="hidden")
    return body


def shows(page: Page, selector: str, text: str) -> None:
    """Wait until the element `selector` finds reads `text` (the page redraws every poll)."""
    page.wait_for_function("""([selector, text]) => {
        const el = document.querySelector(selector);
        return el !== null && el.textContent === text; }""", arg=[selector, text],
                           timeout=ui_wait_ms())


def row(page: Page, pool: str, field: str) -> str:
    return page.inner_text(f'#page-pools tr[data-pool="{pool}"] [data-field="{field}"]')


def test_an_admin_runs_a_pool_from_the_page(pools_page: Page, served: Served) -> None:
    page = pools_page
    page.click("#pool-new")
    page.fill('#page-form input[name="name"]', "ui-kv")
    page.fill('#page-form input[name="description"]', "made in the browser")
    page.fill('#page-form input[name="max_ttl_s"]', "3600")
    page.click("#page-form-save")
    body = answer(page, "Create pool ui-kv?", ok=False)  # cancelled: nothing made
    assert "max_ttl_s: 3600" in body
    assert "ui-kv" not in pools(served)
    page.click("#page-form-save")
    answer(page, "Create pool ui-kv?")
    page.wait_for_selector('#page-pools tr[data-pool="ui-kv"]', timeout=ui_wait_ms())
    made = pools(served)["ui-kv"]
    assert (made["description"], made["max_ttl_s"], made["scrub_on_release"],
            made["allowed_tenants"]) == ("made in the browser", 3600, True, None)

    # Restrict it to a tenant and stop scrubbing: one confirmed change.
    page.click('#page-pools tr[data-pool="ui-kv"] button[data-action="edit"]')
    page.fill('#page-form input[name="allowed_tenants"]', "team-ui")
    page.uncheck('#page-form input[name="scrub_on_release"]')
    page.click("#page-form-save")
    body = answer(page, "Change pool ui-kv?")
    assert "allowed_tenants: team-ui" in body and "scrub_on_release: false" in body
    shows(page, 'tr[data-pool="ui-kv"] [data-field="tenants"]', "team-ui")
    changed = pools(served)["ui-kv"]
    assert (changed["allowed_tenants"], changed["scrub_on_release"]) == (["team-ui"], False)
    assert row(page, "ui-kv", "scrub") == "not scrubbed"
    # The tenant's grant there is judged by the new policy: another tenant is refused.
    made_token = served.api("POST", "/v1/tokens", json={"name": "ui", "role": "tenant",
                                                        "tenant": "team-other"}).json()
    refused = served.api("POST", "/v1/leases", token=made_token["bearer"],
                         json={"size": 2**20, "pool": "ui-kv"})
    assert (refused.status_code, refused.json()["error"]) == (403, "TenantNotAllowed")

    # A quota for the tenant in this pool.
    page.click('#page-pools tr[data-pool="ui-kv"] button[data-action="quota"]')
    page.fill('#page-form input[name="tenant"]', "team-ui")
    page.fill('#page-form input[name="max_bytes"]', "64MiB")
    page.fill('#page-form input[name="max_leases"]', "4")
    page.click("#page-form-save")
    answer(page, "Set team-ui's quota in ui-kv?")
    page.wait_for_selector('tr[data-pool="ui-kv"] [data-field="quotas"] [data-tenant="team-ui"]',
                           timeout=ui_wait_ms())
    assert pools(served)["ui-kv"]["quotas"][0] == {
        "tenant": "team-ui", "max_bytes": 64 * 2**20, "max_leases": 4, "leased_bytes": 0,
        "live_leases": 0}

    # A change the daemon refuses is shown in the form, as the API said it; nothing changes.
    before = pools(served)["ui-kv"]
    page.click('#page-pools tr[data-pool="ui-kv"] button[data-action="edit"]')
    page.fill('#page-form input[name="claim_slice"]', "lots")
    page.click("#page-form-save")
    page.wait_for_selector("#page-form .form-error:not([hidden])")
    assert "claim_slice" in page.inner_text("#page-form .form-error")
    page.click("#page-form-cancel")
    assert pools(served)["ui-kv"] == before

    # Retiring the default pool is refused (it holds a device): the refusal is shown.
    page.click('#page-pools tr[data-pool="default"] button[data-action="retire"]')
    answer(page, "Retire pool default?")
    page.wait_for_selector("#toasts .toast.error", timeout=ui_wait_ms())
    assert "Conflict" in page.inner_text("#toasts .toast.error")
    assert pools(served)["default"]["retired_at"] is None

    page.click('#page-pools tr[data-pool="ui-kv"] button[data-action="retire"]')
    answer(page, "Retire pool ui-kv?")
    page.wait_for_selector('#page-pools tr[data-pool="ui-kv"]', state="detached",
                           timeout=ui_wait_ms())
    assert "ui-kv" not in pools(served)


def test_a_refusal_from_the_daemon_is_shown_in_the_form(pools_page: Page, served: Served
                                                         ) -> None:
    page = pools_page
    served.api("POST", "/v1/pools", json={"name": "taken"})
    page.click("#pool-new")
    page.fill('#page-form input[name="name"]', "taken")
    page.click("#page-form-save")
    answer(page, "Create pool taken?")
    page.wait_for_selector("#page-form .form-error:not([hidden])", timeout=ui_wait_ms())
    assert page.inner_text("#page-form .form-error").startswith("Conflict: pool 'taken' exists")
    served.api("DELETE", "/v1/pools/taken")


@pytest.mark.parametrize("viewport", LAPTOPS, ids=lambda v: f"{v['width']}px")
def test_the_pools_page_fits_a_laptop(pools_page: Page, served: Served,
                                      viewport: ViewportSize) -> None:
    served.api("POST", "/v1/pools", json={
        "name": "a-rather-long-pool-name-for-kv", "description": "KV offload for the inference "
        "fleet in rack 7, both CXL switches", "allowed_tenants": [f"team-{i}" for i in range(6)]})
    served.api("PUT", "/v1/pools/a-rather-long-pool-name-for-kv/quotas/team-0",
               json={"max_bytes": 2**36, "max_leases": 64})
    pools_page.set_viewport_size(viewport)
    pools_page.wait_for_selector('tr[data-pool="a-rather-long-pool-name-for-kv"]',
                                 timeout=ui_wait_ms())
    screenshot(pools_page, f"pools-{viewport['width']}.png")
    assert overflow(pools_page) == []
    served.api("DELETE", "/v1/pools/a-rather-long-pool-name-for-kv")


def test_a_pool_from_creation_to_retirement(pools_page: Page, served: Served) -> None:
    """The operator's whole flow: a pool made, a device moved in, restricted to a tenant whose
    token leases there through the API, the lease on the memory map, the token revoked, the
    device moved back and the pool retired; each step checked through the API."""
    page = pools_page
    page.click("#pool-new")
    page.fill('#page-form input[name="name"]', "flow")
    page.click("#page-form-save")
    answer(page, "Create pool flow?")
    page.wait_for_selector('#page-pools tr[data-pool="flow"]', timeout=ui_wait_ms())

    def move(pool: str, devname: str) -> None:
        page.click(f'#page-pools tr[data-pool="{pool}"] button[data-action="move"]')
        page.wait_for_selector('#page-form select[name="device_id"]')
        page.select_option('#page-form select[name="device_id"]',
                           label=next(o for o in page.eval_on_selector_all(
                               '#page-form option', "os => os.map(o => o.textContent)")
                                      if o.startswith(f"{devname} ")))
        page.click("#page-form-save")
        answer(page, f"Move {devname} into {pool}?")
        shows(page, f'tr[data-pool="{pool}"] [data-field="devices"]', "1 device")

    move("flow", "emu0")
    emu = next(d for d in served.api("GET", "/v1/devices").json() if d["devname"] == "emu0")
    assert emu["pool"] == "flow"

    page.click('#page-pools tr[data-pool="flow"] button[data-action="edit"]')
    page.fill('#page-form input[name="allowed_tenants"]', "team-flow")
    page.click("#page-form-save")
    answer(page, "Change pool flow?")
    shows(page, 'tr[data-pool="flow"] [data-field="tenants"]', "team-flow")
    assert pools(served)["flow"]["allowed_tenants"] == ["team-flow"]

    # That tenant's token, made on the Tokens page: its secret shown once.
    page.goto(f"{served.url}/ui/#/tokens")
    page.click("#token-new")
    page.fill('#page-form input[name="name"]', "flow-engine")
    page.select_option('#page-form select[name="role"]', "tenant")
    page.fill('#page-form input[name="tenant"]', "team-flow")
    page.click("#page-form-save")
    answer(page, "Create a tenant token for flow-engine?")
    bearer = page.input_value("#token-made #token-secret")
    page.click("#token-done")
    token = next(t for t in served.api("GET", "/v1/tokens").json() if t["name"] == "flow-engine")
    lease = served.api("POST", "/v1/leases", token=bearer,
                       json={"size": 4 * 2**20, "pool": "flow", "ttl_s": 600})
    assert lease.status_code == 201 and lease.json()["device"] == "emu0"
    page.goto(f"{served.url}/ui/#/map/{emu['id']}")
    page.wait_for_selector(f'.extent.lease[data-lease="{lease.json()["id"]}"]',
                           timeout=ui_wait_ms())

    # The token revoked on the Tokens page: the daemon refuses it.
    page.goto(f"{served.url}/ui/#/tokens")
    page.click(f'#page-tokens tr[data-token="{token["id"]}"] button[data-action="revoke"]')
    answer(page, "Revoke flow-engine?")
    page.wait_for_selector(f'#page-tokens tr[data-token="{token["id"]}"] .state.revoked',
                           timeout=ui_wait_ms())
    refused = served.api("POST", "/v1/leases", token=bearer, json={"size": 2**20, "pool": "flow"})
    assert refused.status_code == 401
    served.api("DELETE", f"/v1/leases/{lease.json()['id']}").raise_for_status()

    page.goto(f"{served.url}/ui/#/pools")
    page.wait_for_selector('#page-pools tr[data-pool="flow"]')
    # The device holds a lease until its scrub ends; the move waits for that.
    until_free = ui_wait_ms()
    page.wait_for_function(f"""async () => {{
        const r = await fetch("{served.url}/v1/devices/{emu['id']}/extents",
            {{ headers: {{ authorization: "Bearer {served.admin_token}" }} }});
        return (await r.json()).leases.length === 0; }}""", timeout=until_free)
    move("default", "emu0")
    assert next(d for d in served.api("GET", "/v1/devices").json()
                if d["devname"] == "emu0")["pool"] == "default"
    page.click('#page-pools tr[data-pool="flow"] button[data-action="retire"]')
    answer(page, "Retire pool flow?")
    page.wait_for_selector('#page-pools tr[data-pool="flow"]', state="detached",
                           timeout=ui_wait_ms())
    assert "flow" not in pools(served)


def test_placement_rules_are_edited_on_the_page(pools_page: Page, served: Served) -> None:
    page = pools_page
    # The browser daemon's config (device_pools {"dax*": "cxl"}) seeded the ledger's rules.
    page.wait_for_selector('#pool-rules tr[data-rule="0"]')
    assert page.inner_text('#pool-rules tr[data-rule="0"]').split("\t") == [
        "1", "device", "dax*", "cxl"]
    page.click("#rules-edit")
    page.fill('#page-form textarea[name="rules"]', "colour red cxl")
    page.click("#page-form-save")
    assert "line 1" in page.inner_text("#page-form .form-error")  # checked before asking
    page.fill('#page-form textarea[name="rules"]', "serial 0x4a* cxl\ndevice dax* nowhere")
    page.click("#page-form-save")
    answer(page, "Replace the placement rules?")
    page.wait_for_selector("#page-form .form-error:not([hidden])", timeout=ui_wait_ms())
    assert "UnknownPool" in page.inner_text("#page-form .form-error")  # the daemon's refusal
    assert served.api("GET", "/v1/pool-rules").json()["rules"] == [
        {"field": "device", "pattern": "dax*", "pool": "cxl"}]  # unchanged
    page.fill('#page-form textarea[name="rules"]', "serial 0x4a* cxl\ndevice dax* cxl")
    page.click("#page-form-save")
    answer(page, "Replace the placement rules?")
    page.wait_for_selector('#pool-rules tr[data-rule="1"]', timeout=ui_wait_ms())
    assert served.api("GET", "/v1/pool-rules").json()["rules"] == [
        {"field": "serial", "pattern": "0x4a*", "pool": "cxl"},
        {"field": "device", "pattern": "dax*", "pool": "cxl"}]
    assert page.is_visible("#rules-disagree")  # the file says otherwise now
    served.api("PUT", "/v1/pool-rules", json={"rules": [
        {"field": "device", "pattern": "dax*", "pool": "cxl"}]}).raise_for_status()
