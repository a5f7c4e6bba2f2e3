"""Tenants, their quotas, and the bearer tokens that name principals.

Quotas are checked inside the grant's transaction (leases.grant) with the tenant's row locked, so
concurrent grants on one host (one writer) and on several hosts (row lock on PostgreSQL) cannot
together pass a quota that each alone respects.

Revocations reach every daemon on a PostgreSQL ledger as they commit (`RevocationFeed`), so a
daemon's cache of looked-up tokens (api.auth) never outlives a revocation made through another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from select import select as wait_readable

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo
from psycopg.rows import TupleRow
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from poold.errors import InvalidRequest, UnknownTenant, UnknownToken
from poold.ledger import queries as q
from poold.ledger.tx import Tx
from poold.models import Tenant, Token
from poold.osthread import name_this_thread
from poold.security import new_token, secret_digest
from poold.types import EventKind, Role

log = logging.getLogger(__name__)

# NOTIFY channel of revoked token ids (PostgreSQL; one per database, whatever the schema: a
# listener in another schema only drops an id it never cached).
REVOKED_CHANNEL = "poold_token_revoked"

@dataclass(frozen=True, slots=True)
class TokenView:
    id: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    revoked_at: datetime | None

    @classmethod
    def build(cls, token: Token) -> TokenView:
        return cls(id=token.id, name=token.name, role=Role(token.role), tenant=token.tenant,
                   created_at=token.created_at, created_by=token.created_by,
                   revoked_at=token.revoked_at)


@dataclass(frozen=True, slots=True)
class TenantView:
    name: str
    max_bytes: int | None
    max_leases: int | None
    leased_bytes: int
    live_leases: int


@dataclass(frozen=True, slots=True)
class TokenSecret:
    """What `lookup` needs to judge a bearer: its digest, whom it names, whether revoked."""

    name: str
    role: Role
    tenant: str | None
    secret_sha256: str
    revoked: bool


# --- tokens -------------------------------------------------------------------------------------


def create_token(tx: Tx, *, name: str, role: Role, tenant: str | None, actor: str
                 ) -> tuple[TokenView, str]:
    """A new token and its bearer string, which exists nowhere else: hand it out once."""
    if (role is Role.TENANT) != (tenant is not None):
        raise InvalidRequest("a tenant token names its tenant; admin and agent tokens name none")
    if tenant is not None:
        ensure_tenant(tx, tenant)
    token_id, secret, bearer = new_token()
    token = Token(id=token_id, name=name, role=role.value, tenant=tenant,
                  secret_sha256=secret_digest(secret), created_at=tx.now, created_by=actor)
    tx.session.add(token)
    tx.session.flush()
    tx.event(EventKind.TOKEN_CREATED, actor, host_id=tx.host_id, token=token_id, name=name,
             role=role.value, tenant=tenant)
    return TokenView.build(token), bearer


def revoke_token(tx: Tx, token_id: str, actor: str) -> TokenView:
    """Idempotent; the token is refused from the next request on."""
    token = tx.session.get(Token, token_id)
    if token is None:
        raise UnknownToken(f"no token {token_id!r}")
    if token.revoked_at is None:
        token.revoked_at = tx.now
        tx.event(EventKind.TOKEN_REVOKED, actor, host_id=tx.host_id, token=token_id,
                 name=token.name)
        q.events.notify(tx.conn, REVOKED_CHANNEL, token_id)
    return TokenView.build(token)


def tokens(session: Session, _now: datetime) -> list[TokenView]:
    found = session.scalars(select(Token).order_by(Token.created_at, Token.id))
    return [TokenView.build(token) for token in found]


def lookup(session: Session, token_id: str) -> TokenSecret | None:
    token = session.get(Token, token_id)
    if token is None:
        return None
    return TokenSecret(name=token.name, role=Role(token.role), tenant=token.tenant,
                       secret_sha256=token.secret_sha256, revoked=token.revoked_at is not None)


# --- tenants and quotas ---------------------------------------------------------------------


def ensure_tenant(tx: Tx, name: str) -> None:
    """A tenant first named by an admin (a token, a quota in a pool) exists from now on, with
    the default quotas (Settings.default_tenant_*), as one first named by a grant does."""
    if tx.session.get(Tenant, name) is None:
        max_bytes, max_leases = tx.tenant_defaults
        tx.session.add(Tenant(name=name, created_at=tx.now, max_bytes=max_bytes,
                              max_leases=max_leases))


def set_tenant(tx: Tx, name: str, *, max_bytes: int | None, max_leases: int | None,
               actor: str) -> TenantView:
    """Create the tenant or replace its quotas (None: unlimited). Leases already granted
    stay; only new grants are judged against the new quotas."""
    tenant = tx.session.get(Tenant, name)
    if tenant is None:
        tenant = Tenant(name=name, created_at=tx.now)
        tx.session.add(tenant)
    tenant.max_bytes, tenant.max_leases = max_bytes, max_leases
    tx.session.flush()
    tx.event(EventKind.TENANT_CHANGED, actor, host_id=tx.host_id, tenant=name,
             max_bytes=max_bytes, max_leases=max_leases)
    return _tenant_view(tx.session, tenant, tx.now)


def tenants(session: Session, now: datetime) -> list[TenantView]:
    found = session.scalars(select(Tenant).order_by(Tenant.name))
    return [_tenant_view(session, tenant, now) for tenant in found]


def tenant(session: Session, name: str, now: datetime) -> TenantView:
    found = session.get(Tenant, name)
    if found is None:
        raise UnknownTenant(f"no tenant {name!r}")
    return _tenant_view(session, found, now)


def _tenant_view(session: Session, tenant: Tenant, now: datetime) -> TenantView:
    leased, live = q.tenants.tenant_usage(session.connection(), tenant.name, now)
    return TenantView(name=tenant.name, max_bytes=tenant.max_bytes,
                      max_leases=tenant.max_leases, leased_bytes=leased, live_leases=live)


# --- revocations as they commit (PostgreSQL) -------------------------------------------------
# revoke_token NOTIFYs REVOKED_CHANNEL with the token id; PostgreSQL delivers it to every
# listening daemon when, and only if, the revocation commits. Each daemon's feed drops the id
# from its cache and NOTIFYs HEARD_CHANNEL with it; the daemon that revoked waits for every
# listener to have heard (`confirm`) before it answers, so no daemon accepts the token on a
# request sent after the revocation's answer, and no request pays for it.

HEARD_CHANNEL = "poold_token_revocation_heard"
LISTENER_PREFIX = "poold-revocations@"  # application_name of every feed's connection
# libpq settings of the listening connection: fail fast, and find a dead server by TCP
# keepalive in about 10 s (as poold.db does for the ledger's own connections).
_LISTEN_CONNECT_ARGS: dict[str, int] = {"connect_timeout": 5, "keepalives": 1,
                                        "keepalives_idle": 4, "keepalives_interval": 2,
                                        "keepalives_count": 3}
RETRY_S = (0.1, 5.0)  # first and longest wait between attempts to listen again
# The listening thread looks at its connection at least this often even when nothing arrives
# (a safety net: a broken connection is otherwise found by the read that fails).
IDLE_CHECK_S = 5.0
# How long a revocation's answer waits for the other daemons to have heard it. One that has not
# by then (stopped, partitioned) still reads its socket before it next trusts its cache.
CONFIRM_TIMEOUT_S = 2.0
_CONFIRM_POLL_S = 0.05  # how often the wait looks again at who listens (daemons come and go)
# Confirmations kept (every daemon hears every one): a revocation's may arrive before its
# revoker starts to wait, so they are kept until it does, the oldest dropped past this many.
_HEARD_KEPT = 1024
_LISTENERS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
              f"AND application_name LIKE '{LISTENER_PREFIX}%'")


class RevocationFeed:
    """Revoked token ids from PostgreSQL's NOTIFY, as the revoking transactions commit.

    `drain` takes in what has arrived without waiting (one non-blocking read of the listening
    socket, no round trip), and says it heard each revocation. A listening thread (`start`)
    drains while no request does and listens again after the connection breaks. While not
    listening, `drain` answers False: nothing cached may be trusted; on listening again
    `on_reset` drops everything cached, since revocations made in between were not heard.
    """

    def __init__(self, url: str, host_id: str) -> None:
        self._conninfo = make_conninfo(
            make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
            application_name=f"{LISTENER_PREFIX}{host_id}", **_LISTEN_CONNECT_ARGS)
        self._on_revoked: Callable[[str], None] = lambda _id: None
        self._on_reset: Callable[[], None] = lambda: None
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._lock = threading.Lock()
        self._heard = threading.Condition(self._lock)
        self._heard_by: dict[str, set[int]] = {}  # token id -> backend pids that heard it
        self._unheard: list[str] = []  # revocations received, not yet said to be heard
        self._stop = threading.Event()
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    def subscribe(self, on_revoked: Callable[[str], None], on_reset: Callable[[], None]) -> None:
        """Who is told: of each revoked id, and that anything cached may be stale."""
        self._on_revoked, self._on_reset = on_revoked, on_reset

    @property
    def listening(self) -> bool:
        return self._conn is not None

    def drain(self) -> bool:
        """Apply every revocation received so far; False while not listening."""
        with self._lock:
            conn = self._conn
            if conn is None:
                return False
            try:
                conn.pgconn.consume_input()
                while (note := conn.pgconn.notifies()) is not None:
                    self._take(note.relname.decode(), note.extra.decode(), note.be_pid)
                while self._unheard:  # a NOTIFY each; more may arrive meanwhile (_take)
                    conn.execute("SELECT pg_notify(%s, %s)", (HEARD_CHANNEL,
                                                              self._unheard.pop()))
                if conn.pgconn.status != pq.ConnStatus.OK:
                    raise psycopg.OperationalError("connection lost")
            except psycopg.Error as exc:
                self._drop(f"{type(exc).__name__}: {exc}")
                return False
            return True

    def confirm(self, token_id: str, timeout: float = CONFIRM_TIMEOUT_S) -> set[int]:
        """Wait until every listening daemon has heard the (committed) revocation of
        `token_id`; returns the backend pids of those that did not within `timeout`."""
        deadline = time.monotonic() + timeout
        waiting: set[int] = set()
        while True:  # one look at least, however late it starts: a stall is no confirmation
            self.drain()
            with self._lock:
                if self._conn is None:
                    break  # nobody to ask: the others' own drains are all there is
                try:
                    waiting = {int(r[0]) for r in self._conn.execute(_LISTENERS)}
                except psycopg.Error:
                    break  # the listening thread finds out and listens again
                waiting -= self._heard_by.get(token_id, set())
                left = deadline - time.monotonic()
                if not waiting or left <= 0:
                    break
                self._heard.wait(min(_CONFIRM_POLL_S, left))
        with self._lock:
            self._heard_by.pop(token_id, None)
        return waiting

    def start(self) -> None:
        self._stop.clear()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="revocations", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout)
        self._thread = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _take(self, channel: str, payload: str, sender: int) -> None:
        """One notification (call holding the lock)."""
        if channel == HEARD_CHANNEL:
            self._heard_by.setdefault(payload, set()).add(sender)
            while len(self._heard_by) > _HEARD_KEPT:  # others' revocations, nobody waits
                del self._heard_by[next(iter(self._heard_by))]
            self._heard.notify_all()
        else:
            self._on_revoked(payload)
            self._unheard.append(payload)

    def _run(self) -> None:
        name_this_thread()
        retry = RETRY_S[0]
        while not self._stop.is_set():
            conn = self._conn
            if conn is None:
                self._listen()
                if self._conn is not None:
                    retry = RETRY_S[0]
                else:
                    self._stop.wait(retry)
                    retry = min(retry * 2, RETRY_S[1])
                continue
            try:
                ready, _, _ = wait_readable([conn.pgconn.socket, self._wake_r], [], [],
                                            IDLE_CHECK_S)
            except (OSError, psycopg.Error):  # closed by a drain that found it broken
                ready = []
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            self.drain()

    def _listen(self) -> None:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
            conn.execute(f"LISTEN {REVOKED_CHANNEL}; LISTEN {HEARD_CHANNEL}")
        except psycopg.Error as exc:
            log.warning("auth.revocations_unheard error=%s: tokens are looked up per request",
                        f"{type(exc).__name__}: {exc}".strip())
            return
        with self._lock:
            # What arrives while psycopg itself reads (the queries drain and confirm send);
            # always with the lock held, as _take wants.
            conn.add_notify_handler(lambda n: self._take(n.channel, n.payload, n.pid))
            self._conn = conn
            self._on_reset()  # revocations committed while nobody listened were not heard
        log.info("auth.revocations_listening pid=%d", conn.info.backend_pid)

    def _drop(self, why: str) -> None:
        """Stop trusting the connection (call holding the lock)."""
        assert self._conn is not None
        conn, self._conn = self._conn, None
        self._on_reset()
        self._unheard.clear()
        with contextlib.suppress(psycopg.Error):  # broken already: closed all the same
            conn.close()
        if self._thread is not None:  # it may be waiting on the closed socket: wake it
            os.write(self._wake_w, b"x")
        log.warning("auth.revocations_unheard error=%s: tokens are looked up per request", why)
