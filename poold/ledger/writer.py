"""The single ledger writer: one thread, one connection, group commit.

Every change to the ledger made by this daemon is a command (a function of `Tx`) submitted here.
The writer folds whatever commands are waiting (up to `batch_max`) into one transaction, so one
fsync acknowledges many requests: throughput grows with concurrency instead of collapsing under
lock contention. A command's result is released only after its transaction committed, so an
acknowledged grant or release is durable. Callers on an event loop (the API) submit with `call`:
the results of a batch's callers are handed to their loop in one wake-up, not one per command.

The writer keeps its connection across batches (one that sat idle is checked out again, so the
pool's pre-ping vets it), its in-memory space, and a snapshot of the catalog (pools, devices) that
commands drop when they may have changed it (see `Tx`). Events the commands queued are inserted
just before the commit, in the same transaction as the changes they record.

A command that raises a PooldError fails alone; the batch still commits (commands check before
they write). A command the database refuses for its data (a value out of range, text it cannot
store: SQLSTATE class 22) fails alone too, as InvalidRequest: the batch is rolled back and run
again without it, on the same connection, after the in-memory space is rebuilt. Anything else (a
lost connection, a bug) rolls the whole batch back; the writer rebuilds its in-memory space and
catalog from the ledger, on a fresh connection, and replays each command in its own transaction,
so only the culprit fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, SQLAlchemyError
from sqlalchemy.orm import Session

from poold.errors import HostFenced, InvalidRequest, LedgerUnavailable, PooldError
from poold.ledger import queries as q
from poold.ledger.clock import LedgerClock
from poold.ledger.liveness import Liveness
from poold.ledger.space import Catalog, HostSpace
from poold.ledger.tx import Tx
from poold.osthread import name_this_thread

log = logging.getLogger(__name__)

T = TypeVar("T")
Command = Callable[[Tx], T]

# A connection unused for this long is handed back and checked out again before the next batch,
# so a connection the server dropped meanwhile is replaced instead of failing that batch.
IDLE_RECHECK_S = 1.0
# How often one command is rerun after a deadlock or an insert race with another host's writer.
TRANSIENT_RETRIES = 3


@dataclass(slots=True)
class _Item:
    command: Command[Any]
    future: Future[Any] | asyncio.Future[Any]  # asyncio's: from `call`, settled on its loop

    def abandoned(self) -> bool:
        """The caller gave up before the command's turn: it is not run. (A concurrent future
        that is not cancelled here can no longer be: it is marked running.)"""
        if isinstance(self.future, asyncio.Future):
            return self.future.cancelled()  # a read of its state: safe from this thread
        return not (self.future.running() or self.future.set_running_or_notify_cancel())


@dataclass(slots=True)
class WriterStats:
    """What the writer has done since it started, for metrics: group commit at work shows as
    commands per batch above 1, and the time a batch takes (`busy_s / batches`) against what its
    commands cost alone shows when the writer waits on the rest of the process (for the GIL,
    when HTTP work fills it). Updated once a batch by the writer's thread; a reader may see one
    batch's fields half updated, which a rate over a scrape interval does not notice."""

    batches: int = 0
    commands: int = 0
    busy_s: float = 0.0  # executing batches: from the first statement to the commit, replays too


class _DataRefused(Exception):
    """The database refused the data of the batch's command at `index`."""

    def __init__(self, index: int, error: DataError) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


