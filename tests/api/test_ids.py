"""Ids and text are validated at the edge, on both databases: a NUL byte or garbage in a path, a
query or a body is a 422 (or a 404) in the one error shape, and never reaches the ledger writer.

Once, on PostgreSQL, `POST /v1/leases/x%00/keepalive` answered 503 and made the writer drop its
connection and replay its batch one command at a time: eight clients doing that cut another
client's rate from 143 to 35 grant+release pairs a second.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.types import MiB
from tests.daemon_fixtures import serving_daemon
from tests.timing import patience, until

BAD_REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/leases/x%00/keepalive", {}),
    ("POST", "/v1/leases/" + "a" * 31 + "%00/keepalive", {}),
    ("DELETE", "/v1/leases/%00", {}),
    ("GET", "/v1/leases/not-a-lease-id", {}),
    ("POST", "/v1/leases/" + "A" * 32 + "/revoke", {}),
    ("GET", "/v1/leases?pool=%00", {}),
    ("GET", "/v1/leases?tenant=a%00b", {}),
    ("GET", "/v1/leases?host=%01", {}),
    ("GET", "/v1/events?lease_id=%00", {}),
    ("GET", "/v1/events?kind=lease%00", {}),
    ("GET", "/v1/hosts/a%00", {}),
    ("DELETE", "/v1/tokens/%00", {}),
    ("POST", "/v1/leases", {"json": {"size": MiB, "labels": {"k": "\u0000"}}}),
    ("POST", "/v1/leases", {"json": {"size": MiB, "labels": {"\u0000": "v"}}}),
    ("POST", "/v1/leases", {"json": {"size": MiB, "idempotency_key": "k\u0000"}}),
    ("POST", "/v1/leases", {"json": {"size": MiB, "pool": "default\u0000"}}),
    ("POST", "/v1/leases", {"json": {"size": MiB, "device": "emu0\u0000"}}),
    ("POST", "/v1/tokens", {"json": {"name": "a\u0000", "role": "admin"}}),
]


@pytest.fixture
def url(tmp_path: Path, ledger_url: str) -> Iterator[str]:
    with serving_daemon(tmp_path, database_url=ledger_url) as (_daemon, base_url):
        yield base_url


def _test_id(method: str, path: str, kwargs: dict[str, Any]) -> str:
    """Letters, digits and _ only: an id with a NUL escape, %, ? or / in it cannot be named on
    pytest's command line (mutation testing names each test it runs)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", f"{method} {path} {kwargs}").strip("_")


@pytest.mark.parametrize(("method", "path", "kwargs"), BAD_REQUESTS,
                         ids=[_test_id(m, p, k) for m, p, k in BAD_REQUESTS])
def test_bad_ids_and_text_are_refused_at_the_edge(url: str, method: str, path: str,
                                                  kwargs: dict[str, Any]) -> None:
    answer = httpx.request(method, f"{url}{path}", **kwargs)
    assert answer.status_code in (404, 422), answer.text
    assert answer.json()["error"] in ("ValidationError", "UnknownLease", "NotFound")


def test_bad_ids_never_disturb_the_writer_or_other_clients(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    refused: list[int] = []

    def attacker() -> None:
        with httpx.Client(base_url=url) as client:
            while not stop.is_set():
                refused.append(client.post("/v1/leases/x%00/keepalive").status_code)

    with caplog.at_level(logging.INFO, logger="poold.ledger"):
        attackers = [threading.Thread(target=attacker) for _ in range(8)]
        for thread in attackers:
            thread.start()
        try:
            until("the attack is under way", lambda: refused, patience())
            before = len(refused)
            with httpx.Client(base_url=url) as client:
                for _ in range(50):  # a well-behaved client's grant+release pairs, all served
                    granted = client.post("/v1/leases", json={"size": 2 * MiB})
                    assert granted.status_code == 201, granted.text
                    released = client.delete(f"/v1/leases/{granted.json()['id']}")
                    assert released.status_code == 200, released.text
            assert len(refused) > before  # ... while it went on
        finally:
            stop.set()
            for thread in attackers:
                thread.join(30)
    assert refused and set(refused) == {404}  # UnknownLease, answered at the edge
    writer = [r.getMessage() for r in caplog.records if r.name == "poold.ledger.writer"]
    assert writer == [], writer  # no failed batch, no replay, no reconnect
