"""The lease hot path, routed without FastAPI's router.

Grant, release and the two keepalives are most of what a busy daemon answers. Through FastAPI
each paid for the router's walk over every route (FastAPI 0.165 checks each included router's
routes in turn, with per-route scope bookkeeping), the exception and exit-stack middlewares and
the dependency solver: about 0.3 ms of CPU per request before the endpoint ran, more than the
ledger's own work for a grant.

This middleware sits inside the body limit and the edge metrics (so both apply as before) and
answers those four routes itself: it matches the path with one regular expression, reads and
validates the body with the route's own schema, and calls the route's own endpoint function,
whose response is the one FastAPI would send. Whatever it does not take on as it is (another
route, a malformed path, a body that is not plain valid JSON of the schema) goes on to FastAPI
with the body it read handed over unchanged, so every refusal keeps FastAPI's exact answer. A
PooldError the endpoint raises is answered by the error table (api.errors), as FastAPI's
handler would; anything else rises to the same server-error handler as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from api.routers import leases, sessions
from api.schemas import KeepaliveRequest, LeaseRequest, SessionKeepalive
from poold.errors import PooldError
from poold.types import LEASE_ID_PATTERN

# /v1/leases, /v1/leases/<id>, /v1/leases/<id>/keepalive, /v1/sessions/<id>/keepalive, where an
# id is what api.routers' `known` accepts (any other id goes to FastAPI, which refuses it).
_ID = LEASE_ID_PATTERN.removeprefix("^").removesuffix("$")  # a session id has the same form
_PATH = re.compile(rf"/v1/(leases|sessions)(?:/({_ID})(/keepalive)?)?")

# The route's own endpoint, called as FastAPI would call it: (request, id, body) -> Response.
Call = Callable[[Request, Any, Any], Awaitable[Response]]
# (method, collection, has an id, keepalive) -> body schema, body required, endpoint
_ROUTES: dict[tuple[str, str, bool, bool], tuple[type[BaseModel] | None, bool, Call]] = {
    ("POST", "leases", False, False):
        (LeaseRequest, True, lambda request, _, body: leases.grant_lease(body, request)),
    ("DELETE", "leases", True, False):
        (None, False, lambda request, lease_id, _: leases.release_lease(lease_id, request)),
    ("POST", "leases", True, True):
        (KeepaliveRequest, False,
         lambda request, lease_id, body: leases.keepalive(lease_id, request, body)),
    ("POST", "sessions", True, True):
        (SessionKeepalive, False,
         lambda request, session_id, body: sessions.keepalive(session_id, request, body)),
}
_NOT_TAKEN = object()


class HotRoutes:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _route(scope) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        (schema, required, call), object_id = route
        raw = await _body(receive)
        if raw is None:  # the client went away (or the body limit refused it): nobody to answer
            return
        body = _parse(scope, raw, schema, required) if schema is not None else None
        if body is _NOT_TAKEN:
            await self.app(scope, _replaying(raw, receive), send)
            return
        try:
            response = await call(Request(scope, receive), object_id, body)
        except PooldError as exc:
            response = error_response(exc)
        await response(scope, receive, send)


def _route(scope: Scope) -> tuple[tuple[type[BaseModel] | None, bool, Call], str | None] | None:
    if scope.get("root_path"):
        return None
    found = _PATH.fullmatch(scope["path"])
    if found is None:
        return None
    collection, object_id, keepalive = found.groups()
    route = _ROUTES.get((scope["method"], collection, object_id is not None, keepalive is not None))
    return None if route is None else (route, object_id)


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse(scope: Scope, raw: bytes, schema: type[BaseModel], required: bool) -> Any:
    """The validated body, None for an optional body not sent, or _NOT_TAKEN for anything
    FastAPI should judge (and word the refusal of) itself."""
    if not raw:
        return _NOT_TAKEN if required else None
    if not _is_json(scope):
        return _NOT_TAKEN
    try:
        return schema.model_validate(json.loads(raw))
    except (ValueError, ValidationError):  # JSONDecodeError and UnicodeDecodeError included
        return _NOT_TAKEN


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            media_type: bytes = value.split(b";", 1)[0].strip().lower()
            return media_type == b"application/json"
    return False


def _replaying(raw: bytes, receive: Receive) -> Receive:
    """The body already read, once, then the connection's own messages (a disconnect)."""
    pending = [raw]

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()
    return replay
