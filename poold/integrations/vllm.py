"""PooldSecondaryTier: poold as a secondary tier of vLLM's tiered KV offloading (vLLM 0.33.0).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8589934592,
        "secondary_tiers": [{"type": "PooldSecondaryTier",
                             "module_path": "poold.integrations.vllm",
                             "uds": "/run/poold/api.sock", "fd_socket": "/run/poold/fd.sock",
                             "budget_bytes": 68719476736}]}}'

vLLM's CPU tier keeps KV in a buffer of rows (one offload chunk each); a secondary tier moves
rows between that buffer and its own store. This one stores each row as an object of poold.kv
blocks in leased memory: the keys are vLLM's offload keys (block hash and group), the rest of the
tier entry is TierSettings (`block_bytes` defaults to one row). vLLM calls the tier from its
scheduler and must never wait on it: stores and loads are queued to one worker thread that
copies the rows, and their results are handed back by get_finished_jobs. A lost lease is lost
chunks: lookups miss and loads fail for those keys, and no row is ever filled with bytes the tier
no longer holds. A request that names its session (`"kv_transfer_params": {"poold_session":
"<conversation id>"}`, an agent framework's per-conversation id) holds the chunks it stored or
touched for that session: they are evicted last, across the gaps between its requests.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    RequestOffloadingContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

from poold.integrations.objects import Put
from poold.integrations.settings import SESSION_FIELD, TierSettings
from poold.kv.buffers import bytes_view

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadKey, ReqContext
    from vllm.v1.kv_offload.tiering.base import TransferJob

log = logging.getLogger(__name__)


class PooldSecondaryTier(SecondaryTierManager):
    medium: ClassVar[Medium] = Medium.CPU  # leased DRAM or CXL memory, mapped: host memory

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None, locality: str | None = None,
                 **params: Any) -> None:
        super().__init__(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                         tier_type=tier_type, backpressure_detector=backpressure_detector)
        self.locality = Locality(locality) if locality is not None else None
        row = self.block_size_bytes
        settings = TierSettings.from_dict({"block_bytes": row, **params})
        self._rows = bytes_view(primary_kv_view)
        self._row = row
        self.objects = settings.open(labels={"engine": "vllm", "tier": tier_type})
        self._lock = threading.Lock()
        self._finished: list[JobResult] = []
        self._storing: dict[bytes, int] = {}  # keys of queued or running stores: RETRY
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="poold-vllm", daemon=True)
        self._worker.start()

    def _view(self, chunk_id: int) -> memoryview:
        start = int(chunk_id) * self._row
        return self._rows[start:start + self._row]

    # -- the scheduler's calls: none waits on a copy -------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        raw = bytes(key)
        with self._lock:
            if raw in self._storing:
                return LookupResult.RETRY
        return LookupResult.HIT if self.objects.sizes([raw])[0] is not None \
            else LookupResult.MISS

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys = [bytes(k) for k in job_metadata.keys]
        with self._lock:
            for k in keys:
                self._storing[k] = self._storing.get(k, 0) + 1
        self._tasks.put(lambda: self._store(job_metadata, keys))

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._tasks.put(lambda: self._load(job_metadata))

    def get_finished_jobs(self) -> Iterable[JobResult]:
        with self._lock:
            done, self._finished = self._finished, []
        return done

    def has_pending_work(self) -> bool:
        return self._tasks.unfinished_tasks > 0

    def drain_jobs(self) -> None:
        self._tasks.join()

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        """poold.kv's LRU-K counts the loads themselves; a request of a session holds what it
        touched for that session (on the worker: the scheduler never waits)."""
        session = session_of(req_context)
        if session is not None:
            raws = [bytes(k) for k in keys]
            self._tasks.put(lambda: self._hold(session, raws))

    def shutdown(self) -> None:
        """Finish what is queued, then release every lease. Idempotent."""
        if self._worker.is_alive():
            self._tasks.put(None)
            self._worker.join()
        self.objects.close()

    # -- the worker ----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                if task is None:
                    return
                task()
            except Exception:  # a job's failure is its own: it was reported failed
                log.exception("vllm.job_failed")
            finally:
                self._tasks.task_done()

    def _finish(self, result: JobResult) -> None:
        with self._lock:
            self._finished.append(result)

    def _hold(self, session: str, keys: list[bytes]) -> None:
        self.objects.hold(session, keys)

    def _store(self, job: TransferJob, keys: list[bytes]) -> None:
        started = time.perf_counter()
        try:
            outcome = self.objects.put_many(keys, [self._view(c) for c in job.chunk_ids],
                                            session=session_of(job.req_context))
            ok = all(put is not Put.REFUSED for put in outcome)
            moved = self._row * sum(put is Put.STORED for put in outcome)
        except Exception:
            log.exception("vllm.store_failed job=%s", job.job_id)
            ok, moved = False, 0
        finally:
            with self._lock:
                for k in keys:
                    left = self._storing.pop(k) - 1
                    if left:
                        self._storing[k] = left
        self._finish(JobResult(job_id=job.job_id, success=ok,
                               transfer_time=time.perf_counter() - started,
                               transfer_bytes=moved))

    def _load(self, job: TransferJob) -> None:
        started = time.perf_counter()
        keys = list(job.keys)
        try:
            hits = self.objects.get_many_into([bytes(k) for k in keys],
                                              [self._view(c) for c in job.chunk_ids])
        except Exception:
            log.exception("vllm.load_failed job=%s", job.job_id)
            hits = [False] * len(keys)
        ok = all(hits)
        self._finish(JobResult(
            job_id=job.job_id, success=ok,
            successful_keys=None if ok else [k for k, hit in zip(keys, hits, strict=True)
                                             if hit],
            transfer_time=time.perf_counter() - started,
            transfer_bytes=self._row * sum(hits)))


def session_of(req_context: ReqContext | None) -> str | None:
    """The session the request says it belongs to: `poold_session` in its kv_transfer_params
    (an agent framework sets it per conversation), else None."""
    params = getattr(req_context, "kv_transfer_params", None) or {}
    value = params.get(SESSION_FIELD) if isinstance(params, dict) else None
    return value if isinstance(value, str) and value else None
