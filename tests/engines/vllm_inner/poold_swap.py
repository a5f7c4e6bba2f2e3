"""pytest plugin (`-p poold_swap`) for vLLM's own tiering tests, run unmodified: the one thing
changed is the secondary tier they build. Where a test module makes an
`ExampleSecondaryTierManager`, a poold tier on the real daemon (tenant a) is made instead:

- `PooldSecondaryTier` itself (rows stored as poold.kv objects in leased memory), with
- what the tests use of the example tier: its constructor's arguments, `chunks` (the keys it
  holds; the tests put a key there to say "this tier has it", which here stores a row of zeros
  under that key in poold), `completed_jobs` (finished jobs not polled yet) and
  `get_num_chunks`; and
- the example tier's promise that a job is finished when its submit_* call returns (the tests
  poll once, right after): each submit waits for poold's worker. vLLM's scheduler never waits:
  that is the one behaviour the swap changes, and only for these tests.

After each test every tier it made is shut down, and tenant a must hold no lease: the tier gave
back everything it took."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from engine_daemon import fd_socket, held, token, uds
from vllm.v1.kv_offload.base import OffloadKey
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob

from poold.integrations.vllm import PooldSecondaryTier

made: list[PooldExampleTier] = []


class Chunks(MutableMapping[OffloadKey, bool]):
    """The keys a tier holds, as the example tier's `chunks` dict, read from poold."""

    def __init__(self, tier: PooldExampleTier) -> None:
        self._tier = tier
        self._keys: dict[bytes, OffloadKey] = {}  # every key ever seen, to iterate by

    def __contains__(self, key: object) -> bool:
        return self._tier.objects.sizes([bytes(key)])[0] is not None  # type: ignore[arg-type]

    def __getitem__(self, key: OffloadKey) -> bool:
        if key not in self:
            raise KeyError(key)
        return True

    def __setitem__(self, key: OffloadKey, _value: bool) -> None:
        self._keys[bytes(key)] = key
        self._tier.objects.put_many([bytes(key)], [memoryview(bytes(self._tier.row_bytes))])

    def __delitem__(self, key: OffloadKey) -> None:
        if self._tier.objects.delete([bytes(key)])[0] is None:
            raise KeyError(key)

    def __iter__(self) -> Iterator[OffloadKey]:
        return iter([k for k in list(self._keys.values()) if k in self])

    def __len__(self) -> int:
        return len(self._tier.objects)

    def remember(self, keys: list[OffloadKey]) -> None:
        for key in keys:
            self._keys[bytes(key)] = key


class PooldExampleTier(PooldSecondaryTier):
    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 custom_param: int = 0, backpressure_detector: Any = None) -> None:
        row = primary_kv_view.strides[0] if primary_kv_view.strides else primary_kv_view.nbytes
        super().__init__(offloading_spec, primary_kv_view, tier_type,
                         backpressure_detector=backpressure_detector, uds=uds(),
                         fd_socket=fd_socket(), token=token("a"), budget_bytes=8 << 20,
                         lease_bytes=2 << 20)
        self.row_bytes = row
        self.chunks = Chunks(self)
        made.append(self)

    @property
    def completed_jobs(self) -> list[JobResult]:
        """Finished jobs not polled yet: the example tier's list, which tests read and append
        to (a failure of their own making); get_finished_jobs hands them over."""
        return self._finished

    def submit_store(self, job_metadata: TransferJob) -> None:
        self.chunks.remember(list(job_metadata.keys))
        super().submit_store(job_metadata)
        PooldSecondaryTier.drain_jobs(self)  # not self.drain_jobs: tests count their calls

    def submit_load(self, job_metadata: TransferJob) -> None:
        super().submit_load(job_metadata)
        PooldSecondaryTier.drain_jobs(self)

    def get_num_chunks(self) -> int:
        return len(self.chunks)


@pytest.fixture(autouse=True)
def poold_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if hasattr(request.module, "ExampleSecondaryTierManager"):
        monkeypatch.setattr(request.module, "ExampleSecondaryTierManager", PooldExampleTier)
    yield
    while made:
        made.pop().shutdown()
    left = held("a")
    assert not left, f"the tier left leases behind: {left}"
