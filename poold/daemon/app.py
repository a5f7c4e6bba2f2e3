"""Daemon: settings in, a serving poold out.

The one place that builds objects: migrates the ledger, opens it, registers this host, its pool
and its devices, builds the API, and runs the background tasks with the server: the reaper and
heartbeat, the periodic rescan, and the udev watcher. Nothing below this module creates engines,
writers, threads or tasks on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from fnmatch import fnmatch
from functools import partial
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from api.app import create_app
from drivers import DriverFailure
from drivers.emulated import default_backing_dir, ensure_emulated_device
from drivers.topology import scan
from drivers.udev import UdevMonitor, open_monitor
from poold import db
from poold.config import Settings
from poold.daemon.fdpass import FdServer
from poold.daemon.hotplug import HotplugWatcher
from poold.daemon.tasks import every
from poold.inventory import DeviceSpec, spec_from_emulated, specs_from_topology
from poold.ledger import leases, registry
from poold.ledger.clock import LedgerClock
from poold.ledger.leases import Tx
from poold.ledger.ledger import Ledger
from poold.models import Pool
from poold.security import load_or_create_key

log = logging.getLogger(__name__)


class Daemon:
    def __init__(self, settings: Settings, clock: LedgerClock | None = None,
                 monitor: UdevMonitor | None = None) -> None:
        self.settings = settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        db.upgrade(settings.ledger_url)
        self.ledger = Ledger(
            settings.ledger_url, host_id=settings.host_id, default_pool=settings.default_pool,
            clock=clock, synchronous=settings.sqlite_synchronous,
            batch_max=settings.commit_batch_max,
        )
        self.ledger.start()
        try:
            specs: list[DeviceSpec] | None = self.discover()
        except DriverFailure:
            specs = None  # start anyway, leave devices as the ledger has them; rescans retry
        self.ledger.run(partial(self._register, specs=specs))
        if monitor is None and settings.watch_udev and settings.discover_dax:
            monitor = open_monitor()
        self.hotplug = HotplugWatcher(monitor, self.rescan) if monitor is not None else None
        self.lease_key = load_or_create_key(settings.state_dir / "lease-token.key")
        self.fd_server = FdServer(settings.sockets_dir / "fd.sock", self.ledger, self.lease_key)
        self.app: FastAPI = create_app(self.ledger, lifespan=self._lifespan,
                                       sysfs_root=str(settings.sysfs_root),
                                       lease_key=self.lease_key)

    def discover(self) -> list[DeviceSpec]:
        """Every device this host offers now: the emulated one, and dax devices from sysfs."""
        specs = []
        s = self.settings
        if s.emulate_size:
            directory = s.emulate_dir or default_backing_dir(s.emulate_size, s.state_dir)
            path = Path(directory) / f"poold-{s.host_id}-emu0"
            specs.append(spec_from_emulated(
                ensure_emulated_device("emu0", path, s.emulate_size, s.emulate_align)))
        if s.discover_dax:
            try:
                specs.extend(specs_from_topology(scan(s.sysfs_root)))
            except DriverFailure:
                # One unreadable attribute must not make every device look gone: keep the
                # ledger as it is and try again at the next rescan.
                log.exception("inventory.scan_failed root=%s", s.sysfs_root)
                raise
        return specs

    def rescan(self) -> None:
        """Reconcile the ledger with what sysfs shows now (hotplug, periodic fallback)."""
        specs = self.discover()
        self.ledger.run(partial(self._reconcile, specs=specs))

    def _register(self, tx: Tx, specs: list[DeviceSpec] | None) -> None:
        registry.register_host(tx, self.settings.host_name)
        if specs is not None:
            self._reconcile(tx, specs)

    def _reconcile(self, tx: Tx, specs: list[DeviceSpec]) -> None:
        s = self.settings
        pools = {name: registry.ensure_pool(tx, registry.PoolPolicy(
            name=name, claim_slice=s.claim_slice, default_ttl_s=s.default_ttl_s,
            max_ttl_s=s.max_ttl_s,
        )) for name in (s.default_pool, *s.device_pools.values())}

        def pool_for(spec: DeviceSpec) -> Pool:
            for pattern, name in s.device_pools.items():
                if fnmatch(spec.devname, pattern) or fnmatch(spec.uid, pattern):
                    return pools[name]
            return pools[s.default_pool]

        registry.reconcile_devices(tx, specs, pool_for)

    def tick(self) -> int:
        """One reaper pass plus this host's heartbeat; returns how many leases it finalised."""
        def command(tx: Tx) -> int:
            registry.register_host(tx, self.settings.host_name)
            return leases.reap(tx)
        return self.ledger.run(command)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        s = self.settings
        tasks = [asyncio.create_task(every(s.reap_interval_s, "reaper", self.tick))]
        if s.discover_dax:
            tasks.append(asyncio.create_task(every(s.rescan_interval_s, "rescan", self.rescan)))
        if self.hotplug is not None:
            self.hotplug.start()
        self.fd_server.start()
        log.info("daemon.started host=%s listen=%s ledger=%s udev=%s", s.host_id, s.listen,
                 self.ledger.url.split("@")[-1], self.hotplug is not None)
        try:
            yield
        finally:
            self.fd_server.stop()
            if self.hotplug is not None:
                self.hotplug.stop()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.ledger.close()
            log.info("daemon.stopped host=%s", s.host_id)

    def serve(self) -> None:
        """HTTP on the TCP address and on <sockets_dir>/api.sock (same-host clients)."""
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on")
        tcp = socket.create_server((self.settings.listen_host, self.settings.listen_port),
                                   reuse_port=False)
        uds_path = self.settings.sockets_dir / "api.sock"
        uds_path.parent.mkdir(parents=True, exist_ok=True)
        uds_path.unlink(missing_ok=True)
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        uds.bind(str(uds_path))
        os.chmod(uds_path, 0o666)  # access is decided per request, not by file mode
        try:
            uvicorn.Server(config).run(sockets=[tcp, uds])
        finally:
            uds_path.unlink(missing_ok=True)
