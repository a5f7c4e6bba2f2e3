"""Daemon: settings in, a serving poold out.

The one place that builds objects: migrates the ledger, opens it, registers this host, its pool
and its devices, builds the metrics and the API, and runs the background tasks with the server:
the reaper and heartbeat, the periodic rescan, the udev watcher, the systemd watchdog and (on
PostgreSQL) the listener that hears token revocations made through other daemons. It tells
systemd (sd_notify) when the API listens and when it starts to stop. Nothing below this module
creates engines, writers, threads or tasks on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from fnmatch import fnmatch
from functools import partial
from pathlib import Path

from fastapi import FastAPI

from api.app import create_app
from api.auth import TokenAuthenticator
from api.history import CapacityHistory
from api.metrics import RECLAIM_EVENTS, Metrics, reclaim_reason
from api.ratelimit import RateLimiter
from api.routers.ops import ledger_problem
from drivers import DriverFailure
from drivers.dax import DaxRegion
from drivers.daxctl import DaxControl
from drivers.emulated import emulated_device
from drivers.sysfs import Sysfs
from drivers.topology import scan
from drivers.udev import UdevMonitor, open_monitor
from poold import db
from poold.config import Settings
from poold.daemon import reaper
from poold.daemon.access import ensure_admin_credential, peer_policy
from poold.daemon.backing import LeaseBacking
from poold.daemon.devices import DeviceOps
from poold.daemon.fdpass import FdServer
from poold.daemon.fdstore import FdStore, choose_store
from poold.daemon.hotplug import HotplugWatcher
from poold.daemon.leasemem import LeaseMemory, recover_memory
from poold.daemon.nodemem import NodeAllocator
from poold.daemon.regions import RegionLeases
from poold.daemon.scrub import GAP_S as SCRUB_GAP_S
from poold.daemon.scrub import Scrubber
from poold.daemon.sdnotify import Notifier, keep_watchdog
from poold.daemon.serving import serve
from poold.daemon.statedir import StateDir
from poold.daemon.tasks import every, when_woken
from poold.errors import LedgerUnavailable
from poold.inventory import DeviceSpec, spec_from_emulated, specs_from_topology
from poold.ledger import membership, pools, reads, registry, retention
from poold.ledger import queries as q
from poold.ledger.capacity import capacity
from poold.ledger.clock import LedgerClock
from poold.ledger.ledger import Ledger
from poold.ledger.liveness import Liveness
from poold.ledger.retention import Pruned
from poold.ledger.tenants import RevocationFeed
from poold.ledger.tx import Tx
from poold.models import Pool
from poold.security import load_or_create_key

log = logging.getLogger(__name__)

# Retention passes (each a transaction of at most PRUNE_BATCH rows of each kind) per run, so
# one run catching up on a long backlog cannot keep the writer busy for long.
PRUNE_PASSES = 20


class Daemon:
    def __init__(self, settings: Settings, clock: LedgerClock | None = None,
                 monitor: UdevMonitor | None = None, notifier: Notifier | None = None,
                 fd_store: FdStore | None = None, sysfs: Sysfs | None = None) -> None:
        """The seams tests inject: the ledger's clock, the udev monitor, systemd's notify
        socket, the fd store, and the sysfs that device changes write (a fake kernel)."""
        self.settings = settings
        self.notifier = notifier or Notifier.from_environment()
        self.state = StateDir(settings.state_dir)
        self.state.claim()  # one daemon per state directory: StateDirBusy otherwise
        # What this host's config says of the pools it names: seeds for pools the ledger does
        # not have yet; the ledger's policy wins over them after that (poold.ledger.pools).
        self.seed_policies = seed_policies(settings)
        self._disagreements_logged: set[pools.Disagreement] = set()
        # device_pools as placement rules: they seed the ledger's once (poold.ledger.membership).
        self.config_rules = [membership.Rule("device", pattern, name)
                             for pattern, name in settings.device_pools.items()]
        self._rules_disagreement_logged = False
        try:
            self._build(settings, clock, monitor, fd_store, sysfs)
        except BaseException:  # a daemon that did not start holds nothing
            if hasattr(self, "ledger"):
                self.ledger.close()
            self.state.release()
            raise

    def _build(self, settings: Settings, clock: LedgerClock | None,
               monitor: UdevMonitor | None, fd_store: FdStore | None,
               sysfs: Sysfs | None) -> None:
        if settings.sqlite_path is not None:
            self.state.private_ledger(settings.sqlite_path)
        db.upgrade(settings.ledger_url)
        self.ledger = Ledger(
            settings.ledger_url, host_id=settings.host_id, default_pool=settings.default_pool,
            clock=clock, synchronous=settings.sqlite_synchronous,
            batch_max=settings.commit_batch_max,
            liveness=Liveness(settings.host_ttl_s, settings.host_grace_s),
            tenant_defaults=(settings.default_tenant_max_bytes,
                             settings.default_tenant_max_leases),
        )
        self.ledger.start()
        self.metrics = Metrics(self.ledger)
        self._reclaims_lock = threading.Lock()
        # One device change or inventory rescan at a time: a rescan never sees a change half-done.
        self._inventory_lock = threading.Lock()
        # Admin device operations (api.routers.devices) and the regions carved per lease.
        self.ops: DeviceOps | None = None
        self.regions: RegionLeases | None = None
        self._dax_regions: Sequence[DaxRegion] = ()  # as the last discovery found them
        if settings.discover_dax:
            self.ops = DeviceOps(self.ledger, DaxControl(sysfs or Sysfs(settings.sysfs_root)),
                                 self.discover, self._reconcile, self._inventory_lock)
            self.regions = RegionLeases(self.ops, settings.manual_regions)
        self._events_seen = self._newest_event_id()
        with self._inventory_lock:
            try:
                specs: list[DeviceSpec] | None = self.discover()
            except DriverFailure:
                specs = None  # start anyway, leave devices as the ledger has them; rescans retry
            self.ledger.run(partial(self._register, specs=specs))
            self._reconcile_regions()
        self._count_reclaims()  # leases on devices that vanished while the daemon was down
        if monitor is None and settings.watch_udev and settings.discover_dax:
            monitor = open_monitor()
        self.hotplug = (HotplugWatcher(monitor, partial(self.rescan, trigger="udev"))
                        if monitor is not None else None)
        self.lease_key = load_or_create_key(settings.state_dir / "lease-token.key")
        # The memory of leases on emulated and system-ram devices: a sealed memfd each, kept
        # across restarts in the fd store; what the store no longer has is lost.
        self.memory = LeaseMemory(fd_store or choose_store(settings, self.notifier),
                                  NodeAllocator(settings.sysfs_root),
                                  huge_pages=settings.emulate_huge_pages)
        recover_memory(self.memory, self.ledger)
        self.backing = LeaseBacking(self.memory, self.regions)
        self.scrubber = Scrubber(self.ledger, self.metrics, self.memory, self.regions,
                                 full_every_s=settings.reap_interval_s)
        self.fd_server = FdServer(settings.sockets_dir / "fd.sock", self.ledger, self.lease_key,
                                  self.backing)
        self.auth: TokenAuthenticator | None = None
        self.admin_credential: Path | None = None
        # Revocations through other daemons on a PostgreSQL ledger, heard as they commit.
        self.revocations: RevocationFeed | None = None
        if settings.auth == "token":
            self.admin_credential = ensure_admin_credential(self.ledger, settings.state_dir,
                                                            settings.host_name)
            if not db.is_sqlite(settings.ledger_url):
                self.revocations = RevocationFeed(settings.ledger_url, settings.host_id)
            self.auth = TokenAuthenticator(
                self.ledger, peer_policy(settings.peer_admins, settings.peer_tenants),
                feed=self.revocations)
        self.app: FastAPI = create_app(self.ledger, lifespan=self._lifespan,
                                       sysfs_root=str(settings.sysfs_root),
                                       lease_key=self.lease_key, metrics=self.metrics,
                                       probe_timeout_s=settings.probe_timeout_s,
                                       auth=self.auth, max_body_bytes=settings.max_body_bytes,
                                       rate_limiter=_rate_limiter(settings),
                                       reclaim_grace_s=settings.reclaim_grace_s)
        self.app.state.lease_backing = self.backing
        self.app.state.seed_policies = self.seed_policies
        self.app.state.config_rules = self.config_rules
        self.capacity_history = CapacityHistory(settings.capacity_sample_s)
        self.app.state.capacity_history = self.capacity_history
        self.app.state.pool_template = self.seed_policies[settings.default_pool]
        if self.ops is not None:
            self.app.state.device_admin = self.ops
        self.metrics.publish_limits(
            rate_limit_per_s=settings.rate_limit_per_s, rate_limit_burst=settings.rate_limit_burst,
            default_tenant_max_bytes=settings.default_tenant_max_bytes,
            default_tenant_max_leases=settings.default_tenant_max_leases)

    def discover(self) -> list[DeviceSpec]:
        """Every device this host offers now: the emulated one, and dax devices from sysfs (a
        region carved per lease as one device). Call under the inventory lock: it may empty a
        pristine region's first device (poold.daemon.regions)."""
        specs = []
        s = self.settings
        if s.emulate_size:
            spec = spec_from_emulated(
                emulated_device("emu0", str(s.state_dir), s.emulate_size, s.emulate_align))
            if s.emulate_uid is not None:
                spec = replace(spec, uid=s.emulate_uid, shared=True)
            specs.append(spec)
        if s.discover_dax:
            try:
                topology = scan(s.sysfs_root)
                per_lease: set[int] = set()
                if self.regions is not None:
                    per_lease, changed = self.regions.per_lease(topology.dax_regions)
                    if changed:  # a region's first device was emptied: what sysfs says now
                        topology = scan(s.sysfs_root)
                if self.ops is not None:
                    self.ops.per_lease = per_lease
                self._dax_regions = topology.dax_regions
                specs.extend(replace(spec, shared=True) if _shared(spec, s.shared_devices)
                             else spec for spec in specs_from_topology(topology, per_lease))
            except DriverFailure:
                # One unreadable attribute must not make every device look gone: keep the
                # ledger as it is and try again at the next rescan.
                log.exception("inventory.scan_failed root=%s", s.sysfs_root)
                raise
        return specs

    def rescan(self, trigger: str = "manual") -> None:
        """Reconcile the ledger with what sysfs shows now (hotplug, periodic fallback)."""
        try:
            with self._inventory_lock:
                specs = self.discover()
                self.ledger.run(partial(self._reconcile, specs=specs))
                self._reconcile_regions()
        except Exception as exc:
            self.metrics.rescans.labels(trigger, "failed").inc()
            if isinstance(exc, LedgerUnavailable):
                self.metrics.ledger_error("rescan")
            raise
        self.metrics.rescans.labels(trigger, "ok").inc()
        self._count_reclaims()

    def _reconcile_regions(self) -> None:
        """Match the devices of the regions carved per lease to the ledger's leases on them
        (under the inventory lock, after the ledger took in the last discovery)."""
        if self.regions is not None and self.ops is not None:
            self.regions.reconcile(self.ops.per_lease, self._dax_regions)

    def _newest_event_id(self) -> int:
        newest = self.ledger.read(lambda s, _now: reads.events(s, limit=1))
        return newest[0].id if newest else 0

    def _count_reclaims(self, source: str = "rescan") -> None:
        """Count the leases this host took back from their holders since the last look, by
        reason (api.metrics.reclaim_reason): ledger commands (inventory reconciling, the reaper,
        a grant short of room) end them inside transactions, and the audit log is how the edge
        learns how many. (Past 10,000 of a kind between two looks the count falls short; the
        leases are taken back all the same.)"""
        with self._reclaims_lock:
            try:
                found = self.ledger.read(lambda s, _now: [
                    event for kind in RECLAIM_EVENTS for event in reads.events(
                        s, after_id=self._events_seen, kind=kind, limit=10_000)])
            except LedgerUnavailable:
                self.metrics.ledger_error(source)
                return  # the cursor stays: the next look counts these too
            if found:
                self._events_seen = max(e.id for e in found)
            reasons = Counter(reclaim_reason(e, self.settings.host_id) for e in found)
        for reason, count in reasons.items():
            if reason is not None:
                self.metrics.reclaims.labels(reason).inc(count)

    def _register(self, tx: Tx, specs: list[DeviceSpec] | None) -> None:
        registry.register_host(tx, self.settings.host_name)
        if specs is not None:
            self._reconcile(tx, specs)

    def _reconcile(self, tx: Tx, specs: list[DeviceSpec]) -> None:
        s = self.settings
        placed: dict[str, Pool] = {}
        for name, policy in self.seed_policies.items():
            placed[name], differ = pools.seed(tx, policy)
            for d in differ:
                if d not in self._disagreements_logged:
                    self._disagreements_logged.add(d)
                    log.warning("pool.config_disagrees pool=%s setting=%s file=%r ledger=%r: "
                                "the ledger wins (edit the pool: poold pool set, or the file)",
                                d.pool, d.setting, d.file, d.ledger)

        rules = membership.seed_rules(tx, self.config_rules)
        if rules != self.config_rules and self.config_rules and not self._rules_disagreement_logged:
            self._rules_disagreement_logged = True
            log.warning("pool.config_rules_disagree file=%s ledger=%s: the ledger's placement "
                        "rules win (edit them: poold pool rules set, or the web UI)",
                        self.config_rules, rules)
        live = {p.name: p for p in q.pools.list_pools(tx.session) if p.retired_at is None}

        def pool_for(spec: DeviceSpec) -> Pool:
            for rule in rules:
                if rule.matches(spec) and rule.pool in live:
                    return live[rule.pool]
            return placed[s.default_pool]

        registry.reconcile_devices(tx, specs, pool_for)

    def sample_capacity(self) -> None:
        self.capacity_history.add(time.time(), self.ledger.read(capacity))

    def prune(self) -> Pruned:
        """Forget what ended longer than retention_s ago (poold.ledger.retention), a bounded
        batch per transaction, until a pass finds less than a batch of anything."""
        total = Pruned()
        for _ in range(PRUNE_PASSES):
            done = self.ledger.run(partial(retention.prune, retention_s=self.settings.retention_s))
            total += done
            if not done.full:
                break
        for table, count in (("leases", total.leases), ("events", total.events),
                             ("claims", total.claims), ("sessions", total.sessions)):
            self.metrics.pruned.labels(table).inc(count)
        if total.total:
            log.info("ledger.pruned leases=%d events=%d claims=%d sessions=%d", total.leases,
                     total.events, total.claims, total.sessions)
        return total

    def tick(self) -> int:
        """One reaper tick (poold.daemon.reaper.tick: heartbeat, reaper, lost hosts, idle claims,
        a fence lifted), counted and logged; returns how many leases it finalised."""
        try:
            reaped = reaper.tick(self.ledger, self.settings.host_name, self.settings.claim_idle_s)
        except LedgerUnavailable:
            self.metrics.ledger_error("reaper")
            liveness = self.ledger.liveness
            if liveness is not None and liveness.fenced:
                log.error("host.fenced host=%s silent_s=%.1f", self.settings.host_id,
                          liveness.silent_s)
            raise
        self.metrics.expiries.inc(reaped)
        self._count_reclaims("reaper")  # lost hosts adopted, a fence's leases, grants' expiries
        return reaped

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        s = self.settings
        # The scrubber runs at start (what was left, what ended while starting), then as this
        # daemon's writer ends leases (their bytes or memfds wait for it), and each reaper
        # interval for those another host's daemon ended.
        scrub_wanted = asyncio.Event()
        scrub_wanted.set()
        self.ledger.writer.on_leases_ended = partial(_leases_ended, self.scrubber,
                                                     asyncio.get_running_loop(), scrub_wanted)
        tasks = [asyncio.create_task(every(s.reap_interval_s, "reaper", self.tick)),
                 asyncio.create_task(when_woken(scrub_wanted, s.reap_interval_s, SCRUB_GAP_S,
                                                "scrubber", self.scrubber.run_once))]
        tasks.append(asyncio.create_task(every(s.prune_interval_s, "retention", self.prune)))
        tasks.append(asyncio.create_task(every(s.capacity_sample_s, "capacity-history",
                                               self.sample_capacity)))
        if s.discover_dax:
            tasks.append(asyncio.create_task(every(s.rescan_interval_s, "rescan",
                                                   partial(self.rescan, trigger="periodic"))))
        watchdog_s = self.notifier.watchdog_period_s
        if watchdog_s is not None:
            probe = partial(ledger_problem, self.ledger, s.probe_timeout_s, self.metrics)
            tasks.append(asyncio.create_task(keep_watchdog(self.notifier, watchdog_s, probe)))
        if self.hotplug is not None:
            self.hotplug.start()
        if self.revocations is not None:
            self.revocations.start()
        self.fd_server.start()
        log.info("daemon.started host=%s listen=%s ledger=%s udev=%s watchdog_s=%s", s.host_id,
                 s.listen, self.ledger.url.split("@")[-1], self.hotplug is not None, watchdog_s)
        try:
            yield
        finally:
            self.fd_server.stop()
            if self.revocations is not None:
                self.revocations.stop()
            if self.hotplug is not None:
                self.hotplug.stop()
            self.ledger.writer.on_leases_ended = None
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.close()
            log.info("daemon.stopped host=%s", s.host_id)

    def close(self) -> None:
        """Let go of the ledger, the lease memory (the fd store keeps its copies: the next start
        takes them back) and the state directory's lock. The lifespan does this at shutdown;
        a daemon that never served (tests) is closed with it."""
        self.ledger.close()
        self.memory.close()
        self.state.release()

    def serve(self) -> None:
        """Serve the API until a signal stops it (poold.daemon.serving)."""
        serve(self.app, self.settings, self.notifier)


