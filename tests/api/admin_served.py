"""A daemon with tokens on, administered through the API as an operator would (the pools and
placement-rules tests): its admin client, tenant clients, and a check that a refused request
left every ledger row as it was (the `served` fixture, in conftest.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from poold.daemon import Daemon
from poold.models import Base


def ledger_rows(session: Session, _now: datetime) -> dict[str, list[tuple[Any, ...]]]:
    """Every row, every column, of every ledger table (but the host's heartbeat, which the
    daemon writes on its own every tick)."""
    found = {}
    for table in Base.metadata.sorted_tables:
        columns = [c for c in table.columns if c.name != "last_seen_at"]
        found[table.name] = [tuple(row) for row in session.execute(
            select(*columns).order_by(*table.primary_key))]
    return found


class Served:
    def __init__(self, daemon: Daemon, url: str, state: Path) -> None:
        self.daemon = daemon
        self.admin = httpx.Client(base_url=url, timeout=30, headers={
            "Authorization": f"Bearer {(state / 'admin.token').read_text().strip()}"})
        self.url = url

    def tenant(self, name: str) -> httpx.Client:
        made = self.admin.post("/v1/tokens", json={"name": name, "role": "tenant",
                                                   "tenant": name})
        assert made.status_code == 201, made.text
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {made.json()['bearer']}"})

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        return self.daemon.ledger.read(ledger_rows)

    def refused(self, status: int, error: str, method: str, path: str,
                client: httpx.Client | None = None, **kwargs: Any) -> str:
        """Send a request that must be refused with `status`/`error`, leaving every ledger row
        as it was; returns the detail."""
        before = self.rows()
        answer = (client or self.admin).request(method, path, **kwargs)
        assert (answer.status_code, answer.json()["error"]) == (status, error), answer.text
        assert self.rows() == before
        return str(answer.json()["detail"])
