"""pytest plugin (`-p poold_swap`) for LMCache's own tests, run unmodified: the one thing changed
is the tier they build. Where a test module makes `MockL2Adapter(config)`, or LMCache's registry
builds the "mock" type, a PooldL2Adapter on the real daemon is made instead, with the mock's
`max_size_gb` as its budget; where it makes `DaxBackend(config, ...)` (its storage plugin on a
DAX device), a PooldBackend, with `dax.max_dax_size` as its budget (both rounded up to whole
2 MiB leases). After each test, the tenant must hold no lease: the tier gave back everything it
took."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from engine_daemon import held
from lmcache.v1.distributed.l2_adapters import factory
from poold_env import LEASE, GiB, adapter, params

from poold.integrations.lmcache import PooldBackend


def from_mock_config(config: object, l1_memory_desc: object = None) -> object:
    return adapter(int(getattr(config, "max_size_gb") * GiB))  # noqa: B009 (the mock's field)


def from_dax_config(config: Any, metadata: object = None, local_cpu_backend: object = None,
                    loop: object = None, dst_device: str = "cpu") -> PooldBackend:
    """DaxBackend's constructor, building poold's plugin from the same LMCache config: the
    `poold.*` keys an operator would write, with the DAX arena's size as the budget."""
    extra = dict(config.extra_config or {})
    arena = float(extra.get("dax.max_dax_size", 0)) * GiB
    budget = max(LEASE, math.ceil(arena / LEASE) * LEASE)
    config.extra_config = {**extra, **{f"poold.{k}": v
                                       for k, v in params(budget_bytes=budget).items()}}
    return PooldBackend(dst_device=dst_device, config=config, metadata=metadata,
                        local_cpu_backend=local_cpu_backend, loop=loop)


@pytest.fixture(autouse=True)
def poold_backend(request: pytest.FixtureRequest,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if hasattr(request.module, "DaxBackend"):
        monkeypatch.setattr(request.module, "DaxBackend", from_dax_config)
    if hasattr(request.module, "MockL2Adapter"):
        monkeypatch.setattr(request.module, "MockL2Adapter", from_mock_config)
    factory.ensure_adapter_loaded("mock")
    monkeypatch.setitem(factory._L2_ADAPTER_FACTORY_REGISTRY, "mock", from_mock_config)
    yield
    left = held("a")
    assert not left, f"the adapter left leases behind: {left}"
