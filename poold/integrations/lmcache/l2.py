"""PooldL2Adapter: an L2 adapter for LMCache's multi-process server (what vLLM's
`--kv-offloading-backend lmcache` starts), storing KV chunks in memory leased from poold.

    lmcache server --l2-adapter '{"type": "plugin",
        "module_path": "poold.integrations.lmcache", "class_name": "PooldL2Adapter",
        "adapter_params": {"uds": "/run/poold/api.sock", "fd_socket": "/run/poold/fd.sock",
                           "budget_bytes": 17179869184, "pool": "cxl"}}'

LMCache finds PooldL2AdapterConfig by its name and builds it from `adapter_params`. The adapter
leases within its budget as chunks arrive, keeps the leases alive, gives back leases that sat
empty, and releases everything on close. A lease lost (expired, revoked, the host fenced) is
lost chunks: lookups and loads miss, LMCache is told they were deleted, and no byte of memory
the adapter no longer holds is read or written (poold.kv checks each lease around its copies).

LMCache calls the adapter from two controller threads and never waits on it: every task is
queued to one worker thread, run in submission order, and announced on its event fd. Deletes
and usage are immediate, as LMCache's eviction controller expects.
"""

from __future__ import annotations

import logging
import queue
import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.platform import create_event_notifier

from poold.integrations.lmcache.views import bytes_of
from poold.integrations.objects import Put
from poold.integrations.settings import TierSettings

if TYPE_CHECKING:
    from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
    from lmcache.v1.memory_management import MemoryObj

log = logging.getLogger(__name__)


class PooldL2AdapterConfig(L2AdapterConfigBase):
    """`adapter_params` as poold.integrations.settings.TierSettings reads them (LMCache finds
    this class by the adapter's name plus "Config")."""

    def __init__(self, settings: TierSettings) -> None:
        self.settings = settings

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PooldL2AdapterConfig:
        return cls(TierSettings.from_dict(d))

    @classmethod
    def help(cls) -> str:
        return ("poold L2 adapter (poold.integrations.lmcache), adapter_params:\n"
                "- budget_bytes (int, required): the most it leases from poold\n"
                "- url (str) or uds (str): the daemon (default http://127.0.0.1:7077)\n"
                "- fd_socket (str): the daemon's fd.sock, to map without device permission\n"
                "- token (str): bearer token (default: $POOLD_TOKEN)\n"
                "- pool (str): the pool to lease from (default: the daemon's)\n"
                "- lease_bytes, block_bytes (int), ttl_s (int), idle_release_s (float)")


def object_key_bytes(key: ObjectKey) -> bytes:
    """Every field of LMCache's key, length-prefixed: equal keys, equal bytes, and no two
    different keys alike (a salt is part of the key, so tenants' chunks never meet)."""
    text = [key.model_name.encode(), key.cache_salt.encode()]
    head = struct.pack("<qqII", key.kv_rank, key.object_group_id, *map(len, text))
    return head + b"".join(text) + bytes(key.chunk_hash)


def _bitmap(flags: list[bool]) -> Bitmap:
    """LMCache's per-key answer: bit i set where key i succeeded."""
    bitmap = Bitmap(len(flags))
    for i, ok in enumerate(flags):
        if ok:
            bitmap.set(i)
    return bitmap


