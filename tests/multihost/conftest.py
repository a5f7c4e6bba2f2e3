"""Fixtures of the multi-host tests: hosts stopped after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multihost.hosts import Host


@pytest.fixture
def cleanup() -> Iterator[list[Host]]:
    hosts: list[Host] = []
    yield hosts
    for host in hosts:
        host.stop()
