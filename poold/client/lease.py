"""Lease: one granted lease on the client side, kept alive in the background.

The keepalive thread renews at a third of the TTL. If the daemon says the lease expired, was
revoked or is unknown, or that its host is fenced from a shared ledger, or the daemon (or its
ledger) stays unreachable until the lease's own expiry, the lease is marked lost: `check()`
raises LeaseLost and the holder must stop touching the memory.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.fdsocket import receive_fd
from poold.client.mapping import Mapping

# After a failed renewal that may pass (daemon or ledger unreachable), try again this soon.
RETRY_S = 0.5


class LeaseClient(Protocol):
    """What a Lease needs of the client that granted it (PooldClient is one)."""

    fd_socket: str | None

    def keepalive(self, lease_id: str, ttl_s: int | None = None) -> LeaseInfo: ...

    def release(self, lease_id: str) -> LeaseInfo: ...


class Lease:
    def __init__(self, client: LeaseClient, info: LeaseInfo, *, keepalive: bool = True,
                 token: str | None = None) -> None:
        self._client = client
        self.info = info
        self.token = token  # proof of holding, for the daemon's fd socket
        self.lost_reason: str | None = None
        self._mappings: list[Mapping] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if keepalive:
            self._thread = threading.Thread(target=self._keepalive, daemon=True,
                                            name=f"poold-keepalive-{info.id[:8]}")
            self._thread.start()

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    def check(self) -> None:
        if self.lost_reason is not None:
            raise errors.LeaseLost(f"lease {self.id} lost: {self.lost_reason}")

    def map(self, *, prefault: bool = True) -> Mapping:
        """Map exactly the leased memory (MAP_SHARED, pre-faulted).

        Through a descriptor passed by the daemon when the client knows its fd socket (no
        permission on anything needed), else by opening the lease's map_path, which for
        emulated and system-ram leases is the daemon's own memfd (/proc/<pid>/fd/<n>: root or
        the daemon's user only).
        """
        self.check()
        info = self.info
        if self._client.fd_socket is not None and self.token is not None:
            passed = receive_fd(self._client.fd_socket, info.id, self.token)
            try:
                if (passed.offset, passed.length) != (info.offset, info.length):
                    raise errors.ClientError(f"daemon passed a different extent for {info.id}")
                mapping = Mapping(info.chardev, passed.map_offset, info.length, info.align,
                                  prefault=prefault, fd=passed.fd)
            finally:
                os.close(passed.fd)
        elif info.map_path is None:
            raise errors.ClientError(f"lease {info.id} is a {info.kind} lease whose memory only "
                                     "its daemon can hand out: pass fd_socket= to the client")
        else:
            mapping = Mapping(info.map_path, info.map_offset, info.length, info.align,
                              prefault=prefault)
        self._mappings.append(mapping)
        return mapping

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        for mapping in self._mappings:
            mapping.close()
        self._mappings.clear()
        self.info = self._client.release(self.id)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def _keepalive(self) -> None:
        """Renew every third of the TTL, counted from when the last renewal was sent (the
        ledger's new expiry is at least a TTL after that), so a slow answer does not push the
        next one out. A daemon that cannot be reached, or whose ledger is down for a moment
        (503 LedgerUnavailable, e.g. a database restart), is retried sooner until the lease's
        own expiry; an answer that the lease is gone (expired, revoked, unknown, or this host
        fenced from a shared ledger) loses it at once."""
        period = max(self.info.ttl_s / 3, 0.05)
        deadline = time.monotonic() + self.info.ttl_s
        wait = period
        while not self._stop.wait(wait):
            sent = time.monotonic()
            try:
                self.info = self._client.keepalive(self.id)
            except errors.HostFenced as exc:
                self.lost_reason = f"HostFenced: {exc.detail}"
                return
            except (errors.TransportError, errors.LedgerUnavailable) as exc:
                if time.monotonic() >= deadline:
                    self.lost_reason = f"daemon unreachable until expiry ({exc})"
                    return
                wait = min(period, RETRY_S)
                continue
            except errors.PooldError as exc:
                self.lost_reason = f"{type(exc).__name__}: {exc.detail}"
                return
            deadline = sent + self.info.ttl_s
            wait = max(0.0, sent + period - time.monotonic())
