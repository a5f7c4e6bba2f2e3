"""A real daemon (emulated 64 MiB device) per module and a client per test, as for poold.kv;
each test must give back every lease it took."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from poold.client import PooldClient
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving_daemon(tmp_path_factory.mktemp("objects-daemon"), emulate_size=64 * MiB,
                        unscrubbed_pools=["default"]) as (_daemon, url):
        yield url


@pytest.fixture
def client(daemon_url: str) -> Iterator[PooldClient]:
    with PooldClient(daemon_url) as c:
        yield c
        leaked = [x.id for x in c.leases() if x.state == "active"]
        assert not leaked, f"test left leases behind: {leaked}"
