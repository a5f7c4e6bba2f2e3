"""Daemon: settings in, a serving poold out.

The one place that builds objects: migrates the ledger, opens it, registers this host, its pool
and its devices, builds the API and runs the background tasks (reaper and heartbeat) with the
server. Nothing below this module creates engines, writers or tasks on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from api.app import create_app
from drivers.emulated import default_backing_dir, ensure_emulated_device
from poold import db
from poold.config import Settings
from poold.daemon.tasks import every
from poold.inventory import DeviceSpec, spec_from_emulated
from poold.ledger import leases, registry
from poold.ledger.clock import LedgerClock
from poold.ledger.leases import Tx
from poold.ledger.ledger import Ledger

log = logging.getLogger(__name__)


class Daemon:
    def __init__(self, settings: Settings, clock: LedgerClock | None = None) -> None:
        self.settings = settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        db.upgrade(settings.ledger_url)
        self.ledger = Ledger(
            settings.ledger_url, host_id=settings.host_id, default_pool=settings.default_pool,
            clock=clock, synchronous=settings.sqlite_synchronous,
            batch_max=settings.commit_batch_max,
        )
        self.ledger.start()
        self.ledger.run(partial(self._register, specs=self._discover()))
        self.app: FastAPI = create_app(self.ledger, lifespan=self._lifespan)

    def _discover(self) -> list[DeviceSpec]:
        specs = []
        if self.settings.emulate_size:
            directory = self.settings.emulate_dir or default_backing_dir(
                self.settings.emulate_size, self.settings.state_dir)
            path = Path(directory) / f"poold-{self.settings.host_id}-emu0"
            device = ensure_emulated_device("emu0", path, self.settings.emulate_size,
                                            self.settings.emulate_align)
            specs.append(spec_from_emulated(device))
        return specs

    def _register(self, tx: Tx, specs: list[DeviceSpec]) -> None:
        s = self.settings
        registry.register_host(tx, s.host_name)
        pool = registry.ensure_pool(tx, registry.PoolPolicy(
            name=s.default_pool, claim_slice=s.claim_slice, default_ttl_s=s.default_ttl_s,
            max_ttl_s=s.max_ttl_s,
        ))
        registry.reconcile_devices(tx, specs, pool)

    def tick(self) -> int:
        """One reaper pass plus this host's heartbeat; returns how many leases it finalised."""
        def command(tx: Tx) -> int:
            registry.register_host(tx, self.settings.host_name)
            return leases.reap(tx)
        return self.ledger.run(command)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(every(self.settings.reap_interval_s, "reaper", self.tick))
        log.info("daemon.started host=%s listen=%s ledger=%s", self.settings.host_id,
                 self.settings.listen, self.ledger.url.split("@")[-1])
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            self.ledger.close()
            log.info("daemon.stopped host=%s", self.settings.host_id)

    def serve(self) -> None:
        config = uvicorn.Config(self.app, host=self.settings.listen_host,
                                port=self.settings.listen_port, log_level="warning",
                                access_log=False, lifespan="on")
        uvicorn.Server(config).run()
