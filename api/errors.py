"""The status table: one row per PooldError class, one body shape for every error.

`{"error": "<ClassName>", "detail": "..."}`. The most specific class in the table wins. Anything
that is not a PooldError is a bug: logged, and answered 500 without internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.schemas import ErrorBody
from poold import errors

log = logging.getLogger(__name__)

STATUS: dict[type[errors.PooldError], int] = {
    errors.InvalidRequest: 422,
    errors.LeaseTooLarge: 422,
    errors.NotFound: 404,
    errors.UnknownLease: 404,
    errors.UnknownSession: 404,
    errors.UnknownPool: 404,
    errors.UnknownDevice: 404,
    errors.UnknownHost: 404,
    errors.Conflict: 409,
    errors.LeaseNotActive: 409,
    errors.IdempotencyConflict: 409,
    errors.DeviceDraining: 409,
    errors.LeaseExpired: 410,
    errors.SessionNotActive: 409,
    errors.SessionExpired: 410,
    errors.NotLeaseHolder: 403,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.QuotaExceeded: 429,
    errors.RateLimited: 429,
    errors.PayloadTooLarge: 413,
    errors.NoCapacity: 507,
    errors.LedgerUnavailable: 503,
    errors.HostFenced: 503,
    errors.DriverError: 502,
}

# Documented in OpenAPI on the routes that can raise them.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": "error body: {error, detail}"}
    for status in sorted({*STATUS.values(), 400, 500})
}


def status_of(exc: errors.PooldError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def body(error: str, detail: object) -> dict[str, object]:
    return {"error": error, "detail": detail}


def error_response(exc: errors.PooldError) -> JSONResponse:
    """The answer to a PooldError, wherever it was raised (a route, api.hotpath)."""
    headers = ({"Retry-After": str(exc.retry_after_s)}
               if isinstance(exc, errors.RateLimited) else None)
    return JSONResponse(body(type(exc).__name__, exc.detail), status_code=status_of(exc),
                        headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.PooldError)
    async def poold_error(_request: Request, exc: errors.PooldError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if request.method in {"POST", "PUT", "PATCH"} and "json" not in request.headers.get(
            "content-type", ""
        ):
            hint = "the body must be JSON sent with Content-Type: application/json"
            return JSONResponse(body("ValidationError", hint), status_code=422)
        detail = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse(body("ValidationError", detail), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # 400: a body that is not JSON at all (FastAPI's parser gives up before validation).
        name = {400: "MalformedRequest", 404: "NotFound", 405: "MethodNotAllowed"}.get(
            exc.status_code, "HTTPError")
        return JSONResponse(body(name, exc.detail), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    app.exception_handler(Exception)(crashed)


async def crashed(request: Request, exc: Exception) -> JSONResponse:
    """The answer to an endpoint's crash (Starlette's server-error handler calls it; so does
    api.hotpath, which sits outside that handler)."""
    log.exception("api.crashed path=%s", request.url.path)
    return JSONResponse(body("InternalError", "internal error; see the daemon log"), 500)
