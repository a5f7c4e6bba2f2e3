"""The lease hot path, routed without FastAPI's router and ahead of the middleware stack.

Grant, release and the two keepalives are most of what a busy daemon answers. Through FastAPI
each paid for the router's walk over every route (FastAPI 0.165 checks each included router's
routes in turn, with per-route scope bookkeeping), the exception and exit-stack middlewares and
the dependency solver: about 0.3 ms of CPU per request before the endpoint ran, more than the
ledger's own work for a grant. Each middleware it crossed also wrapped every message it sent.

This layer is the app's outermost (api.app calls it before FastAPI's own `__call__`, which
checks its telemetry settings on every request, and Starlette's server-error handler, which wraps
every message sent), and answers those four routes itself: it matches the path with one
regular expression, reads and validates the body with the route's own schema, and calls the
route's own endpoint function, whose response is the one FastAPI would send. It does itself what
the two middlewares it skips do for these routes: the edge metrics (api.metrics.record_answer)
and the body limit, by handing an oversized body on to the stack, whose api.limits refuses it.
Whatever it does not take on as it is (another route, a malformed path, a body that is not plain
valid JSON of the schema) goes on to the stack with the body it read handed over unchanged, so
every refusal keeps FastAPI's exact answer. A PooldError the endpoint raises is answered by the
error table (api.errors), as FastAPI's handler would; any other exception is answered by
api.errors' crash handler, as Starlette's server-error handler would, and rises on to the server.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import crashed, error_response
from api.limits import content_length
from api.metrics import Metrics, answered_error, record_answer
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


@dataclass(frozen=True, slots=True)
class _Route:
    schema: type[BaseModel] | None  # of its body
    required: bool                  # a body must be sent
    call: Call
    operation: str | None           # what the edge metrics count it as (api.metrics.OPERATIONS)


# (method, collection, has an id, keepalive) -> the route
_ROUTES: dict[tuple[str, str, bool, bool], _Route] = {
    ("POST", "leases", False, False):
        _Route(LeaseRequest, True, lambda request, _, body: leases.grant_lease(body, request),
               "grant"),
    ("DELETE", "leases", True, False):
        _Route(None, False, lambda request, lease_id, _: leases.release_lease(lease_id, request),
               "release"),
    ("POST", "leases", True, True):
        _Route(KeepaliveRequest, False,
               lambda request, lease_id, body: leases.keepalive(lease_id, request, body),
               "keepalive"),
    ("POST", "sessions", True, True):
        _Route(SessionKeepalive, False,
               lambda request, session_id, body: sessions.keepalive(session_id, request, body),
               None),
}
_NOT_TAKEN = object()


class HotRoutes:
    """`metrics`: where the edge counts these routes' answers (None: not counted);
    `max_body_bytes`: a body over it is handed on for the body limit to refuse (None: none)."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None,
                 max_body_bytes: int | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _route(scope) if scope["type"] == "http" else None
        if found is None or self._over_limit(content_length(scope)):
            await self.app(scope, receive, send)
            return
        route, object_id = found
        started = time.perf_counter()
        raw, complete = await _body(receive, self.max_body_bytes)
        if raw is None:  # the client went away: nobody to answer (the edge counted it so)
            self._record(route, "InternalError", started)
            return
        body = _NOT_TAKEN if not complete else (
            _parse(scope, raw, route.schema, route.required) if route.schema is not None else None)
        if body is _NOT_TAKEN:
            await self.app(scope, _replaying(raw, complete, receive), send)
            return
        try:
            try:
                response = await route.call(Request(scope, receive), object_id, body)
            except PooldError as exc:
                response = error_response(exc)
            except Exception as exc:
                # The endpoint crashed before answering: the answer Starlette's server-error
                # handler gives (this layer sits outside it), then on to the server, as it does.
                await (await crashed(Request(scope), exc))(scope, receive, send)
                raise
            await response(scope, receive, send)
        except BaseException:
            self._record(route, "InternalError", started)
            raise
        status = response.status_code
        self._record(route, None if status < 400 else answered_error(status, bytes(response.body)),
                     started)

    def _over_limit(self, size: int | None) -> bool:
        return size is not None and self.max_body_bytes is not None and size > self.max_body_bytes

    def _record(self, route: _Route, error: str | None, started: float) -> None:
        if self.metrics is not None:
            record_answer(self.metrics, route.operation, error, time.perf_counter() - started)


def _route(scope: Scope) -> tuple[_Route, str | None] | None:
    if scope.get("root_path"):
        return None
    found = _PATH.fullmatch(scope["path"])
    if found is None:
        return None
    collection, object_id, keepalive = found.groups()
    route = _ROUTES.get((scope["method"], collection, object_id is not None, keepalive is not None))
    return None if route is None else (route, object_id)


async def _body(receive: Receive, max_bytes: int | None) -> tuple[bytes | None, bool]:
    """The body, and whether it is whole: not when it grew past `max_bytes` (what was read so
    far is returned); None when the client went away."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if max_bytes is not None and size > max_bytes:
            return b"".join(chunks), False


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


def _replaying(raw: bytes, complete: bool, receive: Receive) -> Receive:
    """The body already read, once, then the connection's own messages (the rest of an
    incomplete body, a disconnect)."""
    pending = [raw]

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": not complete}
        return await receive()
    return replay
