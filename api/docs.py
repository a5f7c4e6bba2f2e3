"""/docs: the API's interactive reference (Swagger UI), served from inside the package.

FastAPI's default page loads Swagger UI from a CDN: blank on a cluster without internet, and a
third party's script in a page that holds an admin's token. Here the assets come from the
`fastapi-offline` distribution (swagger-ui-dist 5's bundle and stylesheet, packaged: a
dependency like any other, upgraded by pip; 5 reads OpenAPI 3.1, which FastAPI writes); only its
files are used, not its FastAPI wrapper. The page's one script of ours is a file of the admin
UI's static directory (no inline script), and a Content-Security-Policy keeps the page on its
own origin.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse

from api.ui.router import StaticAssets

ASSETS = Path(str(files("fastapi_offline") / "static"))
# Swagger UI styles some elements through style attributes it renders: style-src needs
# 'unsafe-inline' for those (no script may be inline); its icons are data: images.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>poold API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" href="/ui/static/favicon.svg">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/ui/static/docs.js"></script>
</body>
</html>
"""

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def docs_page() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=HEADERS)


def install(app: FastAPI) -> None:
    """/docs (the page) and /docs/assets/* (Swagger UI's files). The app is made with
    docs_url=None and redoc_url=None, so FastAPI's CDN pages are not there."""
    app.include_router(router)
    app.mount("/docs/assets", StaticAssets(directory=ASSETS), name="docs-assets")
