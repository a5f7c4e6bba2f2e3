"""Builds the FastAPI app around a Ledger handed in by the composition root."""

from __future__ import annotations

import secrets

from fastapi import FastAPI
from starlette.types import Lifespan, Receive, Scope, Send

from api import docs, errors
from api.auth import Authenticator
from api.hotpath import HotRoutes
from api.limits import BodyLimitMiddleware
from api.metrics import EdgeMetricsMiddleware, GrantsWaitingCollector, Metrics
from api.ratelimit import RateLimiter
from api.reclaim import ReclaimFeed, WaitingGrants
from api.routers import access, hosts, inventory, leases, ops, overview, pools, sessions
from api.routers.devices import router as device_router
from api.schemas import Health
from api.ui import router as ui
from poold import __version__
from poold.config import MAX_BODY_BYTES
from poold.ledger.ledger import Ledger


class _PooldApp(FastAPI):
    """FastAPI with api.hotpath's routes answered ahead of everything FastAPI and Starlette run
    for a request: HotRoutes is called first and hands what it does not take to the whole app
    (`through_stack`)."""

    hot_routes: HotRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot_routes
        if hot is None or scope["type"] != "http" or self.root_path:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self  # what Starlette sets first: the endpoints find the app's state by it
        await hot(scope, receive, send)

    async def through_stack(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


def create_app(ledger: Ledger, lifespan: Lifespan[FastAPI] | None = None,
               sysfs_root: str = "/sys", lease_key: bytes | None = None,
               metrics: Metrics | None = None, probe_timeout_s: float = 5.0,
               auth: Authenticator | None = None,
               max_body_bytes: int = MAX_BODY_BYTES,
               rate_limiter: RateLimiter | None = None,
               reclaim_grace_s: float = 5.0, hot_routes: bool = True) -> FastAPI:
    """`lifespan` lets the composition root run its background tasks with the server;
    `lease_key` signs lease tokens (a fresh one per app when not given); `metrics` is shared
    with the daemon's tasks (a fresh set per app when not given); `probe_timeout_s` bounds
    /readyz; `auth` resolves who asks (None: auth off, everyone is an admin); a request body
    over `max_body_bytes` is refused (413) before it is read; `rate_limiter` limits each
    non-admin principal's requests (None: no limit); `reclaim_grace_s` is how long a holder
    asked to give an elastic lease back has before it is revoked."""
    app = _PooldApp(title="poold", version=__version__, lifespan=lifespan,
                  description="Lease CXL and DAX memory for KV-cache offload.",
                  docs_url=None, redoc_url=None)  # /docs: api.docs, no CDN
    app.state.ledger = ledger
    app.state.sysfs_root = sysfs_root
    app.state.lease_key = lease_key or secrets.token_bytes(32)
    metrics = metrics or Metrics(ledger)
    app.state.metrics = metrics
    app.state.probe_timeout_s = probe_timeout_s
    app.state.auth = auth
    app.state.rate_limiter = rate_limiter
    app.state.reclaim_feed = ReclaimFeed()
    app.state.waiting_grants = WaitingGrants(ledger, app.state.reclaim_feed, metrics,
                                             reclaim_grace_s)
    metrics.registry.register(GrantsWaitingCollector(app.state.waiting_grants.waiting_by_pool))
    errors.install(app)
    if hot_routes:  # it does the body limit and the edge metrics itself, for its own routes
        app.hot_routes = HotRoutes(app.through_stack, metrics, max_body_bytes)
    app.add_middleware(EdgeMetricsMiddleware, metrics=metrics)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)  # outermost: first
    app.include_router(leases.router)
    app.include_router(sessions.router)
    app.include_router(inventory.router)
    app.include_router(pools.router)
    app.include_router(hosts.router)
    app.include_router(ops.router)
    app.include_router(device_router)
    app.include_router(access.router)
    app.include_router(overview.router)
    ui.install(app)  # /ui: the admin web UI (static files; the API calls carry the token)
    docs.install(app)  # /docs: Swagger UI from the package

    @app.get("/healthz", tags=["health"])
    def healthz() -> Health:
        return Health(status="ok", host=ledger.host_id, version=__version__)

    return app
