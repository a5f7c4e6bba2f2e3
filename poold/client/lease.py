"""Lease: one granted lease on the client side, kept alive in the background.

Its own keepalive thread (poold.client.renewal) renews it at a third of the TTL, or, granted in
a session (poold.client.session), the session's does. If the daemon says the lease expired, was
revoked or is unknown, or that its host is fenced from a shared ledger, or the daemon (or its
ledger) stays unreachable until the lease's own expiry, the lease is marked lost: `check()`
raises LeaseLost and the holder must stop touching the memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.fdsocket import receive_fd
from poold.client.mapping import Mapping
from poold.client.renewal import Renewal


class LeaseClient(Protocol):
    """What a Lease needs of the client that granted it (PooldClient is one)."""

    fd_socket: str | None

    def keepalive(self, lease_id: str, ttl_s: int | None = None) -> LeaseInfo: ...

    def release(self, lease_id: str) -> LeaseInfo: ...


class Lease:
    def __init__(self, client: LeaseClient, info: LeaseInfo, *, keepalive: bool,
                 token: str | None = None,
                 on_release: Callable[[Lease], None] | None = None) -> None:
        """`keepalive=False`: nothing renews it here (its session does, or the caller).
        `on_release`: told when the holder releases it (its session forgets it)."""
        self._client = client
        self.info = info
        self.token = token  # proof of holding, for the daemon's fd socket
        self.lost_reason: str | None = None
        self._mappings: list[Mapping] = []
        self._on_release = on_release
        self._renewal: Renewal | None = None
        if keepalive:
            self._renewal = Renewal(f"poold-keepalive-{info.id[:8]}", info.ttl_s,
                                    self._renew, self.lose)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    def lose(self, reason: str) -> None:
        """Mark the lease lost (the first reason stands): the holder must stop using it."""
        if self.lost_reason is None:
            self.lost_reason = reason

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

    def close_mappings(self) -> None:
        """Unmap what map() mapped (views still exported keep their pages until they go)."""
        for mapping in self._mappings:
            mapping.close()
        self._mappings.clear()

    def release(self) -> None:
        if self._renewal is not None:
            self._renewal.stop()
        self.close_mappings()
        if self._on_release is not None:
            self._on_release(self)
        self.info = self._client.release(self.id)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def _renew(self) -> int:
        self.info = self._client.keepalive(self.id)
        return self.info.ttl_s
