"""The API tests' administered daemon (`served`: tests.api.admin_served); a module that needs
another kind of daemon defines its own `served`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from poold.types import MiB
from tests.api.admin_served import Served
from tests.daemon_fixtures import serving_daemon


@pytest.fixture
def served(tmp_path: Path, ledger_url: str) -> Iterator[Served]:
    with serving_daemon(tmp_path, auth="token", database_url=ledger_url,
                        emulate_size=128 * MiB, unscrubbed_pools=["default"]) as (daemon, url):
        s = Served(daemon, url, tmp_path)
        try:
            yield s
        finally:
            s.admin.close()