class LedgerWriter:
    def __init__(self, engine: Engine, *, host_id: str, default_pool: str, clock: LedgerClock,
                 batch_max: int = 256, liveness: Liveness | None = None,
                 tenant_defaults: tuple[int | None, int | None] = (None, None)) -> None:
        self._engine = engine
        self._tenant_defaults = tenant_defaults
        self._liveness = liveness
        self._host_id = host_id
        self._default_pool = default_pool
        self._clock = clock
        self._batch_max = batch_max
        # SimpleQueue: a put and a get cost a fraction of queue.Queue's (no Condition, no task
        # accounting), twice per request.
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        # Results for asyncio futures, by loop, handed over once per batch (see _deliver).
        self._outbox: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool,
                                                                 Any]]] = {}
        self._space: HostSpace | None = None  # None: rebuild from the ledger before next use
        self._catalog: Catalog | None = None  # None: read from the ledger at next use
        # Devices held for a kernel change (poold.ledger.devices): in memory, not in the ledger,
        # so an operation the kernel refuses leaves the ledger as it was; grants skip them.
        self.held_devices: set[int] = set()
        self._conn: Connection | None = None
        self._conn_used_at = 0.0
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._gate = threading.Lock()  # orders submit() against stop()
        # Called (in the writer's thread) after a transaction that ended leases committed, with
        # each lease id and whether it waits for a scrub: the daemon's scrubber wakes on it
        # rather than polling the ledger.
        self.on_leases_ended: Callable[[dict[str, bool]], None] | None = None
        self.stats = WriterStats()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ledger-writer", daemon=True)
        with self._gate:
            self._accepting = True
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish what was submitted before, refuse what comes after, then stop."""
        with self._gate:
            self._accepting = False
            self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def submit(self, command: Command[T]) -> Future[T]:
        future: Future[T] = Future()
        self._enqueue(command, future)
        return future

    def call(self, command: Command[T]) -> Awaitable[T]:
        """`submit` for a caller on an event loop: its result is set on the loop, one hand-over
        a batch for all the batch's callers on that loop rather than one a command (what
        asyncio.wrap_future of `submit` would cost). Cancelling it before the command's turn
        keeps the command from running."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._enqueue(command, future)
        return future

    def _enqueue(self, command: Command[Any], future: Future[Any] | asyncio.Future[Any]) -> None:
        """Queue the command, or fail its future at once when the writer is not running."""
        with self._gate:
            if self._accepting:
                self._queue.put(_Item(command, future))
                return
        future.set_exception(LedgerUnavailable("the ledger writer is not running"))

    def run(self, command: Command[T], timeout: float | None = 60.0) -> T:
        return self.submit(command).result(timeout)

    def _loop(self) -> None:
        name_this_thread()
        try:
            self._serve()
        except BaseException:
            log.exception("ledger.writer_died")
            raise
        finally:
            self._fail_pending()
            self._deliver()
            self._drop_connection()

    def _fail_pending(self) -> None:
        """Nobody is left to run what is still queued: say so instead of leaving it hanging."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._settle(item, False, LedgerUnavailable("the ledger writer stopped"))

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stopping = [first], False
            while len(batch) < self._batch_max:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            started = time.perf_counter()
            self._execute(batch)
            stats = self.stats
            stats.busy_s += time.perf_counter() - started
            stats.commands += len(batch)
            stats.batches += 1
            self._deliver()
            if stopping:
                return

    def _execute(self, batch: list[_Item], retries: int = TRANSIENT_RETRIES) -> None:
        try:
            outcomes = self._transaction(batch)
        except _DataRefused as refused:
            # The transaction was rolled back; the connection is sound. The space may hold what
            # the commands before the culprit did: read again at the next use.
            self._space = None
            self._catalog = None
            log.warning("ledger.data_refused error=%s", type(refused.error.orig).__name__)
            refusal = InvalidRequest(f"the ledger cannot store this request's data: "
                                     f"{type(refused.error.orig).__name__}")
            refusal.__cause__ = refused.error
            self._settle(batch[refused.index], False, refusal)
            rest = batch[:refused.index] + batch[refused.index + 1:]
            if rest:
                self._execute(rest, retries)
            return
        except Exception as exc:
            self._space = None
            self._catalog = None
            self._drop_connection()
            if len(batch) > 1:
                log.warning("ledger.batch_failed size=%d error=%r; replaying one by one",
                            len(batch), exc)
                for item in batch:
                    self._execute([item])
                return
            if retries and _transient(exc):
                # Another host's writer and this one each waited for the other (PostgreSQL
                # chose this one to abort): nothing was written, so run it again.
                log.info("ledger.retry error=%s", type(getattr(exc, "orig", exc)).__name__)
                self._execute(batch, retries - 1)
                return
            if isinstance(exc, SQLAlchemyError):
                log.error("ledger.write_failed error=%r", exc)
                error: BaseException = LedgerUnavailable(
                    f"ledger write failed: {type(exc).__name__}")
                if self._liveness is not None and self._liveness.fenced:
                    error = HostFenced(f"ledger unreachable for {self._liveness.silent_s:.1f} s "
                                       "(over host_ttl): this host's leases are lost")
                error.__cause__ = exc
            else:
                log.exception("ledger.command_crashed")
                error = exc
            self._settle(batch[0], False, error)
            return
        for item, (ok, value) in zip(batch, outcomes, strict=True):
            self._settle(item, ok, value)

    def _transaction(self, batch: list[_Item]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        conn = self._connection()
        with conn.begin():
            # One round trip on PostgreSQL, with the transaction's BEGIN (poold.db).
            version, server_now = q.pools.batch_start(conn)
            now = self._clock.now(conn, server_now)
            if self._catalog is not None and version != self._catalog.version:
                self._catalog = None  # an admin changed pools (through any daemon)
            if self._space is None:
                with Session(bind=conn) as session:  # joins the transaction, never ends it
                    self._space = self._rebuild_space(session)
            tx = Tx(conn, now, self._space, self._host_id, self._default_pool, None,
                    self._catalog, held=self.held_devices,
                    tenant_defaults=self._tenant_defaults)
            if self._liveness is not None:
                tx.fenced = self._liveness.fenced
                tx.lost_after_s = self._liveness.lost_after_s
            try:
                for item in batch:
                    if item.abandoned():  # the client went away: do not act for nobody
                        outcomes.append((False, None))
                        continue
                    try:
                        outcomes.append((True, item.command(tx)))
                    except PooldError as exc:
                        outcomes.append((False, exc))
                    except DataError as exc:
                        raise _DataRefused(len(outcomes), exc) from exc
                    tx.command_done()
                tx.flush()
            finally:
                tx.close()
        self._catalog = tx.snapshot
        told = self.on_leases_ended  # read once: the daemon clears it at shutdown
        if tx.ended and told is not None:
            try:
                told(tx.ended)
            except Exception:  # committed: a failure here must not fail (and replay) the batch
                log.exception("ledger.on_leases_ended_failed")
        return outcomes

    def _settle(self, item: _Item, ok: bool, value: Any) -> None:
        if isinstance(item.future, asyncio.Future):
            self._outbox.setdefault(item.future.get_loop(), []).append((item.future, ok, value))
        else:
            _settle(item.future, ok, value)

    def _deliver(self) -> None:
        """Hand the asyncio futures' results to their loops: one wake-up per loop."""
        outbox, self._outbox = self._outbox, {}
        for loop, results in outbox.items():
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(_settle_all, results)

    def _connection(self) -> Connection:
        now = time.monotonic()
        if self._conn is not None and now - self._conn_used_at > IDLE_RECHECK_S:
            self._drop_connection()
        if self._conn is None:
            self._conn = self._engine.connect()
        self._conn_used_at = now
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(SQLAlchemyError):  # a broken one is discarded all the same
                conn.close()

    def _rebuild_space(self, session: Session) -> HostSpace:
        align_of = {device.id: device.align for device in q.devices.list_devices(session)}
        return HostSpace.rebuild(
            q.claims.live_claims(session, host_id=self._host_id),
            q.leases.live_leases(session, host_id=self._host_id),
            align_of,
        )


def _transient(exc: BaseException) -> bool:
    """The transaction was rolled back and may be rerun: a deadlock or serialization failure, or
    a unique violation, which here means another host's writer inserted the same row (a pool, a
    shared device, both hosts starting at once) between this one's read and insert; rerun, the
    read finds it. (A SQLite ledger's writers take the file's lock before reading: never so.)"""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in {"40P01", "40001", "23505"}


def _settle_all(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """On the loop: set each result (a caller that gave up just does not hear it)."""
    for future, ok, value in results:
        _settle(future, ok, value)


def _settle(future: Future[Any] | asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Hand a result over; a caller that gave up (cancelled future) just does not hear it."""
    if future.cancelled():
        return
    try:
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
    except (InvalidStateError, asyncio.InvalidStateError):
        pass
