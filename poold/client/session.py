"""Session: many leases kept alive by one keepalive, on the client side.

A session (POST /v1/sessions) is a TTL that the leases granted in it share: one keepalive thread
renews the session, and with it every lease in it, in one request per period, whatever the
number of leases. The keepalive's answer lists the leases still live; a lease this session
granted before the keepalive was sent and that the answer leaves out has ended in the ledger
(revoked, reclaimed, lost with its host) and is marked lost at once. A session that ends
(expired, revoked, this host fenced) loses every lease in it. Closing the session releases
them all in one request.

Elastic leases (`session.lease(size, elastic=True)`) are a cache the holder gives back on
request: when a grant elsewhere waits for room, the daemon asks for the coldest ones, and
`on_reclaim(asks)` is called from the session's reclaim thread (a long poll: it hears within
milliseconds) and from its keepalive; the holder drops what the leases hold and releases them
before each ask's deadline, or they are revoked. `idle_s()`, if given, tells the daemon at each
keepalive how long each lease went unused, so the coldest are asked first (None: nothing new
this time, the daemon keeps the last report).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from api.schemas import ClientSession, GrantedLease, ReclaimAsk
from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.lease import Lease
from poold.client.renewal import RETRY_S, Renewal

log = logging.getLogger(__name__)

# Called with the asks not handed over before (from the reclaim thread or the keepalive's).
ReclaimHandler = Callable[[list[ReclaimAsk]], None]
# Lease id -> seconds since the holder last used it.
IdleReport = Callable[[], dict[str, float] | None]
# How long one long poll of the reclaim feed waits before asking again.
RECLAIM_POLL_S = 20.0


class SessionClient(Protocol):
    """What a Session needs of the client that opened it (PooldClient is one)."""

    fd_socket: str | None

    def grant(self, size: int, *, ttl_s: int | None = None, pool: str | None = None,
              labels: dict[str, str] | None = None, idempotency_key: str | None = None,
              session_id: str | None = None, elastic: bool = False, wait_s: float = 0
              ) -> GrantedLease: ...

    def keepalive(self, lease_id: str, ttl_s: int | None = None) -> LeaseInfo: ...

    def release(self, lease_id: str) -> LeaseInfo: ...

    def keepalive_session(self, session_id: str, idle_s: dict[str, float] | None = None
                          ) -> ClientSession: ...

    def session_reclaims(self, session_id: str, wait_s: float = 0) -> list[ReclaimAsk]: ...

    def close_session(self, session_id: str) -> ClientSession: ...

    def get_lease(self, lease_id: str) -> LeaseInfo: ...


class Session:
    def __init__(self, client: SessionClient, info: ClientSession, *, keepalive: bool,
                 on_reclaim: ReclaimHandler | None = None,
                 idle_s: IdleReport | None = None) -> None:
        self._client = client
        self.info = info
        self.lost_reason: str | None = None
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._closed = False
        self._on_reclaim, self._idle_s = on_reclaim, idle_s
        self._handed: set[str] = set()  # lease ids whose asks on_reclaim was given
        self._renewal: Renewal | None = None
        if keepalive:
            self._renewal = Renewal(f"poold-session-{info.id[:8]}", info.ttl_s, self._renew,
                                    self._lose)
        self._done = threading.Event()
        if on_reclaim is not None:
            threading.Thread(target=self._listen, daemon=True,
                             name=f"poold-reclaim-{info.id[:8]}").start()

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
              idempotency_key: str | None = None, elastic: bool = False,
              wait_s: float = 0) -> Lease:
        """Grant a lease in this session: it lives as long as the session; release it (or use
        it as a context manager) to give it back before the session ends. `elastic`: given
        back when the daemon asks (on_reclaim); `wait_s`: how long to wait for room."""
        self.check()
        if elastic and self._on_reclaim is None:
            raise errors.ClientError("an elastic lease needs a session with on_reclaim: "
                                     "nothing would give it back when asked")
        info = self._client.grant(size, pool=pool, labels=labels,
                                  idempotency_key=idempotency_key, session_id=self.id,
                                  elastic=elastic, wait_s=wait_s)
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
        self._done.set()
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
            self._handed.discard(lease.id)

    def _renew(self) -> int:
        with self._lock:  # only leases granted before the keepalive went out are answered for
            sent = dict(self._leases)
        idle = self._idle_s() if self._idle_s is not None else None
        self.info = self._client.keepalive_session(self.id, idle_s=idle)
        self._hand_over(self.info.reclaim)
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
        self._done.set()
        for lease in leases:
            lease.lose(f"session lost: {reason}")

    def _listen(self) -> None:
        """The reclaim thread: long polls of the session's reclaim feed until it is closed or
        lost; a failed poll (daemon restarting) is tried again after a pause."""
        while not self._done.is_set():
            try:
                asks = self._client.session_reclaims(self.id, wait_s=RECLAIM_POLL_S)
            except errors.ClientError as exc:
                # A TransportError is one too, but means the daemon is unreachable for now
                # (restarting): only a closed client ends the listening.
                if not isinstance(exc, errors.TransportError):
                    return
                failed: errors.PooldError = exc
            except errors.PooldError as exc:
                failed = exc
            else:
                self._hand_over(asks)
                continue
            log.debug("session.reclaim_poll_failed session=%s error=%s", self.id, failed)
            self._done.wait(RETRY_S)

    def _hand_over(self, asks: list[ReclaimAsk]) -> None:
        """Give on_reclaim the asks for leases it was not given before (each once)."""
        if self._on_reclaim is None or not asks:
            return
        with self._lock:
            if self._closed:
                return
            new = [ask for ask in asks if ask.lease not in self._handed]
            self._handed.update(ask.lease for ask in new)
        if not new:
            return
        try:
            self._on_reclaim(new)
        except Exception:  # the holder's bug must not stop renewals or the feed; the daemon
            # revokes what is not given back by the deadline
            log.exception("session.on_reclaim_failed session=%s leases=%s", self.id,
                          [ask.lease for ask in new])
