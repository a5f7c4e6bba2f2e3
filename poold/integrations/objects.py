"""ObjectStore: an engine's KV objects of any size, as fixed-size blocks of a poold.kv store.

Engines hand their offload tier whole objects (an LMCache chunk, a vLLM offload block, an SGLang
page) whose size depends on the model and, for a last chunk, on how many tokens it holds. The
block store keeps fixed-size blocks, so an object is cut into parts of `block_size` bytes, each
stored under a key derived from the object's key and the part's index; the last part is padded.
The object is present only while every part is: a part evicted, or lost with its lease, makes
the whole object a miss, and its other parts are dropped. So a lost lease is lost objects,
never foreign bytes (poold.kv re-checks each lease after it copies).

What the store knows of an object (its size and parts) is a record here; the bytes are in the
leases. A lookup checks the parts, so eviction inside poold.kv is seen at the next lookup or get
(`gone()` says which objects vanished that way, for an engine that accounts bytes).

Imports only poold.kv and the client SDK, like every integration.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

from poold.client import PooldClient
from poold.kv import KVStore
from poold.kv.buffers import bytes_view

_PERSON = b"poold.obj.v1"  # part keys mean nothing outside this module


class Put(Enum):
    """What a put did with one object."""

    STORED = "stored"  # written now
    PRESENT = "present"  # held already (content keys: the same key is the same bytes)
    REFUSED = "refused"  # no room (every block pinned), or its lease was lost in the copy


class StoredObject(NamedTuple):
    """What the store knows of an object (a tuple: made for every new object an engine
    stores, at a third of a frozen dataclass's cost)."""

    key: bytes
    nbytes: int
    parts: tuple[bytes, ...]


_DIGEST = 16
_HASH = hashlib.blake2b(digest_size=_DIGEST, person=_PERSON)  # copied per part: cheaper than anew


def part_keys(key: bytes, nbytes: int, block_size: int) -> tuple[bytes, ...]:
    """The block keys of an object's parts: its key and the part's index, hashed together, so
    two objects never share a part and a part names its object. An object of exactly one block
    (an engine storing chunks of the block size) is its own part, unhashed (the hash was a
    third of such a put's own cost): no hashed part has its length, and an object of another
    size under that key is hashed, so it never finds the whole-block object's bytes."""
    if nbytes == block_size and len(key) != _DIGEST:
        return (key,)
    prefix = struct.pack("<I", len(key)) + key
    keys = []
    for i in range(max(1, -(-nbytes // block_size))):
        h = _HASH.copy()
        h.update(prefix + struct.pack("<QQ", nbytes, i))
        keys.append(h.digest())
    return tuple(keys)


class ObjectStore:
    """`client`: one the store owns (closed with it), or None where the caller keeps its own."""

    def __init__(self, store: KVStore, client: PooldClient | None = None) -> None:
        self.kv = store
        self._client = client
        self.block_size = store.block_size
        self._lock = threading.Lock()
        self._objects: dict[bytes, StoredObject] = {}
        self._locks: dict[bytes, list[tuple[bytes, ...]]] = {}  # per lock, the parts it pinned
        self._gone: list[tuple[bytes, int]] = []

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every lease (poold.kv finishes its pending puts first). Idempotent."""
        self.kv.close()
        if self._client is not None:
            self._client.close()

    # -- writes --------------------------------------------------------------------------------

    def put(self, key: bytes, obj: memoryview, *, session: str | None = None) -> Put:
        """put_many for one object, on a shorter path when it is one whole block (an engine
        that stores chunk by chunk, each chunk a block: the per-call cost is what it pays)."""
        view = bytes_view(obj)
        if view.nbytes != self.block_size or session is not None:
            return self.put_many([key], [view], session=session)[0]
        with self._lock:
            was = self._objects.get(key)
        record = self._record(key, view.nbytes, was)
        if not self.kv.put(record.parts[0], view):
            self._forget([record])  # as put_many: a record it held is no longer whole
            return Put.REFUSED
        with self._lock:
            self._objects[key] = record
        return Put.PRESENT if was is record else Put.STORED

    def put_many(self, keys: Sequence[bytes], objects: Sequence[memoryview], *,
                 session: str | None = None) -> list[Put]:
        """Store each object (a byte view) under its key, in one batch of blocks; the blocks of
        an object held already are not written again (poold.kv keeps a key it holds), but a
        block of it that was evicted is. `session`: the engine's session (an agent's
        conversation) the objects belong to, which holds them (`hold`). Per key, what was
        done."""
        if len(keys) != len(objects):
            raise ValueError(f"{len(objects)} objects for {len(keys)} keys")
        if not keys:
            return []
        with self._lock:
            known = [self._objects.get(k) for k in keys]
        records = [self._record(k, o.nbytes, r) for k, o, r in zip(keys, objects, known,
                                                                   strict=True)]
        blocks = [b for r in records for b in r.parts]
        views = [v for o in objects for v in self._cut(o)]
        # one block (an engine that stores chunk by chunk): poold.kv's shorter path
        held = [self.kv.put(blocks[0], views[0])] if len(blocks) == 1 and session is None \
            else self.kv.put_many(blocks, views, session=session)
        outcome: list[Put] = []
        at = 0
        failed: list[StoredObject] = []
        with self._lock:
            for record, was in zip(records, known, strict=True):
                ok = all(held[at:at + len(record.parts)])
                at += len(record.parts)
                if ok:
                    self._objects[record.key] = record
                    outcome.append(Put.PRESENT if was is record else Put.STORED)
                else:
                    failed.append(record)
                    outcome.append(Put.REFUSED)
        self._forget(failed)  # half an object is no object: free what its other parts took
        return outcome

    def _record(self, key: bytes, nbytes: int, known: StoredObject | None) -> StoredObject:
        """The record a put of `nbytes` under `key` keeps: the one known, if of that size."""
        if known is not None and known.nbytes == nbytes:
            return known
        return StoredObject(key, nbytes, part_keys(key, nbytes, self.block_size))

    def _cut(self, obj: memoryview) -> list[memoryview | bytearray]:
        """The object's parts as block-size views; the last one padded, in a copy."""
        size = self.block_size
        view = bytes_view(obj)
        whole = view.nbytes // size
        parts: list[memoryview | bytearray] = [view[i * size:(i + 1) * size]
                                               for i in range(whole)]
        if view.nbytes % size or not view.nbytes:
            tail = bytearray(size)
            tail[:view.nbytes - whole * size] = view[whole * size:]
            parts.append(tail)
        return parts

    def delete(self, keys: Sequence[bytes]) -> list[int | None]:
        """Forget objects; their blocks are freed (pinned ones once unpinned). Per key, the size
        it had, or None where the store did not hold it."""
        with self._lock:
            records = [self._objects.pop(k, None) for k in keys]
        self.kv.discard([b for r in records if r is not None for b in r.parts])
        return [None if r is None else r.nbytes for r in records]

    def clear(self) -> None:
        """Forget every object (pinned blocks are freed once unpinned)."""
        with self._lock:
            keys = list(self._objects)
        self.delete(keys)

    # -- reads ---------------------------------------------------------------------------------

    def sizes(self, keys: Sequence[bytes]) -> list[int | None]:
        """Per key, the size of the object a get would find now, or None."""
        records = self._present(keys)
        return [None if r is None else r.nbytes for r in records]

    def lock(self, keys: Sequence[bytes]) -> list[bool]:
        """Pin the present objects (pins nest) so eviction leaves them until unlock; a lease
        lost meanwhile still loses them. Per key, whether it was present and is pinned now."""
        records = self._present(keys)
        with self._lock:
            for r in records:
                if r is not None:
                    self._locks.setdefault(r.key, []).append(r.parts)
            self.kv.pin([b for r in records if r is not None for b in r.parts])
        return [r is not None for r in records]

    def hold(self, session: str, keys: Sequence[bytes]) -> int:
        """Hold the present objects for the engine's session: poold.kv evicts them last, after
        every block no live session holds, until the session ends or goes a session TTL
        without a hold (poold.kv session holds: an agent's context kept across a tool call).
        Returns how many of the keys were present."""
        records = [r for r in self._present(keys) if r is not None]
        if records:
            self.kv.pin_session(session, [b for r in records for b in r.parts])
        return len(records)

    def end_session(self, session: str) -> None:
        """The engine says the session is over: its objects stay cached, evictable again."""
        self.kv.end_session(session)

    def locked(self, key: bytes) -> bool:
        """Whether the key holds a lock now."""
        with self._lock:
            return bool(self._locks.get(key))

    def unlock(self, keys: Sequence[bytes]) -> None:
        """Drop one lock from each key; a key not locked is left alone. The parts a lock
        pinned are unpinned even if the object was deleted meanwhile."""
        unpin: list[bytes] = []
        with self._lock:
            for key in keys:
                held = self._locks.get(key)
                if not held:
                    continue
                unpin += held.pop()
                if not held:
                    del self._locks[key]
            self.kv.unpin(unpin)

    def get_into(self, key: bytes, out: memoryview) -> bool:
        """get_many_into for one object, on a shorter path when it is one whole block (an
        engine that reads chunk by chunk pays this per chunk)."""
        record = self._objects.get(key)  # one dict lookup is atomic: no lock taken for it
        if record is None or record.nbytes != out.nbytes:
            return False
        if record.nbytes != self.block_size:
            return self._read(record, out)
        if self.kv.get_into(record.parts[0], out):
            return True
        self._forget([record])  # evicted or lost between the lookup and the copy
        return False

    def get_many_into(self, keys: Sequence[bytes], out: Sequence[memoryview]) -> list[bool]:
        """Copy each object into its buffer, which must be the object's size. Per key, whether
        it hit; a miss may have left its buffer partly written, never with another's bytes."""
        if len(keys) != len(out):
            raise ValueError(f"{len(out)} buffers for {len(keys)} keys")
        with self._lock:
            records = [self._objects.get(k) for k in keys]
        return [r is not None and r.nbytes == o.nbytes and self._read(r, o)
                for r, o in zip(records, out, strict=True)]

    def _read(self, record: StoredObject, out: memoryview) -> bool:
        size = self.block_size
        whole = record.nbytes // size
        # One whole block: kv.get_into makes its own byte view (a second one costs a tenth of
        # a microsecond a chunk); with a tail, the tail's copy needs one here.
        dst = out if record.nbytes == size else bytes_view(out)
        if whole == 1:  # one block (and perhaps a tail): poold.kv's shorter path
            ok = self.kv.get_into(record.parts[0], dst)
        else:
            ok = whole == 0 or all(self.kv.get_many_into(record.parts[:whole], dst))
        if ok and record.nbytes % size:
            tail = bytearray(size)
            ok = self.kv.get_into(record.parts[whole], tail)
            dst[whole * size:] = tail[:record.nbytes - whole * size]
        if not ok:  # evicted or lost between the lookup and the copy
            self._forget([record])
        return ok

    def gone(self) -> list[tuple[bytes, int]]:
        """Objects found incomplete since the last call (evicted or lost inside poold.kv), with
        their sizes, oldest first; each is reported once."""
        with self._lock:
            gone, self._gone = self._gone, []
            return gone

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def _present(self, keys: Sequence[bytes]) -> list[StoredObject | None]:
        """The records of the objects whose every part is in the store; an incomplete one is
        forgotten on the way."""
        with self._lock:
            records = [self._objects.get(k) for k in keys]
        blocks = [b for r in records if r is not None for b in r.parts]
        there = iter(self.kv.contains_many(blocks))
        present: list[StoredObject | None] = []
        broken: list[StoredObject] = []
        for record in records:
            if record is None:
                present.append(None)
                continue
            complete = all([next(there) for _ in record.parts])
            present.append(record if complete else None)
            if not complete:
                broken.append(record)
        self._forget(broken)
        return present

    def _forget(self, records: Sequence[StoredObject]) -> None:
        if not records:
            return
        with self._lock:
            for record in records:
                if self._objects.get(record.key) is record:
                    del self._objects[record.key]
                    self._gone.append((record.key, record.nbytes))
        self.kv.discard([b for r in records for b in r.parts])
