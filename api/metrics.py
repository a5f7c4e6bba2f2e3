"""Prometheus instruments of one poold: what /metrics exposes.

Owns a private registry (one per app, so tests can build many apps in one process), the counters
and histogram the API edge and the daemon's tasks feed, the ASGI middleware that times and
counts lease operations at the edge, and collectors that read, at scrape time, capacity from the
ledger and how many grants wait for room from api.reclaim. Nothing here runs inside the ledger:
the ledger is only read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poold.errors import LedgerUnavailable
from poold.ledger import reads
from poold.ledger.ledger import Ledger
from poold.ledger.reclaims import RECLAIMER
from poold.ledger.views import DeviceView, EventView, PoolView
from poold.ledger.writer import WriterStats
from poold.types import DeviceState, EventKind

OPERATIONS = ("grant", "keepalive", "release", "revoke")
# Why a lease was taken back from its holder without a release (see reclaim_reason).
RECLAIM_REASONS = ("lost", "host_lost", "fenced", "expired", "elastic")
# The events a reclaim is recorded by.
RECLAIM_EVENTS = (EventKind.LEASE_LOST, EventKind.LEASE_EXPIRED, EventKind.LEASE_REVOKED)
# Grants and renewals take a group commit (about a millisecond) and up to a fsync under load.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
# Paths the edge does not count: probes and scrapes, which count themselves.
UNCOUNTED = frozenset({"/metrics", "/readyz", "/healthz"})
MAX_ERROR_BODY = 4096


class Metrics:
    """The instruments; with a `ledger`, also capacity read from it at every scrape."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        # No `_created` series beside every counter and histogram: in the text format each is
        # one more series to store, for a start time nobody here reads. (Process-wide, and
        # poold is the process.)
        disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped upstream
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        if ledger is not None:
            # First, so a failed read it counts shows in the same scrape's ledger errors.
            r.register(CapacityCollector(ledger, self))
            r.register(WriterCollector(ledger.writer.stats))
        self.lease_ops = Counter(
            "poold_lease_operations", "Lease operations answered by the API, by outcome: ok or "
            "the error class", ["operation", "outcome"], registry=r)
        self.lease_latency = Histogram(
            "poold_lease_operation_duration_seconds", "Time to answer a lease operation",
            ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.expiries = Counter(
            "poold_lease_expiries", "Expired leases the reaper finalised", registry=r)
        self.reclaims = Counter(
            "poold_lease_reclaims", "Leases this host took back from their holders without a "
            "release, by reason: lost (their device vanished or changed), host_lost (held by a "
            "host silent past host_ttl + grace), fenced (this host's own, after it lost the "
            "ledger for host_ttl), expired (past expires_at, taken by a grant short of room "
            "before a reaper finalised them), elastic (elastic leases asked back for a waiting "
            "grant and not given back by the deadline)", ["reason"], registry=r)
        self.reclaim_asked_bytes = Counter(
            "poold_reclaim_asked_bytes", "Bytes of elastic leases this host asked their holders "
            "to give back, for grants waiting for room", registry=r)
        self.reclaim_given_bytes = Counter(
            "poold_reclaim_given_bytes", "Bytes of elastic leases asked back that their holders "
            "released (DELETE /v1/leases/{id}, or closing their session) before the deadline",
            registry=r)
        self.grant_wait = Histogram(
            "poold_grant_wait_seconds", "How long grants that found no room waited (wait_s) "
            "before they were placed or refused", buckets=LATENCY_BUCKETS, registry=r)
        self.ledger_errors = Counter(
            "poold_ledger_errors", "LedgerUnavailable seen, by where: api, reaper, rescan, "
            "probe, metrics", ["source"], registry=r)
        self.scrubbed = Counter(
            "poold_scrubbed_bytes", "Bytes of ended leases zeroed before reuse", registry=r)
        self.scrubs = Counter(
            "poold_scrubs", "Ended leases whose bytes were zeroed and freed", registry=r)
        self.scrub_remaining = Gauge(
            "poold_scrub_remaining_bytes", "Bytes of ended leases this host's scrubber has "
            "still to zero before they can be granted again (set at each pass, lowered as it "
            "zeroes)", registry=r)
        self.rescans = Counter(
            "poold_rescans", "Inventory rescans, by trigger and outcome", ["trigger", "outcome"],
            registry=r)
        self.pruned = Counter(
            "poold_pruned_rows", "Ledger rows this host pruned past the retention age, by "
            "table: leases (ended, with their idempotency keys), events, claims",
            ["table"], registry=r)
        self.rate_limited = Counter(
            "poold_rate_limited_requests", "Requests refused 429 RateLimited, by the "
            "principal's role", ["role"], registry=r)
        self.limits = Gauge(
            "poold_limit", "Configured limits: rate_limit_per_s, rate_limit_burst, "
            "default_tenant_max_bytes, default_tenant_max_leases (-1: unlimited)", ["limit"],
            registry=r)
        # Present from the start, so rate() sees the first one; kept, so the hot path skips the
        # label lookup.
        self.ok = {op: self.lease_ops.labels(op, "ok") for op in OPERATIONS}
        self.latency = {op: self.lease_latency.labels(op) for op in OPERATIONS}
        for reason in RECLAIM_REASONS:
            self.reclaims.labels(reason)
        for table in ("leases", "events", "claims"):
            self.pruned.labels(table)

    def ledger_error(self, source: str) -> None:
        self.ledger_errors.labels(source).inc()

    def publish_limits(self, **limits: float | None) -> None:
        """The configured limits, by name (-1: none)."""
        for name, value in limits.items():
            self.limits.labels(name).set(-1 if value is None else value)


def reclaim_reason(event: EventView, host_id: str) -> str | None:
    """The reason (RECLAIM_REASONS) for which host `host_id` took back the lease whose end
    `event` records; None when the event is no reclaim, or another host's."""
    if event.kind == EventKind.LEASE_LOST:
        if event.actor == "inventory":  # its device, on the host that scanned it
            return "lost" if event.host == host_id else None
        if event.details.get("by") != host_id:
            return None
        return "fenced" if event.host == host_id else "host_lost"
    if event.kind == EventKind.LEASE_EXPIRED and event.details.get("expired_by") == host_id:
        return "expired"
    if event.kind == EventKind.LEASE_REVOKED and event.actor == RECLAIMER and \
            event.host == host_id:
        return "elastic"
    return None


class CapacityCollector(Collector):
    """Bytes by state per pool and per device, read from the ledger when scraped."""

    def __init__(self, ledger: Ledger, metrics: Metrics) -> None:
        self._ledger = ledger
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # dynamic: the registry must not call collect() at registration

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("poold_ledger_up", "1 when the ledger answered this scrape's read")
        try:
            devices, pools = self._ledger.read(
                lambda s, now: (reads.devices(s, now), reads.pools(s, now)))
        except LedgerUnavailable:
            self._metrics.ledger_error("metrics")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _pool_families(pools)
        yield from _device_families(devices)


class GrantsWaitingCollector(Collector):
    """Grants waiting for room now, by pool, counted when scraped (api.reclaim keeps them)."""

    def __init__(self, waiting_by_pool: Callable[[], dict[str, int]]) -> None:
        self._waiting_by_pool = waiting_by_pool

    def describe(self) -> list[Metric]:
        return []  # dynamic, as the capacity collector

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "poold_grants_waiting", "Grants waiting for room now (wait_s), by pool: answered "
            "in order of arrival, the first asking elastic holders to give back", labels=["pool"])
        for pool, count in sorted(self._waiting_by_pool().items()):
            family.add_metric([pool], count)
        yield family


