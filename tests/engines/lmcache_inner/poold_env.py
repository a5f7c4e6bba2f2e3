"""What the outer test (tests/engines/test_lmcache.py) tells the engine's venv: where the real
daemon it started is, and the tenants' tokens. Adapters made here lease from that daemon."""

from __future__ import annotations

import math

from engine_daemon import fd_socket, token, uds

from poold.integrations.lmcache import PooldL2Adapter, PooldL2AdapterConfig

MiB = 1 << 20
GiB = 1 << 30
LEASE = 2 * MiB  # the emulated device's alignment: the smallest lease


def params(tenant: str = "a", **overrides: object) -> dict[str, object]:
    """adapter_params as an operator writes them for `--l2-adapter`."""
    return {"uds": uds(), "fd_socket": fd_socket(),
            "token": token(tenant), "budget_bytes": 8 * MiB, "lease_bytes": LEASE,
            "block_bytes": 16 * 1024, "idle_release_s": 0.5, **overrides}


def adapter(budget_bytes: int, tenant: str = "a", **overrides: object) -> PooldL2Adapter:
    budget = max(LEASE, math.ceil(budget_bytes / LEASE) * LEASE)
    return PooldL2Adapter(PooldL2AdapterConfig.from_dict(
        params(tenant, budget_bytes=budget, **overrides)))
