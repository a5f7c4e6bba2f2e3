"""Device operations from the devices page against a daemon whose sysfs is a writable recorded
tree answered by a fake kernel (tests/drivers/fake_kernel.py, as tests/daemon/test_device_ops.py
serves it): create a device in a dynamic dax region, resize it, destroy it, reconfigure one to
system-ram and back; each after its confirmation, each checked through the API. A cancelled
confirmation does nothing; a refusal and a typo are shown, and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from drivers.daxctl import DaxControl
from poold.types import MiB
from tests.browser.conftest import LAPTOPS, Served, human, logged_in, overflow, serve
from tests.daemon.test_device_ops import NO_SCRUB
from tests.drivers.fake_kernel import FakeKernel
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

pytestmark = pytest.mark.slow

# Region 0 (1 GiB, dynamic, 256 MiB available) holds dax0.0 (empty, disabled) and dax0.1-3 (256 MiB
# each, devdax, leasable).
TREE = "sysfs-d-hmem-subdivided"


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, FakeKernel]]:
    kernel = FakeKernel(TREE, tmp_path_factory.mktemp("kernel"))
    with serve(tmp_path_factory, sysfs_root=kernel.root, device_pools={}, **NO_SCRUB) as served:
        served.daemon.app.state.device_admin.dax = DaxControl(kernel)  # writes the fake answers
        yield served, kernel


@pytest.fixture
def devices_page(page: Page, ops: tuple[Served, FakeKernel]) -> Page:
    served = ops[0]
    logged_in(page, served)
    page.goto(f"{served.url}/ui/#/devices")
    page.wait_for_selector('#page-devices tr[data-dax="dax0.3"]')
    return page


def devices(served: Served) -> dict[str, tuple[str, str, int]]:
    """Present devices in the ledger: devname -> (kind, state, size)."""
    return {d["devname"]: (d["kind"], d["state"], d["size"])
            for d in served.api("GET", "/v1/devices").json() if d["state"] != "missing"}


def kernel_devices(served: Served) -> dict[str, dict[str, Any]]:
    topology = served.api("GET", "/v1/topology").json()
    return {d["chardev"].split("/")[-1]: d for d in topology["dax_devices"]}


TOASTS = """(text) => [...document.querySelectorAll("#toasts .toast")]
  .filter((t) => t.textContent.includes(text)).length"""


def confirm(page: Page, button: str, title: str, size: str | None = None, ok: bool = True,
            then: str | None = None) -> str:
    """Click `button`, check the confirmation asks `title`, type `size`, answer, and wait for a
    new toast saying `then`; returns what the confirmation said."""
    before = page.evaluate(TOASTS, then) if then else 0
    page.click(button)
    page.wait_for_selector("#confirm[open]")
    assert page.inner_text("#confirm-title") == title
    body = page.inner_text("#confirm-body")
    assert page.is_visible("#confirm-input") == (size is not None)
    if size is not None:
        page.fill("#confirm-input", size)
    page.click("#confirm-ok" if ok else "#confirm-cancel")
    page.wait_for_selector("#confirm", state="hidden")
    if then:
        page.wait_for_function(f"(text) => ({TOASTS})(text) > {before}", arg=then,
                               timeout=ui_wait_ms())
    return body


def test_create_resize_and_destroy(devices_page: Page, ops: tuple[Served, FakeKernel]) -> None:
    served, _kernel = ops
    page = devices_page
    body = confirm(page, 'tr[data-dax-region="0"] button.create',
                   "New device in dax region 0", size="128MiB", then="dax0.4: create done.")
    assert f"{human(256 * MiB)} available" in body
    assert devices(served)["dax0.4"] == ("devdax", "online", 128 * MiB)
    page.wait_for_selector('tr[data-dax="dax0.4"]')  # the page shows it without a reload
    assert "dax0.4" in page.inner_text('tr[data-dax-region="0"]')

    body = confirm(page, 'tr[data-dax="dax0.4"] button.resize', "Resize dax0.4", size="64 MiB",
                   then="dax0.4: resize done.")
    assert f"Now {human(128 * MiB)}" in body
    assert devices(served)["dax0.4"] == ("devdax", "online", 64 * MiB)
    assert kernel_devices(served)["dax0.4"]["size"] == 64 * MiB

    body = confirm(page, 'tr[data-dax="dax0.4"] button.destroy', "Destroy dax0.4?",
                   then="dax0.4: destroy done.")
    assert f"{human(64 * MiB)} go back to dax region 0" in body
    assert "dax0.4" not in devices(served) and "dax0.4" not in kernel_devices(served)
    page.wait_for_selector('tr[data-dax="dax0.4"]', state="detached")
    region = served.api("GET", "/v1/topology").json()["dax_regions"][0]
    assert region["available_size"] == 256 * MiB


def test_reconfigure_to_system_ram_and_back(devices_page: Page,
                                            ops: tuple[Served, FakeKernel]) -> None:
    served, _kernel = ops
    page = devices_page
    body = confirm(page, 'tr[data-dax="dax0.3"] button.reconfigure',
                   "Reconfigure dax0.3 as system-ram?", then="dax0.3: reconfigure done.")
    assert "CPU-less NUMA node" in body
    assert devices(served)["dax0.3"] == ("system-ram", "online", 256 * MiB)
    assert kernel_devices(served)["dax0.3"]["mode"] == "system-ram"
    page.wait_for_selector('tr[data-dax="dax0.3"] button.reconfigure >> text=To devdax')

    confirm(page, 'tr[data-dax="dax0.3"] button.reconfigure', "Reconfigure dax0.3 as devdax?",
            then="dax0.3: reconfigure done.")
    assert devices(served)["dax0.3"] == ("devdax", "online", 256 * MiB)
    assert kernel_devices(served)["dax0.3"]["mode"] == "devdax"


def test_cancel_refusal_and_typo_change_nothing(devices_page: Page,
                                                ops: tuple[Served, FakeKernel]) -> None:
    served, kernel = ops
    page = devices_page
    before = kernel.snapshot(), devices(served)
    confirm(page, 'tr[data-dax="dax0.2"] button.destroy', "Destroy dax0.2?", ok=False)
    confirm(page, 'tr[data-dax="dax0.2"] button.reconfigure',
            "Reconfigure dax0.2 as system-ram?", ok=False)
    resize = 'tr[data-dax="dax0.1"] button.resize'
    confirm(page, resize, "Resize dax0.1", size="lots", then="Not a size: lots")
    confirm(page, resize, "Resize dax0.1", size="768MiB", then="resize dax0.1 refused: RegionFull")
    confirm(page, 'tr[data-dax="dax0.0"] button.destroy', "Destroy dax0.0?",
            then="destroy dax0.0 refused: DeviceBusy")
    assert (kernel.snapshot(), devices(served)) == before
    assert not [w for w in kernel.writes if "dax0.2" in w[0]]  # the cancelled ones wrote nothing


@pytest.mark.parametrize("size", LAPTOPS, ids=lambda s: f"{s['width']}x{s['height']}")
def test_the_devices_page_with_its_actions_fits_a_laptop_screen(
        devices_page: Page, size: ViewportSize) -> None:
    devices_page.set_viewport_size(size)
    devices_page.wait_for_selector('tr[data-dax-region="0"] button.create')
    assert overflow(devices_page) == []
