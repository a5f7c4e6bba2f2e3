"""Serves the admin UI at /ui: one HTML page and its static assets, vendored in the package.

The assets are public (they hold no data); every API call the page makes carries the admin's
bearer token, which the page keeps in sessionStorage. The page is a single document with hash
routes (#/overview, #/devices, ...), so the server knows only three paths. What each page shows
is the API's JSON as it is; this module owns no data and no logic beyond serving files.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.staticfiles import PathLike
from starlette.types import Scope

STATIC = Path(__file__).resolve().parent / "static"

# The page loads only its own files and talks only to its own origin; no inline script or style
# (the scripts set styles through the CSSOM, which style-src does not govern).
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Always revalidate: a daemon upgrade must not leave an old page talking to a new API.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
def ui_root() -> RedirectResponse:
    return RedirectResponse("ui/", status_code=308)


@router.get("/ui/")
def ui_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)


class StaticAssets(StaticFiles):
    """StaticFiles with the same no-cache and nosniff headers as the page."""

    def file_response(self, full_path: PathLike, stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update({"X-Content-Type-Options": "nosniff",
                                 "Cache-Control": "no-cache"})
        return response


def install(app: FastAPI) -> None:
    """Add the UI's routes to `app`: /ui (redirect), /ui/ (the page), /ui/static/* (assets)."""
    app.include_router(router)
    app.mount("/ui/static", StaticAssets(directory=STATIC), name="ui-static")
