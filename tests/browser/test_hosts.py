"""The hosts page with more than the serving host: a live second host sharing the emulated
device, whose heartbeat age stays fresh as it beats, and a host silent for an hour that the
serving daemon declared lost; each with its state, heartbeat age, claims and leases."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from poold.types import MiB
from tests.browser.conftest import HOST_ID, Cluster, human, logged_in
from tests.browser.peers import BEAT_S
from tests.timing import UI_POLL_S, tolerance, ui_wait_ms

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

# The heartbeat age a live host shows: it beats every second (the served daemon more often), the
# page shows the age the daemon answered at its last poll; a loaded machine delays both.
FRESH_S = tolerance(BEAT_S, UI_POLL_S)


def cells(page: Page, host: str) -> list[str]:
    texts: list[str] = page.eval_on_selector_all(
        f'#hosts tr[data-host="{host}"] td', "tds => tds.map((td) => td.innerText.trim())")
    return texts


def heartbeat_s(text: str) -> int:
    """"3 s ago", "2 min 5 s ago", "1 h 0 min ago" -> seconds (to the unit shown)."""
    units = {"d": 86400, "h": 3600, "min": 60, "s": 1}
    parts = re.findall(r"(\d+) (d|h|min|s)\b", text)
    assert parts and text.endswith(" ago"), text
    return sum(int(n) * units[unit] for n, unit in parts)


def test_a_second_host_and_a_lost_host(page: Page, cluster: Cluster) -> None:
    served = cluster.served
    admin_page = logged_in(page, served)
    cluster.peer.grant(6 * MiB, tenant="team-b")
    hosts = {h["id"]: h for h in served.api("GET", "/v1/hosts").json()}
    assert hosts["host-gone"]["state"] == "lost", hosts["host-gone"]  # the daemon's tick did it
    assert hosts["host-b"]["state"] == "up"
    admin_page.goto(f"{served.url}/ui/#/hosts")
    admin_page.wait_for_function(
        "() => document.querySelector('#hosts tr[data-host=\"host-b\"]')?.innerText"
        ".includes('6 MiB')", timeout=ui_wait_ms())

    # Columns: Host, State, Heartbeat, Registered, Claims, Claimed, Leases, Leased, ...
    peer = cells(admin_page, "host-b")
    assert peer[0].startswith("host-b") and peer[1] == "up"
    assert heartbeat_s(peer[2]) <= FRESH_S
    b = next(h for h in served.api("GET", "/v1/hosts").json() if h["id"] == "host-b")
    assert peer[4:8] == [str(b["claims"]), human(b["claimed_bytes"]), "1", human(6 * MiB)]
    assert "not this host" in peer[11]  # only the serving host measures its memory

    gone = cells(admin_page, "host-gone")
    assert gone[1] == "lost"
    assert 3600 <= heartbeat_s(gone[2]) < 3700
    assert gone[4:8] == ["0", "0 B", "0", "0 B"]  # what it held was adopted
    late = admin_page.eval_on_selector('#hosts tr[data-host="host-gone"] td:nth-child(3)',
                                       "td => td.classList.contains('state-late')")
    assert late, "a silent host's heartbeat is not marked late"
    badge = admin_page.eval_on_selector('#hosts tr[data-host="host-gone"] .state',
                                        "el => el.className")
    assert "lost" in badge

    serving = cells(admin_page, HOST_ID)
    assert serving[1] == "up" and heartbeat_s(serving[2]) <= FRESH_S and " of " in serving[8]

    # Live: the peer keeps beating, so its age stays small while the page refreshes itself.
    admin_page.wait_for_timeout(2500)
    assert heartbeat_s(cells(admin_page, "host-b")[2]) <= FRESH_S
    assert cells(admin_page, "host-gone")[1] == "lost"
