"""PooldBackend: LMCache's in-process storage plugin on poold (LMCacheEngine without the
multi-process server), beside LMCache's local CPU backend.

    storage_plugins: ["poold"]
    extra_config:
      storage_plugin.poold.module_path: poold.integrations.lmcache
      storage_plugin.poold.class_name: PooldBackend
      poold.uds: /run/poold/api.sock
      poold.fd_socket: /run/poold/fd.sock
      poold.budget_bytes: 17179869184

Every `poold.<name>` key of `extra_config` is a TierSettings field (a key it does not know is
refused at start). A put copies the chunk from LMCache's CPU buffer into leased memory (LMCache
gives plugins no allocator of their own); a get allocates from the local CPU backend and copies
back. Chunks are kept by LMCache's own key string, with their shapes, dtypes and format, so what
a get returns is laid out as it was stored; LMCache's asynchronous lookup and prefetch are
served too. A lost lease is lost chunks: a get misses. A
request tagged with its session (`lmcache.tag.poold_session: <conversation id>` in its
request configs) holds the chunks it stored or found for that session: evicted last, across the
gaps between its requests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from poold.integrations.lmcache.views import bytes_of
from poold.integrations.objects import Put
from poold.integrations.settings import SESSION_FIELD, TierSettings

if TYPE_CHECKING:
    import torch
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.memory_management import MemoryFormat, MemoryObj


@dataclass(frozen=True, slots=True)
class Layout:
    """What LMCache's allocator needs to hand back a chunk as it was stored."""

    shapes: list[torch.Size]
    dtypes: list[torch.dtype]
    fmt: MemoryFormat
    cached_positions: Any


def _layout(obj: MemoryObj, last: Layout | None = None) -> Layout:
    """The object's layout; `last` itself when it is the same (chunks of one model are all laid
    out alike: no new lists for each)."""
    meta = obj.metadata  # one lock taken, where get_shapes(), get_dtypes()... take one each
    if meta.shapes is None or meta.dtypes is None:
        raise ValueError(f"LMCache's memory object {obj} has no shapes or dtypes")
    if last is not None and meta.cached_positions is None and last.cached_positions is None \
            and meta.fmt is last.fmt and meta.shapes == last.shapes \
            and meta.dtypes == last.dtypes:
        return last
    return Layout(list(meta.shapes), list(meta.dtypes), meta.fmt, meta.cached_positions)


def _same_layout_runs(layouts: Sequence[Layout | None]) -> Iterator[tuple[int, int]]:
    """[start, end) of each run of known chunks laid out alike (one allocation serves it)."""
    i, n = 0, len(layouts)
    while i < n:
        first = layouts[i]
        if first is None:
            i += 1
            continue
        j = i + 1
        while j < n and (other := layouts[j]) is not None and other.shapes == first.shapes \
                and other.dtypes == first.dtypes and other.fmt is first.fmt:
            j += 1
        yield i, j
        i = j


def _raw(key: CacheEngineKey) -> bytes:
    return str(key.to_string()).encode()


def session_of(keys: Sequence[CacheEngineKey]) -> str | None:
    """The session the request of these keys belongs to: its `lmcache.tag.poold_session` tag
    (LMCache keeps a request's tags on each of its keys), else None."""
    found = getattr(keys[0], "tags", None) if keys else None
    if not found:  # most requests carry no tags: no dict made for them
        return None
    value = dict(found).get(SESSION_FIELD)
    return value if isinstance(value, str) and value else None


