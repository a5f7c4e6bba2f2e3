"""pytest plugin (`-p poold_swap`) for LMCache's own L2 adapter tests, run unmodified: the one
thing changed is the adapter they build. Where a test module makes `MockL2Adapter(config)`, or
LMCache's registry builds the "mock" type, a PooldL2Adapter on the real daemon is made instead,
with the mock's `max_size_gb` as its budget (rounded up to whole 2 MiB leases). After each test,
the tenant must hold no lease: the adapter gave back everything it took."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from engine_daemon import held
from lmcache.v1.distributed.l2_adapters import factory
from poold_env import GiB, adapter


def from_mock_config(config: object, l1_memory_desc: object = None) -> object:
    return adapter(int(getattr(config, "max_size_gb") * GiB))  # noqa: B009 (the mock's field)


@pytest.fixture(autouse=True)
def poold_backend(request: pytest.FixtureRequest,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if hasattr(request.module, "MockL2Adapter"):
        monkeypatch.setattr(request.module, "MockL2Adapter", from_mock_config)
    factory.ensure_adapter_loaded("mock")
    monkeypatch.setitem(factory._L2_ADAPTER_FACTORY_REGISTRY, "mock", from_mock_config)
    yield
    left = held("a")
    assert not left, f"the adapter left leases behind: {left}"
