"""Tenants, their quotas, and the bearer tokens that name principals.

Quotas are checked inside the grant's transaction (leases.grant) with the tenant's row locked, so
concurrent grants on one host (one writer) and on several hosts (row lock on PostgreSQL) cannot
together pass a quota that each alone respects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from poold.errors import InvalidRequest, UnknownTenant, UnknownToken
from poold.ledger import repository as repo
from poold.ledger.leases import Tx
from poold.models import Tenant, Token
from poold.security import new_token, secret_digest
from poold.types import EventKind, Role


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
    if tenant is not None and tx.session.get(Tenant, tenant) is None:
        tx.session.add(Tenant(name=tenant, created_at=tx.now))
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
    leased, live = repo.tenant_usage(session.connection(), tenant.name, now)
    return TenantView(name=tenant.name, max_bytes=tenant.max_bytes,
                      max_leases=tenant.max_leases, leased_bytes=leased, live_leases=live)
