"""Per-lease memory objects: what a lease on an emulated or system-ram device is made of.

A device that is a chardev (devdax) is its own memory; these two kinds are not, so each of their
leases gets a memfd of its own, of the lease's length, sealed against growing and shrinking
(F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL): its holder is handed that memfd over fd.sock, so
what it maps is its lease and nothing else, `fstat` says the lease's length and `ftruncate` is
refused (EPERM) for everyone, the daemon included. The ledger's device and extents stay the
capacity accounting; the memfd is where the bytes are.

- emulated: made when the lease is granted, on hugetlbfs (MFD_HUGETLB, its huge pages reserved
  at once) when the huge page pool has room, else shmem.
- system-ram: made at the lease's first map, bound to the device's NUMA node
  (poold.daemon.nodemem).

When a lease ends its memfd is emptied (FALLOC_FL_PUNCH_HOLE: the pages go back to the kernel,
which zero-fills every page it hands out again, and every mapping of them loses them at once),
dropped from the store and closed: the next lease on those ledger bytes gets a new memfd, which
an old holder's mapping never reaches. A holder that keeps its mapping keeps an empty object of
its own (new pages there are charged to its own memory cgroup). Emptying is the scrub.

Every memfd is also handed to a file descriptor store (poold.daemon.fdstore) so a restart keeps
every lease and its bytes; a starting daemon takes them back (`recover`).

Root (or the daemon's user) may map a lease's memfd by path: /proc/<daemon pid>/fd/<n>, offset
0 (`where`), what the API reports as a lease's map_path.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import partial

from drivers.memfd import HugePageRoom, emulated_memfd, punch
from poold import errors
from poold.daemon.fdstore import FdStore
from poold.daemon.nodemem import NodeAllocator
from poold.ledger import reads, sharing
from poold.ledger.ledger import Ledger
from poold.types import DeviceKind, LeaseState

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Held:
    fd: int
    length: int
    kind: DeviceKind
    huge: bool = False


class LeaseMemory:
    """The memfds of this host's leases on emulated and system-ram devices, by lease id."""

    def __init__(self, store: FdStore, nodes: NodeAllocator, *, huge_pages: bool = True,
                 room: Callable[[int], bool] | None = None) -> None:
        self.store = store
        self._nodes = nodes
        self._huge_pages = huge_pages
        self._room = room or HugePageRoom()
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._making = threading.Lock()

    # ------------------------------------------------------------------ start

    def recover(self, kinds: Callable[[Iterable[str]], dict[str, DeviceKind]]) -> set[str]:
        """Take back what the store kept across the last stop. `kinds` answers, for lease ids,
        the device kind of those that still hold their extent (active or scrubbing) on this
        host; the memfds of the others are emptied and dropped. Returns the ids kept."""
        found = self.store.recover()
        holding = kinds(found) if found else {}
        for lease_id, fd in found.items():
            kind = holding.get(lease_id)
            if kind is None:
                self._discard(lease_id, fd)
                continue
            length = os.fstat(fd).st_size
            with self._lock:
                self._held[lease_id] = Held(fd, length, kind, huge=_on_hugetlbfs(fd))
        if found:
            log.info("leasemem.recovered store=%s kept=%d dropped=%d", self.store.kind,
                     len(holding), len(found) - len(holding))
        return set(holding)

    def _discard(self, lease_id: str, fd: int) -> None:
        try:
            punch(fd, os.fstat(fd).st_size)
        except OSError as exc:
            log.warning("leasemem.punch_failed lease=%s error=%r", lease_id, exc)
        os.close(fd)
        self.store.remove(lease_id)

    # ------------------------------------------------------------------ leases

    def create(self, lease_id: str, length: int) -> None:
        """The memory of an emulated lease just granted (idempotent: a replayed grant keeps
        the memfd it has). Raises NoCapacity when the kernel has none to give."""
        with self._lock:
            if lease_id in self._held:
                return
            huge = self._huge_pages and self._room(length)
            try:
                fd, huge = emulated_memfd(f"poold-lease-{lease_id[:12]}", length, huge)
            except OSError as exc:
                raise errors.NoCapacity(f"lease {lease_id}: no memory object of {length} "
                                        f"bytes: {exc.strerror or exc}") from exc
            self._keep(lease_id, Held(fd, length, DeviceKind.EMULATED, huge))

    def open(self, lease_id: str, kind: DeviceKind, node: int | None, length: int) -> int:
        """A descriptor of the lease's memfd for its holder (the caller closes it). A
        system-ram lease's is made, bound to its node, on first use; an emulated lease's was
        made at its grant, and is gone only if the lease was lost with it."""
        with self._lock:
            held = self._held.get(lease_id)
        if held is None and kind is DeviceKind.SYSTEM_RAM:
            # Binding and pre-faulting can take seconds: one at a time, without holding the
            # lock every other lease's lookups need.
            with self._making:
                with self._lock:
                    held = self._held.get(lease_id)
                if held is None:
                    fd = self._nodes.make(lease_id, node, length)
                    with self._lock:
                        held = self._keep(lease_id, Held(fd, length, kind))
        if held is None:
            raise errors.LeaseNotActive(f"lease {lease_id}: its memory is gone (lost with a "
                                        "daemon restart that had no fd store)")
        with self._lock:
            if self._held.get(lease_id) is not held:  # dropped meanwhile: the lease ended
                raise errors.LeaseNotActive(f"lease {lease_id} ended")
            return os.dup(held.fd)

    def where(self, lease_id: str) -> str | None:
        """The path root maps the lease's memfd by (offset 0), while this daemon holds it."""
        with self._lock:
            held = self._held.get(lease_id)
        return None if held is None else f"/proc/{os.getpid()}/fd/{held.fd}"

    def holds(self, lease_id: str) -> bool:
        with self._lock:
            return lease_id in self._held

    def drop(self, lease_id: str) -> bool:
        """The lease ended: empty its memfd, forget it in the store, close it."""
        with self._lock:
            held = self._held.pop(lease_id, None)
        if held is None:
            return False
        self._discard(lease_id, held.fd)
        log.info("leasemem.dropped lease=%s kind=%s bytes=%s", lease_id, held.kind,
                 held.length)
        return True

    def sweep(self, holding: Callable[[Collection[str]], set[str]]) -> int:
        """Drop the memfd of every lease that no longer holds its extent (`holding` answers,
        of lease ids, those that still do); returns how many. The ids are taken before the
        ledger is asked: a lease granted meanwhile is not judged on an older reading."""
        with self._lock:
            ids = list(self._held)
        if not ids:
            return 0
        kept = holding(ids)
        return sum(self.drop(i) for i in ids if i not in kept)

    def leases(self, kind: DeviceKind | None = None) -> dict[str, int]:
        """Lease id -> bytes, of the memfds held now (of one kind)."""
        with self._lock:
            return {i: h.length for i, h in self._held.items() if kind in (None, h.kind)}

    def close(self) -> None:
        """The daemon stops: its own descriptors close, the store keeps its duplicates."""
        with self._lock:
            held, self._held = self._held, {}
        for item in held.values():
            os.close(item.fd)
        self.store.close()

    def _keep(self, lease_id: str, held: Held) -> Held:
        self._held[lease_id] = held
        self.store.put(lease_id, held.fd)
        log.info("leasemem.created lease=%s kind=%s bytes=%s huge=%s", lease_id, held.kind,
                 held.length, held.huge)
        return held


