"""The UI's files: served at /ui without a token, shipped in the package, nothing from the
internet; and the capacity summary the overview draws."""

from __future__ import annotations

import re
from importlib.resources import files

import httpx
from hypothesis import given
from hypothesis import strategies as st

from api.ui.router import STATIC
from poold.ledger.capacity import split
from poold.types import MiB
from tests.browser.conftest import Served

# Every file of the UI: the page, its stylesheet and icon, and its ES modules (no build step).
ASSETS = tuple(sorted(p.name for p in STATIC.iterdir() if p.is_file()))


def test_assets_are_package_data() -> None:
    packaged = files("api.ui") / "static"
    for name in ASSETS:
        assert (packaged / name).is_file(), name


def test_every_module_imported_is_one_of_the_assets() -> None:
    """The modules import each other by relative path: each one named must ship beside them."""
    assert {"index.html", "app.js", "app.css", "favicon.svg"} <= set(ASSETS)
    for name in (n for n in ASSETS if n.endswith(".js")):
        imported = re.findall(r'\bfrom "\./([\w.-]+)"', (STATIC / name).read_text())
        assert set(imported) <= set(ASSETS), f"{name} imports {set(imported) - set(ASSETS)}"


def test_nothing_is_loaded_from_the_internet() -> None:
    for name in ASSETS:
        text = (STATIC / name).read_text()
        # The SVG names its XML namespace; that is not a request.
        urls = [u for u in re.findall(r"https?://[^\s\"')]+", text)
                if u != "http://www.w3.org/2000/svg"]
        assert not urls, f"{name} refers to {urls}"


def test_the_page_and_assets_are_served_without_a_token(served: Served) -> None:
    page = httpx.get(f"{served.url}/ui", follow_redirects=True)
    assert page.status_code == 200
    assert page.url.path == "/ui/"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name in ASSETS:
        asset = httpx.get(f"{served.url}/ui/static/{name}")
        assert asset.status_code == 200, name
        assert asset.headers["x-content-type-options"] == "nosniff"
        if name.endswith(".js"):  # a module script is refused with any other type
            assert asset.headers["content-type"].startswith("text/javascript"), name
    assert httpx.get(f"{served.url}/ui/static/nosuchfile.js").status_code == 404


def test_capacity_needs_a_token(served: Served) -> None:
    assert httpx.get(f"{served.url}/v1/capacity").status_code == 401


def test_capacity_splits_every_device(served: Served) -> None:
    lease = served.grant(4 * MiB)
    found = served.api("GET", "/v1/capacity").json()
    devices = {d["devname"]: d for d in found["devices"]}
    emu = devices["emu0"]["bytes"]
    assert emu["leased"] >= 4 * MiB
    for device in found["devices"]:
        b = device["bytes"]
        assert b["leased"] + b["scrubbing"] + b["idle"] + b["free"] + b["draining"] == b["size"]
    pool = next(p for p in found["pools"] if p["name"] == devices["emu0"]["pool"])
    assert pool["bytes"]["size"] == sum(d["bytes"]["size"] for d in found["devices"]
                                        if d["pool"] == pool["name"] and d["state"] != "missing")
    served.api("DELETE", f"/v1/leases/{lease['id']}")


sizes = st.integers(min_value=0, max_value=2**40)


@given(size=sizes, claimed=sizes, leased=sizes, scrubbing=sizes, draining=st.booleans())
def test_split_adds_up_and_is_never_negative(size: int, claimed: int, leased: int,
                                             scrubbing: int, draining: bool) -> None:
    s = split(size, claimed, leased, scrubbing, draining)
    parts = (s.leased, s.scrubbing, s.idle, s.free, s.draining)
    assert sum(parts) == size and min(parts) >= 0
    if draining:
        assert s.idle == s.free == 0


def test_split_of_a_consistent_device() -> None:
    s = split(100, claimed=60, leased=30, scrubbing=10, draining=False)
    assert (s.leased, s.scrubbing, s.idle, s.free, s.draining) == (30, 10, 20, 40, 0)
    d = split(100, claimed=60, leased=30, scrubbing=10, draining=True)
    assert (d.leased, d.scrubbing, d.idle, d.free, d.draining) == (30, 10, 0, 0, 60)