class PooldBackend(StoragePluginInterface):
    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Any = None) -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        if local_cpu_backend is None:
            raise ValueError("PooldBackend requires local_cpu_backend (LMCache's local CPU "
                             "backend, local_cpu: true): it allocates the chunks a get "
                             "returns")
        extra = dict(getattr(config, "extra_config", None) or {})
        params = {k.removeprefix("poold."): v for k, v in extra.items()
                  if k.startswith("poold.")}
        self.objects = TierSettings.from_dict(params).open(
            labels={"engine": "lmcache", "tier": "storage-plugin"})
        # Each stored chunk by LMCache's key object: its key string in poold.kv (to_string
        # costs four times a dict lookup, so a get finds it here) and its layout. Written under
        # _lock; read without it (one dict lookup is atomic in CPython).
        self._lock = threading.Lock()
        self._chunks: dict[CacheEngineKey, tuple[bytes, Layout]] = {}
        self._last_layout: Layout | None = None  # shared by the chunks laid out alike
        self._closed = False

    def __str__(self) -> str:
        return "PooldBackend"

    # -- lookups -------------------------------------------------------------------------------

    def _known(self, keys: Sequence[CacheEngineKey], raws: Sequence[bytes]) -> list[bool]:
        if self._closed:
            return [False] * len(raws)
        present = self.objects.sizes(raws)
        with self._lock:
            return [n is not None and k in self._chunks for k, n in zip(keys, present,
                                                                         strict=True)]

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        raw = _raw(key)
        if pin:
            return self.objects.lock([raw])[0] and self._known([key], [raw])[0]
        return self._known([key], [raw])[0]

    def batched_contains(self, keys: list[CacheEngineKey], pin: bool = False) -> int:
        """How many keys, from the first, are present (a prefix), pinned if asked."""
        raws = [_raw(k) for k in keys]
        known = self._known(keys, raws)
        hits = known.index(False) if False in known else len(known)
        if pin and hits:
            self.objects.lock(raws[:hits])
        session = session_of(keys)
        if session is not None and hits:
            self.objects.hold(session, raws[:hits])
        return hits

    async def batched_async_contains(self, lookup_id: str, keys: list[CacheEngineKey],
                                     pin: bool = False) -> int:
        """batched_contains, for LMCache's asynchronous lookup (a lookup copies nothing)."""
        return self.batched_contains(keys, pin=pin)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        return False  # puts are done before batched_submit_put_task returns

    # -- writes --------------------------------------------------------------------------------

    def batched_submit_put_task(
            self, keys: Sequence[CacheEngineKey], objs: list[MemoryObj],
            transfer_spec: Any = None,
            on_complete_callback: Callable[[CacheEngineKey], None] | None = None) -> None:
        """Stores the batch now (one poold.kv put); None: there is nothing to wait for."""
        if len(keys) != len(objs):
            raise ValueError(f"keys and objects are not the same length: {len(objs)} objects "
                             f"for {len(keys)} keys")
        if self._closed:
            raise RuntimeError("PooldBackend is closing or closed: it takes no new puts")
        if len(keys) == 1:  # chunk by chunk (a call per chunk): the shortest path
            self._put_one(keys[0], objs[0], on_complete_callback)
            return
        raws = [_raw(k) for k in keys]
        outcome = self.objects.put_many(raws, [bytes_of(o) for o in objs],
                                        session=session_of(keys))
        chunks = []
        for key, raw, obj, put in zip(keys, raws, objs, outcome, strict=True):
            if put is not Put.REFUSED:
                chunks.append((key, (raw, self._layout_of(obj))))
        with self._lock:
            self._chunks.update(chunks)
        if on_complete_callback is not None:
            for key, put in zip(keys, outcome, strict=True):
                if put is Put.STORED:
                    on_complete_callback(key)

    def _put_one(self, key: CacheEngineKey, obj: MemoryObj,
                 on_complete_callback: Callable[[CacheEngineKey], None] | None) -> None:
        raw = _raw(key)
        put = self.objects.put(raw, bytes_of(obj), session=session_of((key,)))
        if put is Put.REFUSED:
            return
        chunk = raw, self._layout_of(obj)
        with self._lock:
            self._chunks[key] = chunk
        if put is Put.STORED and on_complete_callback is not None:
            on_complete_callback(key)

    def _layout_of(self, obj: MemoryObj) -> Layout:
        """The object's layout, shared with the chunks stored before it when they are alike."""
        self._last_layout = _layout(obj, self._last_layout)
        return self._last_layout

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        """`force=False` (LMCache's eviction asking) leaves a pinned chunk where it is."""
        raw = _raw(key)
        if not force and self.objects.locked(raw):
            return False
        with self._lock:
            self._chunks.pop(key, None)
        return self.objects.delete([raw])[0] is not None

    def clear(self) -> int:
        """LMCacheEngine.clear (an operator's, or its controller's): every chunk goes but the
        pinned ones, as LMCache's CPU backend keeps those it cannot evict; returns the tokens
        they held, as that backend counts them. Their blocks are free for the next puts; the
        leases stay until idle (idle_release_s)."""
        with self._lock:
            held = list(self._chunks.items())
        going = [(key, chunk) for key, chunk in held if not self.objects.locked(chunk[0])]
        with self._lock:
            for key, _chunk in going:
                self._chunks.pop(key, None)
        sizes = self.objects.delete([raw for _key, (raw, _layout) in going])
        return sum(layout.shapes[0][layout.fmt.token_dim()]
                   for (_key, (_raw, layout)), size in zip(going, sizes, strict=True)
                   if size is not None)

    # -- reads ---------------------------------------------------------------------------------

    def get_blocking(self, key: CacheEngineKey) -> MemoryObj | None:
        chunk = self._chunks.get(key)
        if chunk is None or self._closed:
            return None
        raw, layout = chunk
        obj = self.local_cpu_backend.allocate(layout.shapes, layout.dtypes, layout.fmt)
        if obj is None:  # LMCache's CPU buffer is full
            return None
        if not self.objects.get_into(raw, bytes_of(obj)):
            obj.ref_count_down()  # evicted or lost since: a miss, and the buffer goes back
            self._forget(key, chunk)
            return None
        if layout.cached_positions is not None:  # a fresh object's are None already
            obj.metadata.cached_positions = layout.cached_positions
        return obj

    def batched_get_blocking(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        """Per key, its chunk or None (a miss keeps its place). The chunks of one layout, next
        to each other, are allocated in one call and copied in one poold.kv read."""
        if self._closed:
            return [None] * len(keys)
        chunks = [self._chunks.get(k) for k in keys]
        layouts = [c[1] if c is not None else None for c in chunks]
        objs: list[MemoryObj | None] = [None] * len(keys)
        for start, end in _same_layout_runs(layouts):
            layout = layouts[start]
            assert layout is not None
            got = self.local_cpu_backend.batched_allocate(layout.shapes, layout.dtypes,
                                                          end - start, layout.fmt)
            if got is None:  # LMCache's CPU buffer is full: the rest are misses
                break
            objs[start:end] = got
        found = [(i, chunk, obj) for i, (chunk, obj) in enumerate(zip(chunks, objs, strict=True))
                 if chunk is not None and obj is not None]
        hits = self.objects.get_many_into([chunk[0] for _i, chunk, _obj in found],
                                          [bytes_of(obj) for _i, _chunk, obj in found])
        for (i, chunk, obj), hit in zip(found, hits, strict=True):
            if hit:
                obj.metadata.cached_positions = chunk[1].cached_positions
                continue
            obj.ref_count_down()  # evicted or lost since: a miss, and the buffer goes back
            objs[i] = None
            self._forget(keys[i], chunk)
        return objs

    def _forget(self, key: CacheEngineKey, chunk: tuple[bytes, Layout]) -> None:
        """A get missed `chunk`: it goes, unless the key was stored again since."""
        with self._lock:
            if self._chunks.get(key) is chunk:
                del self._chunks[key]

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey],
                                       transfer_spec: Any = None) -> list[MemoryObj]:
        """LMCache's asynchronous prefetch: the chunks of the keys that hit, from the first up
        to the first miss, copied in a thread (the event loop goes on meanwhile)."""
        found = await asyncio.to_thread(self.batched_get_blocking, list(keys))
        hits = next((i for i, obj in enumerate(found) if obj is None), len(found))
        for obj in found[hits:]:
            if obj is not None:
                obj.ref_count_down()
        return [obj for obj in found[:hits] if obj is not None]

    def pin(self, key: CacheEngineKey) -> bool:
        return bool(self.objects.lock([_raw(key)])[0])

    def unpin(self, key: CacheEngineKey) -> bool:
        self.objects.unlock([_raw(key)])
        return True

    def get_allocator_backend(self) -> Any:
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        pass  # poold.kv's LRU-K is touched by the gets themselves

    def close(self) -> None:
        """Releases every lease; a get after it misses, a put is refused. Idempotent."""
        self._closed = True
        self.objects.close()
