"""What the API asks of the daemon about leases whose memory is an object of its own.

A lease on an emulated or system-ram device is a memfd of the daemon that granted it, and one on
a region carved per lease a dax device made for it (poold.daemon.backing): the grant makes it
(`make`), and where an admin maps it (`where`: /proc/<pid>/fd/<n>, /dev/daxN.M) is known to that
daemon alone, so the API fills a lease's map_path in from it (`located`). The daemon puts its
implementation on `app.state.lease_backing`; an app without one (tests of other routes) reports
none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from fastapi import Request

from poold.ledger.views import LeaseView
from poold.types import DeviceKind

# Kinds whose leases are made at grant (and how long that takes: a memfd, or sysfs writes).
MADE_INLINE = (DeviceKind.EMULATED,)
MADE_IN_A_THREAD = (DeviceKind.DAX_REGION,)


class LeaseBacking(Protocol):
    def make(self, view: LeaseView) -> None:
        """The memory of a lease just granted here (idempotent). Raises a PooldError when it
        cannot be made (NoCapacity when there is none to make it of)."""

    def where(self, view: LeaseView) -> str | None:
        """The path the lease's memory is mapped by (offset 0), while this daemon holds it."""


def backing_of(request: Request) -> LeaseBacking | None:
    found: LeaseBacking | None = getattr(request.app.state, "lease_backing", None)
    return found


def located(backing: LeaseBacking | None, view: LeaseView) -> LeaseView:
    """The view with its map_path, where this daemon holds the lease's memory."""
    if backing is None or view.kind == DeviceKind.DEVDAX:
        return view
    path = backing.where(view)
    return view if path is None else replace(view, map_path=path)
