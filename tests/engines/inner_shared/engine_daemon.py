"""What every check inside an engine's venv knows of the daemon the outer test started
(tests/engines/conftest.py tells it through the environment): its sockets, each tenant's token,
what a tenant holds, revoking a lease as the admin; and, imported into a check module, that no
check leaves a lease behind."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from poold.client import PooldClient


def uds() -> str:
    return os.environ["POOLD_ENGINE_UDS"]


def fd_socket() -> str:
    return os.environ["POOLD_ENGINE_FD"]


def token(tenant: str = "a") -> str:
    """Tenants "a" and "b", and "admin"."""
    return os.environ[f"POOLD_ENGINE_TOKEN_{tenant.upper()}"]


def held(tenant: str) -> list[str]:
    """The ids of the tenant's active leases."""
    with PooldClient(uds=uds(), token=token(tenant)) as c:
        return [x.id for x in c.leases() if x.state == "active"]


def revoke(lease_id: str) -> None:
    with PooldClient(uds=uds(), token=token("admin")) as c:
        c.raw("POST", f"/v1/leases/{lease_id}/revoke")


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    assert held("a") == [] and held("b") == []
