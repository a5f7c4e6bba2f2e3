"""What the API asks of the daemon about leases whose bytes are memory objects of its own.

A lease on an emulated or system-ram device is a memfd of the daemon that granted it
(poold.daemon.leasemem), not a stretch of a chardev: the grant makes it (`create`), and where an
admin maps it (`where`: /proc/<pid>/fd/<n>) is known to that daemon alone, so the API fills a
lease's map_path in from it (`located`). The daemon puts its implementation on
`app.state.lease_memory`; an app without one (tests of other routes) reports none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from fastapi import Request

from poold.ledger.views import LeaseView
from poold.types import DeviceKind


class LeaseMemory(Protocol):
    def create(self, lease_id: str, length: int) -> None:
        """The memory of an emulated lease just granted here (idempotent). Raises NoCapacity
        when there is none to make it of."""

    def where(self, lease_id: str) -> str | None:
        """The path the lease's memory is mapped by (offset 0), while this daemon holds it."""


def memory_of(request: Request) -> LeaseMemory | None:
    found: LeaseMemory | None = getattr(request.app.state, "lease_memory", None)
    return found


def located(memory: LeaseMemory | None, view: LeaseView) -> LeaseView:
    """The view with its map_path, where this daemon holds the lease's memory."""
    if memory is None or view.kind == DeviceKind.DEVDAX:
        return view
    path = memory.where(view.id)
    return view if path is None else replace(view, map_path=path)
