"""`Ledger`: the ledger's engines, writer and clock behind one handle.

Built once by the composition root (poold.daemon) and handed to the API. Writes are commands
submitted to the single writer; reads run a function on a fresh read-only session, with the
ledger clock's `now`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from datetime import datetime
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from poold.db import make_engine
from poold.errors import HostFenced, LedgerUnavailable
from poold.ledger.clock import DatabaseClock, LedgerClock
from poold.ledger.liveness import Liveness
from poold.ledger.writer import Command, LedgerWriter

T = TypeVar("T")


class Ledger:
    def __init__(self, url: str, *, host_id: str, default_pool: str,
                 clock: LedgerClock | None = None, synchronous: str = "FULL",
                 batch_max: int = 256, liveness: Liveness | None = None,
                 tenant_defaults: tuple[int | None, int | None] = (None, None)) -> None:
        """`liveness`: this host shares devices with others (fencing and lost hosts, see
        poold.ledger.liveness); None: never fenced, never judges other hosts.
        `tenant_defaults`: (max_bytes, max_leases) of a tenant created without quotas."""
        self.url = url
        self.host_id = host_id
        self.default_pool = default_pool
        self.clock: LedgerClock = clock or DatabaseClock()
        self.liveness = liveness
        self._write_engine = make_engine(url, writer=True, synchronous=synchronous)
        self._read_engine = make_engine(url, writer=False, synchronous=synchronous)
        self.writer = LedgerWriter(self._write_engine, host_id=host_id, default_pool=default_pool,
                                   clock=self.clock, batch_max=batch_max, liveness=liveness,
                                   tenant_defaults=tenant_defaults)

    def start(self) -> None:
        self.writer.start()

    def close(self) -> None:
        self.writer.stop()
        self._write_engine.dispose()
        self._read_engine.dispose()

    def submit(self, command: Command[T]) -> Future[T]:
        return self.writer.submit(command)

    def call(self, command: Command[T]) -> Awaitable[T]:
        """Submit from an event loop: await the result there (see LedgerWriter.call)."""
        return self.writer.call(command)

    def run(self, command: Command[T]) -> T:
        return self.writer.run(command)

    def read(self, query: Callable[[Session, datetime], T]) -> T:
        try:
            with Session(self._read_engine) as session, session.begin():
                return query(session, self.clock.now(session))
        except SQLAlchemyError as exc:
            if self.liveness is not None and self.liveness.fenced:
                raise HostFenced(f"ledger unreachable for {self.liveness.silent_s:.1f} s (over "
                                 "host_ttl): this host's leases are lost") from exc
            raise LedgerUnavailable(f"ledger read failed: {type(exc).__name__}") from exc
