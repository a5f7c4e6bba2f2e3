"""The CLI tests' daemon: a real `poold serve` process with tokens on, on each database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.served import POOLD, Daemon
from tests.daemon_fixtures import serve_process


@pytest.fixture
def daemon(tmp_path: Path, ledger_url: str) -> Iterator[Daemon]:
    assert POOLD.is_file(), f"{POOLD}: install poold into this environment (pip install -e .)"
    with serve_process(tmp_path, lambda port: httpx.get(
            f"http://127.0.0.1:{port}/readyz").status_code == 200,
            auth="token", database_url=ledger_url) as port:
        yield Daemon(port, tmp_path / "s")
