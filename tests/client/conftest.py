"""The SDK's tests' daemon: a real one on each database (`url`), and a client of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from poold.client import PooldClient
from tests.daemon_fixtures import serving_daemon

REAP_INTERVAL_S = 0.2


@pytest.fixture
def url(tmp_path: Path, ledger_url: str) -> Iterator[str]:
    """A real daemon on each database."""
    with serving_daemon(tmp_path, database_url=ledger_url,
                        reap_interval_s=REAP_INTERVAL_S) as (_daemon, base_url):
        yield base_url


@pytest.fixture
def client(url: str) -> Iterator[PooldClient]:
    with PooldClient(url) as c:
        yield c
