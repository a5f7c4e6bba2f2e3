"""Who is asking: every request resolves to one `Principal`.

A bearer token (`Authorization: Bearer pd_<id>_<secret>`) names a token row in the ledger; a
request on the daemon's UNIX socket without one is identified by its peer's uid (SO_PEERCRED,
see poold.daemon.peercred) and mapped to a tenant or admin by config. With no authenticator
installed (auth off: unit tests of other concerns, or `auth = "off"` in the config) everyone is an
admin.

Routes declare what they need with `PrincipalDep` (anyone authenticated) or `AdminDep`; hot-path
routes call `principal_of` inline (see api.routers.leases for why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Protocol

from fastapi import Depends, Request

from api.ratelimit import RateLimiter
from poold.errors import Forbidden, RateLimited, Unauthenticated
from poold.ledger import tenants
from poold.ledger.ledger import Ledger
from poold.ledger.tenants import RevocationFeed, TokenSecret
from poold.security import secret_matches, split_token
from poold.types import Principal, Role

log = logging.getLogger(__name__)

# What everyone is when auth is off.
OPEN = Principal(name="open", role=Role.ADMIN)
_SCOPE_KEY = "poold.principal"
# Where the UNIX-socket server puts its peer's (pid, uid, gid): see poold.daemon.peercred.
PEER_SCOPE_KEY = "poold.peer"
# A token looked up in the ledger is trusted this long without looking again, on a ledger whose
# revocations this daemon cannot hear (SQLite: daemons sharing one file see another's
# revocation within this many seconds; revoking through this daemon forgets it at once).
TOKEN_CACHE_S = 1.0
# With a RevocationFeed (PostgreSQL) every revocation is heard as it commits; the cache is still
# re-read this often, for changes made to the tokens table by hand (no notification).
HEARD_TOKEN_CACHE_S = 60.0
# Token ids the ledger does not know are remembered too (for the cache's time), so a client
# repeating one costs no ledger read each time and is answered as fast as a known one; at most
# this many, the oldest forgotten first (ids are random: nobody can fill it with real ones).
UNKNOWN_TOKENS_KEPT = 4096


class Authenticator(Protocol):
    def authenticate(self, request: Request) -> Principal:
        """The request's principal; raises Unauthenticated when it has none."""


@dataclass(frozen=True, slots=True)
class PeerPolicy:
    """Principals for UNIX-socket peers that send no token, by uid (from config)."""

    admins: frozenset[int] = frozenset()
    tenants: Mapping[int, str] = field(default_factory=dict)

    def principal(self, uid: int) -> Principal | None:
        if uid in self.admins:
            return Principal(name=f"uid{uid}", role=Role.ADMIN)
        tenant = self.tenants.get(uid)
        if tenant is not None:
            return Principal(name=f"uid{uid}", role=Role.TENANT, tenant=tenant)
        return None


