"""The overview's five-way split against GET /v1/capacity, with every part non-zero at once:
leased (an active lease), scrubbing (a released lease whose scrub is still running), claimed but
idle (the rest of the host's claim around them), free (past the claim) and draining (a drained
dax device), as figures and as bars, per pool and per device; and live as the scrub ends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from poold.daemon import scrub
from poold.ledger.views import ScrubJob
from poold.types import MiB
from tests.browser.conftest import Served, human, log_in, screenshot, serve
from tests.timing import ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

KINDS = ("leased", "scrubbing", "idle", "free", "draining")


def hold_scrubs(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The seams that hold the scrubber: its memset (a devdax extent) and its emptying of a
    lease's memfd (emulated) wait until the returned event is set, as the zeroing of a large
    extent on a slow device would still be running. The lease stays `scrubbing` in the ledger
    meanwhile, which is what the overview must show."""
    go = threading.Event()
    real, real_drop = scrub._memset, scrub.Scrubber._drop

    def held(size: int) -> Callable[[int, int, int], object]:
        zero = real(size)

        def wait_then_zero(address: int, value: int, count: int) -> object:
            go.wait(60)
            return zero(address, value, count)
        return wait_then_zero

    def wait_then_drop(self: scrub.Scrubber, job: ScrubJob) -> None:
        go.wait(60)
        real_drop(self, job)

    monkeypatch.setattr(scrub, "_memset", held)
    monkeypatch.setattr(scrub.Scrubber, "_drop", wait_then_drop)
    return go


@pytest.fixture
def five_way(tmp_path_factory: pytest.TempPathFactory,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Served, threading.Event]]:
    """One pool ("default") of the 64 MiB emulated device and the recorded tree's dax0.0; the host
    claims 16 MiB at a time, so a 4 MiB lease leaves the rest of its claim idle."""
    go = hold_scrubs(monkeypatch)
    with serve(tmp_path_factory, device_pools={}, claim_slice=16 * MiB) as served:
        try:
            yield served, go
        finally:
            go.set()  # before the daemon stops: its scrubber thread must not be left waiting


# Every figure, bar segment and device cell of the overview, read from the page.
SHOWN = """root => {
  const bar = (el) => ({ width: el.clientWidth, segments: Object.fromEntries(
    [...el.children].map((s) => [s.dataset.kind, s.getBoundingClientRect().width])) });
  const pools = [...root.querySelectorAll(".card.pool")].map((card) => ({
    name: card.dataset.pool, bar: bar(card.querySelector(".bar")),
    figures: Object.fromEntries([...card.querySelectorAll(".figure")].map((f) => [f.dataset.kind,
      { bytes: +f.dataset.bytes, text: f.querySelector("b").textContent,
        share: f.querySelector(".share").textContent }])) }));
  const devices = [...root.querySelectorAll("#device-capacity tr[data-device]")].map((tr) => ({
    id: +tr.dataset.device, bar: bar(tr.querySelector(".bar")),
    cells: Object.fromEntries([...tr.querySelectorAll("td[data-kind]")].map((td) => [
      td.dataset.kind, { bytes: +td.dataset.bytes, text: td.textContent }])) }));
  return { pools, devices };
}"""


