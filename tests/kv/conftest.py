"""A real daemon (emulated 64 MiB device in the test's tmp dir) per test module, a client per
test, and helpers to make keys and blocks. Each test must give back every lease it took."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from poold.client import PooldClient
from poold.kv import prefix_keys
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon

DEVICE_BYTES = 64 * MiB


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("kv-daemon")
    # Unscrubbed: the lease-loss tests read a lost lease's bytes afterwards, to prove the store
    # never wrote them again; zeroing would erase that evidence (tests/daemon/test_scrub.py
    # covers scrubbing).
    with serving_daemon(path, emulate_size=DEVICE_BYTES,
                        unscrubbed_pools=["default"]) as (_daemon, url):
        yield url


@pytest.fixture
def client(daemon_url: str) -> Iterator[PooldClient]:
    with PooldClient(daemon_url) as c:
        yield c
        leaked = [x.id for x in c.leases() if x.state == "active"]
        assert not leaked, f"test left leases behind: {leaked}"


def make_keys(count: int, tag: int = 0) -> list[bytes]:
    """`count` chained keys of one sequence; different tags give unrelated sequences."""
    tokens = [tag * 1_000_003 + i for i in range(count * 4)]
    return prefix_keys(tokens, 4)


def make_blocks(count: int, block_size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(count * block_size)


def block(data: bytes, i: int, block_size: int) -> bytes:
    return data[i * block_size:(i + 1) * block_size]