class PooldL2Adapter(L2AdapterInterface):
    def __init__(self, config: PooldL2AdapterConfig, l1_memory_desc: object = None) -> None:
        super().__init__(max_capacity_bytes=config.settings.budget_bytes)
        self.objects = config.settings.open(labels={"engine": "lmcache", "tier": "l2"})
        self._store_efd = create_event_notifier()
        self._lookup_efd = create_event_notifier()
        self._load_efd = create_event_notifier()
        self._lock = threading.Lock()
        self._closed = False
        self._next_id = 0
        self._stored: dict[int, L2StoreResult] = {}
        self._looked_up: dict[int, Bitmap] = {}
        self._loaded: dict[int, Bitmap] = {}
        self._keys: dict[bytes, ObjectKey] = {}  # what gone() reports back, as LMCache keys
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="poold-lmcache", daemon=True)
        self._worker.start()

    # -- event fds -----------------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return int(self._store_efd.fileno())

    def get_lookup_and_lock_event_fd(self) -> int:
        return int(self._lookup_efd.fileno())

    def get_load_event_fd(self) -> int:
        return int(self._load_efd.fileno())

    # -- tasks ---------------------------------------------------------------------------------

    def _submit(self, run: Callable[[int], None]) -> int:
        with self._lock:
            task_id, self._next_id = self._next_id, self._next_id + 1
        self._tasks.put(lambda: run(task_id))
        return task_id

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except Exception:  # a task's failure is its own; the worker goes on
                log.exception("lmcache.task_failed")
            self._report_gone()

    def submit_store_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> int:
        if len(keys) != len(objects):
            raise ValueError(f"{len(objects)} objects for {len(keys)} keys")
        return self._submit(lambda task_id: self._store(task_id, keys, objects))

    def _store(self, task_id: int, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        raw = [object_key_bytes(k) for k in keys]
        try:
            outcome = self.objects.put_many(raw, [bytes_of(o) for o in objects])
            new = [i for i, put in enumerate(outcome) if put is Put.STORED]
            result = L2StoreResult(True, sum(objects[i].get_size() for i in new))
        except Exception:
            log.exception("lmcache.store_failed keys=%d", len(keys))
            new, result = [], L2StoreResult(False, 0)
        with self._lock:
            self._stored[task_id] = result
            self._keys.update((raw[i], keys[i]) for i in new)
        if new:
            self._notify_keys_stored([keys[i] for i in new],
                                     [objects[i].get_size() for i in new])
        self._store_efd.notify()

    def pop_completed_store_tasks(self) -> dict[int, L2StoreResult]:
        with self._lock:
            done, self._stored = self._stored, {}
        return done

    def submit_lookup_and_lock_task(self, keys: list[ObjectKey],
                                    group_layout_descs: dict[int, MemoryLayoutDesc]) -> int:
        return self._submit(lambda task_id: self._lookup(task_id, keys))

    def _lookup(self, task_id: int, keys: list[ObjectKey]) -> None:
        bitmap = _bitmap(self.objects.lock([object_key_bytes(k) for k in keys]))
        with self._lock:
            self._looked_up[task_id] = bitmap
        self._lookup_efd.notify()

    def query_lookup_and_lock_result(self, task_id: int) -> Bitmap | None:
        with self._lock:
            return self._looked_up.pop(task_id, None)

    def submit_unlock(self, keys: list[ObjectKey]) -> None:
        # queued behind the lookups that locked them, so an unlock never overtakes its lock
        raw = [object_key_bytes(k) for k in keys]
        self._tasks.put(lambda: self.objects.unlock(raw))

    def submit_load_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> int:
        if len(keys) != len(objects):
            raise ValueError(f"{len(objects)} objects for {len(keys)} keys")
        return self._submit(lambda task_id: self._load(task_id, keys, objects))

    def _load(self, task_id: int, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        hits = self.objects.get_many_into([object_key_bytes(k) for k in keys],
                                          [bytes_of(o) for o in objects])
        bitmap = _bitmap(hits)
        accessed = [k for k, ok in zip(keys, hits, strict=True) if ok]
        if accessed:
            self._notify_keys_accessed(accessed)
        with self._lock:
            self._loaded[task_id] = bitmap
        self._load_efd.notify()

    def query_load_result(self, task_id: int) -> Bitmap | None:
        with self._lock:
            return self._loaded.pop(task_id, None)

    # -- eviction and upkeep -------------------------------------------------------------------

    def delete(self, keys: list[ObjectKey]) -> None:
        raws = [object_key_bytes(k) for k in keys]
        sizes = self.objects.delete(raws)
        with self._lock:
            for raw in raws:
                self._keys.pop(raw, None)
        deleted = [(k, n) for k, n in zip(keys, sizes, strict=True) if n is not None]
        if deleted:
            self._notify_keys_deleted([k for k, _ in deleted], [n for _, n in deleted])

    def _report_gone(self) -> None:
        """Chunks poold.kv dropped itself (evicted at its budget, or lost with a lease) are
        deleted as far as LMCache knows, so its accounting matches what a load would find."""
        gone = self.objects.gone()
        if not gone:
            return
        with self._lock:
            lost = [(self._keys.pop(raw), n) for raw, n in gone if raw in self._keys]
        if lost:
            self._notify_keys_deleted([k for k, _ in lost], [n for _, n in lost])

    def report_status(self) -> dict[str, Any]:
        stats = self.objects.kv.stats()
        return {"is_healthy": self._worker.is_alive(), "type": "PooldL2Adapter",
                "objects": len(self.objects), "leases": stats.leases,
                "leased_bytes": stats.leased_bytes, "budget_bytes": stats.budget_bytes,
                "leases_lost": stats.leases_lost, "pinned_blocks": stats.pinned}

    def close(self) -> None:
        """Finish the queued tasks, release every lease, close the event fds. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._tasks.put(None)
        self._worker.join()
        self.objects.close()
        for efd in (self._store_efd, self._lookup_efd, self._load_efd):
            efd.close()
