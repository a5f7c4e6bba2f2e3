"""/docs works offline: Swagger UI from the package (swagger-ui-bundle), under a
Content-Security-Policy, drawing this daemon's operations in a real Chromium that asks nothing
of any other origin (once, it loaded Swagger UI from a CDN: blank on an offline cluster)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx

from tests.browser.conftest import Served

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page, Request


def test_the_page_loads_nothing_from_elsewhere(served: Served) -> None:
    page = httpx.get(f"{served.url}/docs")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self';" in policy
    assert not re.findall(r"https?://", page.text)
    assert "<script>" not in page.text  # no inline script: scripts are files of ours
    for src in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        asset = httpx.get(f"{served.url}{src}")
        assert asset.status_code == 200, src
    # FastAPI's own pages, which fetch from a CDN, are not served.
    assert httpx.get(f"{served.url}/redoc").status_code == 404


def test_swagger_ui_draws_the_api_offline(page: Page, served: Served) -> None:
    origins: set[str] = set()
    problems: list[str] = []

    def requested(request: Request) -> None:
        origins.add(re.sub(r"^(\w+://[^/]+).*", r"\1", request.url))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(message.text)

    page.on("request", requested)
    page.on("console", console)
    page.goto(f"{served.url}/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/v1/leases" in p for p in paths), paths
    assert origins <= {served.url, "data:"}, origins
    assert not problems, problems  # among them, any Content-Security-Policy violation
