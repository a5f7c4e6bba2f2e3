"""Session: many leases kept alive by one keepalive, on the client side.

A session (POST /v1/sessions) is a TTL that the leases granted in it share: one keepalive thread
renews the session, and with it every lease in it, in one request per period, whatever the
number of leases. The keepalive's answer lists the leases still live; a lease this session
granted before the keepalive was sent and that the answer leaves out has ended in the ledger
(revoked, reclaimed, lost with its host) and is marked lost at once. A session that ends
(expired, revoked, this host fenced) loses every lease in it. Closing the session releases
them all in one request.
"""

from __future__ import annotations

import threading
from typing import Protocol

from api.schemas import ClientSession, GrantedLease
from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.lease import Lease
from poold.client.renewal import Renewal


class SessionClient(Protocol):
    """What a Session needs of the client that opened it (PooldClient is one)."""

    fd_socket: str | None

    def grant(self, size: int, *, ttl_s: int | None = None, pool: str | None = None,
              labels: dict[str, str] | None = None, idempotency_key: str | None = None,
              session_id: str | None = None) -> GrantedLease: ...

    def keepalive(self, lease_id: str, ttl_s: int | None = None) -> LeaseInfo: ...

    def release(self, lease_id: str) -> LeaseInfo: ...

    def keepalive_session(self, session_id: str) -> ClientSession: ...

    def close_session(self, session_id: str) -> ClientSession: ...

    def get_lease(self, lease_id: str) -> LeaseInfo: ...


class Session:
    def __init__(self, client: SessionClient, info: ClientSession, *,
                 keepalive: bool = True) -> None:
        self._client = client
        self.info = info
        self.lost_reason: str | None = None
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._closed = False
        self._renewal: Renewal | None = None
        if keepalive:
            self._renewal = Renewal(f"poold-session-{info.id[:8]}", info.ttl_s, self._renew,
                                    self._lose)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def leases(self) -> list[Lease]:
        """The leases granted in this session that its holder has not released."""
        with self._lock:
            return list(self._leases.values())

    def check(self) -> None:
        if self.lost_reason is not None:
            raise errors.LeaseLost(f"session {self.id} lost: {self.lost_reason}")

    def lease(self, size: int, *, pool: str | None = None, labels: dict[str, str] | None = None,
              idempotency_key: str | None = None) -> Lease:
        """Grant a lease in this session: it lives as long as the session; release it (or use
        it as a context manager) to give it back before the session ends."""
        self.check()
        info = self._client.grant(size, pool=pool, labels=labels,
                                  idempotency_key=idempotency_key, session_id=self.id)
        lease = Lease(self._client, info, keepalive=False, token=info.token,
                      on_release=self._forget)
        with self._lock:
            self._leases[lease.id] = lease
            lost = self.lost_reason
        if lost is not None:  # lost while the grant was on its way
            lease.lose(f"session lost: {lost}")
        return lease

    def close(self) -> None:
        """Stop renewing, unmap every lease and end the session in the daemon, which releases
        its leases. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            leases, self._leases = list(self._leases.values()), {}
        if self._renewal is not None:
            self._renewal.stop()
        for lease in leases:
            lease.close_mappings()
            lease.lose("session closed")
        if self.lost_reason is None:
            self.info = self._client.close_session(self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _forget(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(lease.id, None)

    def _renew(self) -> int:
        with self._lock:  # only leases granted before the keepalive went out are answered for
            sent = dict(self._leases)
        self.info = self._client.keepalive_session(self.id)
        live = set(self.info.leases)
        with self._lock:
            gone = [lease for lease_id, lease in sent.items()
                    if lease_id not in live and lease_id in self._leases]
        for lease in gone:
            lease.lose(f"{self._how_it_ended(lease.id)}: not renewed by session {self.id}")
        return self.info.ttl_s

    def _how_it_ended(self, lease_id: str) -> str:
        """Why the ledger no longer renews a lease, for the holder's logs (one more request,
        only when a lease was lost)."""
        try:
            return f"{self._client.get_lease(lease_id).state} in the ledger"
        except errors.PooldError as exc:
            return f"ended in the ledger ({type(exc).__name__})"

    def _lose(self, reason: str) -> None:
        with self._lock:
            self.lost_reason = self.lost_reason or reason
            leases = list(self._leases.values())
        for lease in leases:
            lease.lose(f"session lost: {reason}")