class TokenAuthenticator:
    """Bearer tokens from the ledger, else the UNIX-socket peer's uid by `peers`.

    Looked-up tokens are cached, so a request costs no ledger read. With a `feed` (PostgreSQL),
    each request first takes in the revocations PostgreSQL has sent (a non-blocking read of the
    listening socket, no round trip), so a revocation committed through any daemon is refused
    here from the next request on; while the feed is not listening, every request reads the
    ledger. Without one (SQLite), a cached token is trusted for `cache_s`.
    """

    def __init__(self, ledger: Ledger, peers: PeerPolicy | None = None,
                 cache_s: float = TOKEN_CACHE_S, feed: RevocationFeed | None = None) -> None:
        self._ledger = ledger
        self._peers = peers or PeerPolicy()
        self._feed = feed
        self._cache_s = HEARD_TOKEN_CACHE_S if feed is not None else cache_s
        self._cache: dict[str, tuple[TokenSecret, float]] = {}
        self._unknown: OrderedDict[str, float] = OrderedDict()  # token id -> when looked up
        # Bumped by every forget: a lookup that raced a revocation does not cache what it read.
        self._epoch = 0
        self._lock = threading.Lock()
        if feed is not None:
            feed.subscribe(self.forget, self.forget_all)

    def authenticate(self, request: Request) -> Principal:
        header = request.headers.get("authorization")
        if header is not None:
            return self._bearer(header)
        peer = request.scope.get(PEER_SCOPE_KEY)
        if peer is not None:
            principal = self._peers.principal(peer[1])
            if principal is not None:
                return principal
            raise Unauthenticated(f"uid {peer[1]} on the UNIX socket maps to no tenant; "
                                  "send Authorization: Bearer <token>")
        raise Unauthenticated("send Authorization: Bearer <token>")

    def forget(self, token_id: str) -> None:
        """Drop a cached token (just revoked): its next use is judged by the ledger."""
        with self._lock:
            self._epoch += 1
            self._cache.pop(token_id, None)

    def revoked(self, token_id: str) -> None:
        """A revocation just committed through this daemon: forgotten here at once and, with a
        feed, waited for until every other listening daemon has heard it (blocks: a thread)."""
        self.forget(token_id)
        if self._feed is not None:
            unheard = self._feed.confirm(token_id)
            if unheard:
                log.warning("auth.revocation_unconfirmed token=%s listeners=%s", token_id,
                            sorted(unheard))

    def forget_all(self) -> None:
        """Drop every cached token (revocations may have gone unheard)."""
        with self._lock:
            self._epoch += 1
            self._cache.clear()
            self._unknown.clear()

    def _bearer(self, header: str) -> Principal:
        scheme, _, bearer = header.partition(" ")
        parts = split_token(bearer.strip()) if scheme.lower() == "bearer" else None
        if parts is None:
            raise Unauthenticated("malformed credential: expected Authorization: Bearer pd_...")
        token_id, secret = parts
        found = self._lookup(token_id)
        if found is None or not secret_matches(secret, found.secret_sha256):
            raise Unauthenticated("unknown credential")
        if found.revoked:
            raise Unauthenticated(f"token {token_id} was revoked")
        return Principal(name=found.name, role=found.role, tenant=found.tenant)

    def _lookup(self, token_id: str) -> TokenSecret | None:
        trusted = self._feed is None or self._feed.drain()  # revocations heard so far applied
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(token_id)
            unknown_at = self._unknown.get(token_id)
            epoch = self._epoch
        if trusted and cached is not None and now - cached[1] < self._cache_s:
            return cached[0]
        if unknown_at is not None and now - unknown_at < self._cache_s:
            return None
        found = self._ledger.read(lambda s, _now: tenants.lookup(s, token_id))
        with self._lock:
            if found is None:
                self._unknown[token_id] = now
                self._unknown.move_to_end(token_id)
                while len(self._unknown) > UNKNOWN_TOKENS_KEPT:
                    self._unknown.popitem(last=False)
            elif trusted and self._epoch == epoch:  # no revocation heard while it was read
                self._cache[token_id] = (found, now)
        return found


def principal_of(request: Request) -> Principal:
    """Resolved once per request and kept in the scope; that once, the request is counted
    against the principal's rate limit (api.ratelimit), if the app has one."""
    found = request.scope.get(_SCOPE_KEY)
    if isinstance(found, Principal):
        return found
    auth: Authenticator | None = request.app.state.auth  # create_app sets it (None: auth off)
    principal = OPEN if auth is None else auth.authenticate(request)
    request.scope[_SCOPE_KEY] = principal
    limiter: RateLimiter | None = request.app.state.rate_limiter  # None: no limit
    if limiter is not None:
        try:
            limiter.take(principal)
        except RateLimited:
            request.app.state.metrics.rate_limited.labels(principal.role.value).inc()
            raise
    return principal


def tenant_only_of(request: Request) -> str | None:
    """The tenant a tenant principal is confined to (to whom other tenants' leases and sessions
    do not exist); None for admins and host agents."""
    principal = principal_of(request)
    return principal.tenant if principal.role is Role.TENANT else None


def acting_tenant(principal: Principal, asked: str | None, what: str) -> str | None:
    """The tenant a request acts for: a tenant principal always its own (asking for another is
    Forbidden), admins and host agents the one they name (None: no tenant's)."""
    if principal.role is not Role.TENANT:
        return asked
    if asked not in (None, principal.tenant):
        raise Forbidden(f"{principal.actor} may {what} only for tenant {principal.tenant!r}")
    return principal.tenant


def admin_of(request: Request) -> Principal:
    principal = principal_of(request)
    if not principal.is_admin:
        raise Forbidden(f"{principal.actor} is not an admin")
    return principal


def not_tenant_of(request: Request) -> Principal:
    """Admins and host agents: what sees hosts and the whole pool's workings."""
    principal = principal_of(request)
    if principal.role is Role.TENANT:
        raise Forbidden(f"{principal.actor} is a tenant; this needs an admin or a host agent")
    return principal


async def get_principal(request: Request) -> Principal:
    return principal_of(request)


async def get_admin(request: Request) -> Principal:
    return admin_of(request)


async def get_operator(request: Request) -> Principal:
    return not_tenant_of(request)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]
OperatorDep = Annotated[Principal, Depends(get_operator)]