class WriterCollector(Collector):
    """The ledger writer's group commit, read from its counters when scraped: commands per
    batch is how many requests one commit acknowledges; seconds per batch, how long the single
    writer is busy with one."""

    def __init__(self, stats: WriterStats) -> None:
        self._stats = stats

    def describe(self) -> list[Metric]:
        return []  # dynamic, as the capacity collector

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        for name, doc, value in (
                ("poold_ledger_batches", "Transactions the ledger writer ran (group commits)",
                 stats.batches),
                ("poold_ledger_batch_commands", "Commands the ledger writer ran in them",
                 stats.commands),
                ("poold_ledger_batch_seconds", "Time the ledger writer spent running them, "
                 "from the first statement to the commit", stats.busy_s)):
            yield CounterMetricFamily(name, doc, value=value)


def _pool_families(pools: list[PoolView]) -> Iterator[Metric]:
    size = GaugeMetricFamily("poold_pool_bytes", "Pool capacity by state: size, claimed, leased, "
                             "scrubbing (ended, being zeroed), free (unclaimed), available "
                             "(neither leased nor scrubbing)", labels=["pool", "state"])
    live = GaugeMetricFamily("poold_pool_live_leases", "Active leases in the pool",
                             labels=["pool"])
    for p in pools:
        for state, value in (("size", p.size), ("claimed", p.claimed_bytes),
                             ("leased", p.leased_bytes), ("scrubbing", p.scrubbing_bytes),
                             ("free", p.free_bytes),
                             ("available", p.available_bytes)):
            size.add_metric([p.name, state], value)
        live.add_metric([p.name], p.live_leases)
    yield size
    yield live