def shown(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.eval_on_selector("#page-overview", SHOWN)
    return found


def wait_until_shown(page: Page, served: Served) -> tuple[dict[str, Any], dict[str, Any]]:
    """The page and the API agree on every byte figure (the page polls once a second)."""
    page.wait_for_function("""(want) => JSON.stringify([...document.querySelectorAll(
        '#page-overview [data-bytes]')].map((e) => +e.dataset.bytes)) === want""",
                           arg=expected_bytes(served.api("GET", "/v1/capacity").json()),
                           timeout=ui_wait_ms())
    return served.api("GET", "/v1/capacity").json(), shown(page)


def expected_bytes(capacity: dict[str, Any]) -> str:
    """The data-bytes of the page in document order: pool figures, then device cells."""
    order = ("leased", "scrubbing", "idle", "draining", "free")  # the UI's SPLIT order
    values = [p["bytes"][k] for p in capacity["pools"] for k in order]
    values += [d["bytes"][k] for d in capacity["devices"] for k in order]
    return str(values).replace(" ", "")


def assert_bar(bar: dict[str, Any], split: dict[str, int]) -> None:
    """Each drawn part's share of the bar is its share of the bytes; free is what is left."""
    for kind in ("leased", "scrubbing", "idle", "draining"):
        width = bar["segments"].get(kind, 0.0)
        assert abs(width / bar["width"] - split[kind] / split["size"]) < 0.01, (kind, bar, split)
    assert "free" not in bar["segments"]
    drawn = sum(bar["segments"].values()) / bar["width"]
    assert abs((1 - drawn) - split["free"] / split["size"]) < 0.01


def assert_matches(capacity: dict[str, Any], page: dict[str, Any]) -> None:
    pools = {p["name"]: p for p in page["pools"]}
    assert set(pools) == {p["name"] for p in capacity["pools"]}
    for pool in capacity["pools"]:
        card, split = pools[pool["name"]], pool["bytes"]
        for kind in KINDS:
            figure = card["figures"][kind]
            assert figure["bytes"] == split[kind], (pool["name"], kind)
            assert figure["text"] == human(split[kind])
            assert figure["share"] == f"{100 * split[kind] / split['size']:.1f} %"
        assert_bar(card["bar"], split)
    rows = {d["id"]: d for d in page["devices"]}
    assert set(rows) == {d["id"] for d in capacity["devices"]}
    for device in capacity["devices"]:
        row, split = rows[device["id"]], device["bytes"]
        for kind in KINDS:
            assert row["cells"][kind] == {"bytes": split[kind], "text": human(split[kind])}
        assert_bar(row["bar"], split)


def test_every_part_of_the_split_is_shown_as_the_api_counts_it(
        page: Page, five_way: tuple[Served, threading.Event]) -> None:
    served, finish_scrubs = five_way
    served.grant(4 * MiB, tenant="team-a", labels={"model": "llama-70b"})
    released = served.grant(4 * MiB, tenant="team-b")
    assert served.api("DELETE", f"/v1/leases/{released['id']}").json()["state"] == "scrubbing"
    drained = served.api("POST", "/v1/devices/dax0.0/drain")
    assert drained.status_code == 200, drained.text
    log_in(page, served, served.admin_token)
    page.wait_for_selector("#page-overview .card.pool")

    capacity, on_page = wait_until_shown(page, served)
    (pool,) = capacity["pools"]
    assert all(pool["bytes"][kind] > 0 for kind in KINDS), pool["bytes"]  # none vacuous
    devices = {d["devname"]: d["bytes"] for d in capacity["devices"]}
    assert devices["emu0"] == {"size": 64 * MiB, "leased": 4 * MiB, "scrubbing": 4 * MiB,
                               "idle": 8 * MiB, "free": 48 * MiB, "draining": 0}
    assert devices["dax0.0"]["draining"] == devices["dax0.0"]["size"]
    assert_matches(capacity, on_page)
    assert screenshot(page, "overview-split.png").stat().st_size > 0

    # The scrub ends: its bytes go back to the claim (idle), and the page follows unreloaded.
    finish_scrubs.set()
    page.wait_for_selector('.card.pool .figure[data-kind="scrubbing"][data-bytes="0"]',
                           timeout=ui_wait_ms())
    capacity, on_page = wait_until_shown(page, served)
    assert {d["devname"]: d["bytes"] for d in capacity["devices"]}["emu0"]["idle"] == 12 * MiB
    assert_matches(capacity, on_page)


def test_each_pool_shows_its_last_hour(admin_page: Page, served: Served) -> None:
    """The daemon samples every pool (the first sample at start); each pool card draws them."""
    for pool in ("default", "cxl"):
        chart = admin_page.wait_for_selector(f'.card.pool[data-pool="{pool}"] svg.trend')
        assert chart is not None
        assert int(chart.get_attribute("data-samples") or 0) >= 1
        assert "leased" in (chart.get_attribute("aria-label") or "")
    history = served.api("GET", "/v1/capacity/history").json()
    assert set(history["pools"]) == {"default", "cxl"}
