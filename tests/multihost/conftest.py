"""Fixtures of the multi-host tests: the shared file several hosts map, and hosts stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.multihost.hosts import Host


@pytest.fixture
def shared_file(tmp_path: Path) -> Path:
    return Path("/dev/shm") / f"poold-test-{tmp_path.name}-shared" if Path(
        "/dev/shm").is_dir() else tmp_path / "shared"


@pytest.fixture
def cleanup(shared_file: Path) -> Iterator[list[Host]]:
    hosts: list[Host] = []
    yield hosts
    for host in hosts:
        host.stop()
    shared_file.unlink(missing_ok=True)