def _device_families(devices: list[DeviceView]) -> Iterator[Metric]:
    size = GaugeMetricFamily("poold_device_bytes", "Device capacity by state: size, claimed, "
                             "leased, scrubbing, free (unclaimed)",
                             labels=["host", "pool", "device", "state"])
    online = GaugeMetricFamily("poold_device_online", "1 when the device is online (not "
                               "missing or draining)", labels=["host", "pool", "device"])
    for d in devices:
        key = [d.host or "", d.pool, d.devname]
        for state, value in (("size", d.size), ("claimed", d.claimed_bytes),
                             ("leased", d.leased_bytes), ("scrubbing", d.scrubbing_bytes),
                             ("free", d.free_bytes)):
            size.add_metric([*key, state], value)
        online.add_metric(key, 1 if d.state == DeviceState.ONLINE else 0)
    yield size
    yield online


def lease_operation(method: str, path: str) -> str | None:
    """The lease operation a request is, by method and path; None for anything else."""
    if not path.startswith("/v1/leases"):
        return None
    parts = path.strip("/").split("/")  # v1, leases, [id, [action]]
    if parts[1] != "leases":
        return None
    if method == "POST" and len(parts) == 2:
        return "grant"
    if method == "DELETE" and len(parts) == 3:
        return "release"
    if method == "POST" and len(parts) == 4 and parts[3] in {"keepalive", "revoke"}:
        return parts[3]
    return None


class EdgeMetricsMiddleware:
    """Times and counts lease operations, and counts LedgerUnavailable answers on any route.

    Pure ASGI (no BaseHTTPMiddleware): it only watches the status and, for errors, the small JSON
    body, whose `error` names the outcome.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED:
            await self.app(scope, receive, send)
            return
        operation = lease_operation(scope["method"], scope["path"])
        seen = _Response()

        async def watch(message: Message) -> None:
            seen.observe(message)
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, watch)
        finally:
            record_answer(self.metrics, operation, seen.error(), time.perf_counter() - started)


def record_answer(metrics: Metrics, operation: str | None, error: str | None,
                  elapsed: float) -> None:
    """What the edge counts of one answer (`error`: None for a success, else the error class
    it names); api.hotpath records its own answers through this too."""
    if error == "LedgerUnavailable":
        metrics.ledger_error("api")
    if operation is not None:
        (metrics.ok[operation] if error is None
         else metrics.lease_ops.labels(operation, error)).inc()
        metrics.latency[operation].observe(elapsed)


def answered_error(status: int, body: bytes) -> str | None:
    """The outcome an answer names: None for a success, else its body's `error` (or HTTP<status>);
    status 0, nothing answered (the app raised), is an InternalError."""
    seen = _Response()
    seen.status, seen.body = status, body[:MAX_ERROR_BODY]
    return seen.error()


class _Response:
    __slots__ = ("body", "status")

    def __init__(self) -> None:
        self.status = 0  # 0: the app raised before answering
        self.body = b""

    def observe(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        elif message["type"] == "http.response.body" and self.status >= 400:
            self.body = (self.body + message.get("body", b""))[:MAX_ERROR_BODY]

    def error(self) -> str | None:
        """None for a success, else the error class the body names."""
        if 0 < self.status < 400:
            return None
        if self.status == 0:
            return "InternalError"
        try:
            payload: Any = json.loads(self.body)
            name = payload["error"]
        except (ValueError, KeyError, TypeError):
            return f"HTTP{self.status}"
        return name if isinstance(name, str) and name.isidentifier() else f"HTTP{self.status}"