def _leases_ended(scrubber: Scrubber, loop: asyncio.AbstractEventLoop, event: asyncio.Event,
                  ended: dict[str, bool]) -> None:
    """The writer ended these leases (in its thread): the scrubber is told which, and woken,
    unless it is woken already. Under churn it mostly is (passes are SCRUB_GAP_S apart), and a
    wake costs the loop a self-pipe write and a turn. Skipping it loses nothing: while the event
    is set the scrubber has yet to clear it, and it takes what it was told only after clearing,
    so its next pass takes these leases too."""
    scrubber.note_ended(ended)
    if not event.is_set():
        _wake(loop, event)


def _wake(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    """Set an event of the serving loop from another thread (the ledger writer's)."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(event.set)


def _rate_limiter(s: Settings) -> RateLimiter | None:
    if s.auth != "token" or s.rate_limit_per_s is None:
        return None  # with auth off everyone is an admin, and admins are not limited
    return RateLimiter(s.rate_limit_per_s, s.rate_limit_burst)


def _shared(spec: DeviceSpec, patterns: list[str]) -> bool:
    return any(fnmatch(spec.uid, p) or fnmatch(spec.devname, p) for p in patterns)


def seed_policies(settings: Settings) -> dict[str, pools.PoolPolicy]:
    """The policy this host's config gives each pool it names (default_pool, device_pools)."""
    s = settings
    return {name: pools.PoolPolicy(
        name=name, claim_slice=s.claim_slice, default_ttl_s=s.default_ttl_s,
        max_ttl_s=s.max_ttl_s, scrub_on_release=name not in s.unscrubbed_pools,
        trusted=name in s.trusted_pools,
    ) for name in (s.default_pool, *s.device_pools.values())}
