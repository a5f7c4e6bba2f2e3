"""PooldHiCacheStorage: poold as SGLang's HiCache storage tier (SGLang 0.5.23), loaded by its
dynamic backend factory.

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
      '{"backend_name": "poold", "module_path": "poold.integrations.sglang",
        "class_name": "PooldHiCacheStorage", "interface_v1": 1,
        "uds": "/run/poold/api.sock", "fd_socket": "/run/poold/fd.sock",
        "budget_bytes": 68719476736}'

Every key of the extra config but SGLang's own (backend_name, module_path, class_name,
interface_v1) is a TierSettings field. SGLang keys pages by hash strings; the same page of two
tensor-parallel ranks is two objects (their shards differ), but one for an MLA model, whose KV
every rank holds whole, as SGLang's file backend keys them. The zero-copy calls (`*_v1`) copy
between poold and the host pool's page buffers, as the host pool describes them
(get_page_buffer_meta: one or more buffers a page); the tensor calls copy to and from the
tensors SGLang passes. A lost lease is lost pages: lookups miss and gets fail for them. A
request whose extra_info names its session (`{"poold_session": "<conversation id>"}`) holds the
pages it stored or found (zero-copy calls) for that session: evicted last, across its gaps.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from poold.integrations.objects import Put
from poold.integrations.settings import SESSION_FIELD, TierSettings

SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")


def _bytes(tensor: Any) -> memoryview:
    """A byte view of a contiguous CPU tensor, without copying."""
    if not tensor.is_contiguous():
        raise ValueError("poold stores contiguous CPU tensors only")
    return memoryview(tensor.view(-1).view(dtype=torch.uint8).numpy())


def _at(pointer: int, size: int) -> memoryview:
    """The host pool's buffer at `pointer` (its own memory, described by the pool itself)."""
    return memoryview((ctypes.c_ubyte * size).from_address(pointer)).cast("B")


class PooldHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        params = {k: v for k, v in extra.items() if k not in SGLANG_KEYS}
        settings = TierSettings.from_dict(params)
        mla = bool(storage_config.is_mla_model)
        shard = "" if mla else f"tp{storage_config.tp_rank}/{storage_config.tp_size}"
        self._prefix = (f"{storage_config.model_name or ''}|{shard}|pp{storage_config.pp_rank}"
                        f"/{storage_config.pp_size}|").encode()
        self.objects = settings.open(labels={"engine": "sglang", "tier": "hicache"})
        self._parts = 1  # buffers a page has in the host pool: K and V for MHA, one for MLA

    def _raw(self, key: str) -> bytes:
        return self._prefix + key.encode()

    # -- the tensor interface ------------------------------------------------------------------

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        if values is None or len(values) != len(keys):
            return False
        outcome = self.objects.put_many([self._raw(k) for k in keys], [_bytes(v) for v in values])
        return all(put is not Put.REFUSED for put in outcome)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any = None,
                  target_sizes: Any = None) -> list[Any]:
        if target_locations is None:
            return [None] * len(keys)
        hits = self.objects.get_many_into([self._raw(k) for k in keys],
                                          [_bytes(t) for t in target_locations])
        return [t if hit else None for t, hit in zip(target_locations, hits, strict=True)]

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """How many keys, from the first, are stored (SGLang loads a prefix); a request of a
        session holds that prefix for it."""
        if not keys:
            return 0
        present = self._present(keys)
        hits = present.index(False) if False in present else len(present)
        session = session_of(extra_info)
        if session is not None and hits:
            self.objects.hold(session, self._part_keys(keys[:hits]))
        return hits

    def _present(self, keys: list[str]) -> list[bool]:
        sizes = self.objects.sizes(self._part_keys(keys))
        return self._per_key([n is not None for n in sizes], len(keys))

    def _part_keys(self, keys: list[str]) -> list[bytes]:
        """A page's objects: one a buffer the host pool gives it."""
        if self._parts == 1:
            return [self._raw(k) for k in keys]
        return [self._raw(k) + f"#{j}".encode() for k in keys for j in range(self._parts)]

    # -- the zero-copy interface, over the host pool's page buffers ----------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """The host pool whose pages the zero-copy calls move; how many buffers a page has is
        asked of it once, on its first page."""
        super().register_mem_pool_host(mem_pool_host)
        pointers, _sizes = mem_pool_host.get_page_buffer_meta(
            torch.arange(mem_pool_host.page_size))
        self._parts = len(pointers)

    def _buffers(self, keys: list[str], host_indices: Any) -> tuple[list[bytes],
                                                                    list[memoryview]]:
        pointers, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(pointers) != len(keys) * self._parts:
            raise ValueError(f"{len(pointers)} page buffers for {len(keys)} pages of "
                             f"{self._parts}")
        return self._part_keys(keys), [_at(p, n) for p, n in zip(pointers, sizes, strict=True)]

    def batch_set_v1(self, keys: list[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        raws, views = self._buffers(keys, host_indices)
        outcome = self.objects.put_many(raws, views, session=session_of(extra_info))
        stored = [put is not Put.REFUSED for put in outcome]
        return self._per_key(stored, len(keys))

    def batch_get_v1(self, keys: list[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        raws, views = self._buffers(keys, host_indices)
        return self._per_key(self.objects.get_many_into(raws, views), len(keys))

    def _per_key(self, flags: list[bool], keys: int) -> list[bool]:
        parts = self._parts
        return [all(flags[i * parts:(i + 1) * parts]) for i in range(keys)]

    def clear(self) -> None:
        self.objects.clear()

    def close(self) -> None:
        self.objects.close()


def session_of(extra_info: Any) -> str | None:
    """The session a request says it belongs to: `poold_session` in the extra_info dict of
    SGLang's HiCacheStorageExtraInfo (an agent framework sets it per conversation), else None."""
    found = getattr(extra_info, "extra_info", None)
    value = found.get(SESSION_FIELD) if isinstance(found, dict) else None
    return value if isinstance(value, str) and value else None
