"""Who is asking: every request resolves to one `Principal`.

A bearer token (`Authorization: Bearer pd_<id>_<secret>`) names a token row in the ledger; a
request on the daemon's UNIX socket without one is identified by its peer's uid (SO_PEERCRED,
see poold.daemon.peercred) and mapped to a tenant or admin by config. With no authenticator
installed (auth off: tests, or `auth = "off"` in the config) everyone is an admin.

Routes declare what they need with `PrincipalDep` (anyone authenticated) or `AdminDep`; hot-path
routes call `principal_of` inline (see api.routers.leases for why).
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends, Request

from poold.errors import Forbidden
from poold.types import Principal, Role

# What everyone is when auth is off.
OPEN = Principal(name="open", role=Role.ADMIN)
_SCOPE_KEY = "poold.principal"


class Authenticator(Protocol):
    def authenticate(self, request: Request) -> Principal:
        """The request's principal; raises Unauthenticated when it has none."""


def principal_of(request: Request) -> Principal:
    """Resolved once per request and kept in the scope."""
    found = request.scope.get(_SCOPE_KEY)
    if isinstance(found, Principal):
        return found
    auth: Authenticator | None = getattr(request.app.state, "auth", None)
    principal = OPEN if auth is None else auth.authenticate(request)
    request.scope[_SCOPE_KEY] = principal
    return principal


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
