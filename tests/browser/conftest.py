"""Browser tests: a real daemon (tests.daemon_fixtures.serving_daemon) on a recorded sysfs tree,
Debian's headless Chromium (/usr/bin/chromium, never a downloaded browser) driven by Playwright,
and the admin credential the daemon wrote to <state_dir>/admin.token.

`served` is one such daemon per test module; `cluster` adds a second, live host and a lost one
on its ledger (tests.browser.peers); `serve` makes one with other settings (a fake kernel's
sysfs, a port to come back on). `overflow` says what sticks out of a laptop-sized window.

Where Chromium or Playwright is missing the tests skip, unless POOLD_TEST_REQUIRE_BROWSER=1 (CI),
in which case they fail. Screenshots go to tests/browser/artifacts/ (ignored by git).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import pytest

from poold.daemon import Daemon
from tests.browser.peers import Peer
from tests.daemon_fixtures import serving_daemon
from tests.preconditions import unmet
from tests.sysfs_trees import extract

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

CHROMIUM = Path(os.environ.get("POOLD_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# A recorded kernel (one CXL memdev, a region, a devdax device) so the devices page has a
# topology to show; its dax0.0 makes a second pool, "cxl". The emulated device takes most leases.
SYSFS_TREE = "sysfs-b-cxl1-region-devdax"
EMULATED = "emu0"
# The served host as a real one is: known by a machine id of 32 hex digits, named by its host
# name; the pages show the name, with the id on hover (and the laptop-width tests see both).
HOST_ID = "4c1f0e9a2b7d48e6a3c5f1d2e8b9a0c7"
HOST_NAME = "node-a1"


def unavailable(reason: str) -> NoReturn:
    unmet("browser", reason)


@dataclass
class Served:
    daemon: Daemon
    url: str
    admin_token: str

    def api(self, method: str, path: str, token: str | None = None, **kwargs: Any
            ) -> httpx.Response:
        bearer = self.admin_token if token is None else token
        headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
        return httpx.request(method, self.url + path, timeout=10, headers=headers, **kwargs)

    def grant(self, size: int, tenant: str | None = None, ttl_s: int = 600,
              labels: dict[str, str] | None = None, device: str = EMULATED,
              pool: str = "default") -> dict[str, Any]:
        body: dict[str, Any] = {"size": size, "ttl_s": ttl_s, "device": device, "pool": pool,
                                "labels": labels or {}}
        if tenant is not None:
            body["tenant"] = tenant
        response = self.api("POST", "/v1/leases", json=body)
        assert response.status_code == 201, response.text
        lease: dict[str, Any] = response.json()
        return lease

    def device_id(self, devname: str = EMULATED) -> int:
        devices = self.api("GET", "/v1/devices").json()
        return int(next(d["id"] for d in devices if d["devname"] == devname))


@contextmanager
def serve(tmp: pytest.TempPathFactory, tree: str | None = SYSFS_TREE, state: Path | None = None,
          **settings: Any) -> Iterator[Served]:
    """A daemon with token auth on a recorded sysfs tree (none: no dax devices), its dax devices
    in pool "cxl", in a new state directory unless given; `settings` override (sysfs_root,
    port, emulate_uid, ...). "cxl" is a trusted pool, so the pages show several tenants' leases
    on one whole dax device."""
    state = state or tmp.mktemp("ui-daemon")
    defaults: dict[str, Any] = {"watch_udev": False, "auth": "token", "host_id": HOST_ID,
                                "host_name": HOST_NAME,
                                "device_pools": {"dax*": "cxl"}, "trusted_pools": ["cxl"]}
    if tree is None:
        defaults["discover_dax"] = False
    elif "sysfs_root" not in settings:
        defaults["sysfs_root"] = extract(tree, tmp.mktemp("sysfs")) / "sys"
    with serving_daemon(state, **{**defaults, **settings}) as (daemon, url):
        credential = state / "admin.token"
        assert credential.exists(), "the daemon wrote no admin credential"
        yield Served(daemon, url, credential.read_text().strip())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory) as served:
        yield served


@dataclass
class Cluster:
    """A served daemon whose emulated device is shared with a live second host, `peer`
    ("host-b"), and a host silent for an hour, "host-gone", that the daemon declared lost."""

    served: Served
    peer: Peer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with serve(tmp_path_factory, emulate_uid="test:shared-emu0") as served:
        url = served.daemon.settings.ledger_url
        peer, gone = Peer(url, "host-b"), Peer(url, "host-gone", silent_for_s=3600)
        try:
            yield Cluster(served, peer)
        finally:
            peer.close()
            gone.close()


# Package scope, not session: Playwright's sync API keeps an event loop running in this thread
# while it is open, and later tests (asyncio.run) must not find one.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        unavailable(f"playwright is not installed ({exc}): pip install -e '.[test]'")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        except Error as exc:
            unavailable(f"{CHROMIUM} did not start: {exc}")
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage) at laptop size."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def admin_page(page: Page, served: Served) -> Page:
    """A tab logged in as the admin of `served`, on the overview."""
    return logged_in(page, served)


def logged_in(page: Page, served: Served) -> Page:
    """`page` logged in as the admin of `served`, on the overview."""
    log_in(page, served, served.admin_token)
    page.wait_for_selector("#page-overview .card.pool")
    return page


def log_in(page: Page, served: Served, token: str) -> None:
    page.goto(f"{served.url}/ui/")
    page.fill("#token", token)
    page.click("#login-submit")


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def human(n: int) -> str:
    """Bytes as the UI writes them (format.js fmtBytes): binary units, one decimal below 100."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    x, i = float(n), 0
    while abs(x) >= 1024 and i < len(units) - 1:
        x, i = x / 1024, i + 1
    digits = 0 if i == 0 or x.is_integer() or x >= 100 else 1
    return f"{x:.{digits}f} {units[i]}"


LAPTOPS: tuple[ViewportSize, ...] = ({"width": 1366, "height": 768}, {"width": 1280, "height": 800})

# What sticks out sideways: the document wider than the window, a table that scrolls within its
# frame, or any visible element whose right edge is past the window's.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const found = [];
  if (document.documentElement.scrollWidth > width) {
    found.push(`the page is ${document.documentElement.scrollWidth} px wide`);
  }
  for (const wrap of document.querySelectorAll(".table-wrap")) {
    if (wrap.scrollWidth > wrap.clientWidth + 1) {
      const head = [...wrap.querySelectorAll("th")].map((th) => th.textContent).join("|");
      found.push(`a table scrolls ${wrap.scrollWidth - wrap.clientWidth} px sideways: ${head}`);
    }
  }
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (el.offsetParent !== null && box.width > 0 && box.right > width + 1) {
      found.push(`${el.tagName.toLowerCase()}.${el.className} ends at ${Math.round(box.right)} px`);
    }
  }
  return found.slice(0, 10);
}"""


def overflow(page: Page) -> list[str]:
    """What sticks out past the right edge of the window (nothing, on a page that fits)."""
    found: list[str] = page.evaluate(OVERFLOW)
    return found