def recover_memory(memory: LeaseMemory, ledger: Ledger) -> None:
    """At start: take back the memfds the fd store kept across the last stop. The active
    emulated leases of this host that should have one and do not (no store, or it lost them)
    are lost: their holders learn at their next keepalive, and never get fresh zeros passed off
    as their bytes. A store that cannot be reached stops the start (FdStoreUnavailable): it may
    hold them still, and they are not called lost for that."""
    host = ledger.host_id
    owned = ledger.read(lambda s, now: reads.memory_leases(s, now, host_id=host))
    try:
        kept = memory.recover(lambda ids: {i: owned[i][0] for i in ids if i in owned})
    except OSError as exc:
        raise errors.FdStoreUnavailable(f"the {memory.store.kind} fd store did not answer "
                                        f"({exc}); not starting") from exc
    gone = {lease_id for lease_id, (kind, state) in owned.items()
            if kind == DeviceKind.EMULATED and state == LeaseState.ACTIVE and lease_id not in kept}
    if gone:
        lost = ledger.run(partial(sharing.lose_own_leases, only=gone,
                                  reason="its memory did not survive the restart"))
        log.warning("leasemem.leases_lost count=%d store=%s", lost, memory.store.kind)


def _on_hugetlbfs(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:") and \
            os.fstat(fd).st_blksize > mmap.PAGESIZE
    except OSError:
        return False
