"""Ledger scale: the hot path's cost on a small ledger and on one with a big history.

One host is measured: a real `Ledger` (the writer, its statements, the ledger clock), sharing
devices with others as in multi-host mode (lost-host checks on). It runs rounds of the hot
path: a grant in its session, a plain grant, a lease keepalive, a session keepalive, two
releases, and the reaper tick (heartbeat, expiries, sessions, overdue reclaims, lost hosts, idle
claims). Once on a ledger holding only its own rows; then the same after `grow` wrote, by bulk
inserts, `hosts` other hosts' worth of history: each its device, claim, session, live leases,
ended leases with their events, all heartbeating.

Reported, per operation and ledger: p50/p99 wall time, and what the database did to answer its
statements: each statement the writer runs is first run alone in a savepoint that is rolled
back, on PostgreSQL under EXPLAIN ANALYZE (the rows its scans returned or filtered out are
summed), on SQLite with a progress handler called at every instruction of SQLite's virtual
machine (a row read is a few instructions; SQLite reports no rows). Neither depends on what else
the machine is doing; they are what tests/ledger/test_ledger_scale.py holds to (they must not
grow with the ledger), while the times are for this report.

SQLite is measured as poold runs it: without ANALYZE, so with the plans SQLite makes from the
schema alone (poold never runs ANALYZE; PostgreSQL's autovacuum does, so the grown PostgreSQL
ledger is analyzed).

    python bench/ledger_scale.py [--database postgresql|sqlite]
                                 [--hosts 1000 --ended 100000 --live 10000 --rounds 200]
                                 [--out docs/bench-ledger-scale.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import Connection, Table, create_engine, event, insert, text
from sqlalchemy.engine import Engine

from poold import db
from poold.daemon import reaper
from poold.inventory import DeviceSpec
from poold.ledger import leases, pools, registry, sessions, tenants
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.liveness import Liveness
from poold.ledger.queries._tables import CLAIMS, DEVICES, EVENTS, HOSTS, LEASES, SESSIONS
from poold.ledger.sessions import OpenRequest
from poold.ledger.tx import Tx
from poold.models import Tenant
from poold.types import DeviceKind, GiB, MiB

PG_URL = os.environ.get("POOLD_BENCH_POSTGRES_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
HOST = "measured"
TENANT = "measured-tenant"
# Each generated host's own device: big enough that its leases, live and ended, never overlap.
HOST_DEVICE = 1 << 50
LEASE = 2 * MiB
OPERATIONS = ("session open", "grant in session", "grant", "keepalive", "session keepalive",
              "release", "session close", "reaper tick")


@dataclass(frozen=True)
class Scale:
    hosts: int = 1000
    ended: int = 100_000
    live: int = 10_000
    tenants: int = 50


FULL = Scale()
# What the test grows: big enough that a statement scanning the history, every host or every
# device reads a thousand rows or more (and that PostgreSQL, whose planner rightly scans a table
# of a few dozen rows whole, has tables worth an index), small enough to write in seconds.
TEST = Scale(hosts=1000, ended=10_000, live=1_000, tenants=20)


# --- the measured host -------------------------------------------------------------------


def measured_ledger(url: str) -> Ledger:
    """The host under measure on a migrated ledger: registered, a pool, one emulated device."""
    db.upgrade(url)
    ledger = Ledger(url, host_id=HOST, default_pool="default",
                    liveness=Liveness(host_ttl_s=30, grace_s=30))
    ledger.start()
    spec = DeviceSpec(uid="bench:emu0", kind=DeviceKind.EMULATED, devname="emu0",
                      chardev="/nonexistent/emu0", size=64 * GiB, align=LEASE)

    def bootstrap(tx: Tx) -> None:
        registry.register_host(tx, HOST)
        pool, _ = pools.seed(tx, pools.PoolPolicy(name="default", claim_slice=GiB,
                                                  default_ttl_s=60, max_ttl_s=3600,
                                                  scrub_on_release=False))
        registry.reconcile_devices(tx, [spec], pool)
        # A quota, so that each grant reads the tenant's usage, as under default quotas.
        tenants.set_tenant(tx, TENANT, max_bytes=1 << 50, max_leases=None, actor="bench")

    ledger.run(bootstrap)
    return ledger


def one_round(ledger: Ledger, timed: Callable[[str], Any]) -> None:
    """The hot path once; `timed(name)` is a context manager around each operation. The round
    leaves nothing live: the next tick finds its claim idle and gives it back, the next grant
    claims again."""
    with timed("session open"):
        session_id = ledger.run(partial(sessions.open_session, request=OpenRequest(
            actor="bench", ttl_s=600, tenant=TENANT))).id
    with timed("grant in session"):
        ledger.run(partial(leases.grant, request=GrantRequest(
            size=LEASE, actor="bench", tenant=TENANT, session_id=session_id, elastic=True)))
    with timed("grant"):
        plain = ledger.run(partial(leases.grant, request=GrantRequest(
            size=LEASE, actor="bench", tenant=TENANT, ttl_s=60,
            idempotency_key=uuid.uuid4().hex)))
    with timed("keepalive"):
        ledger.run(partial(leases.keepalive, lease_id=plain.id, ttl_s=60, actor="bench"))
    with timed("session keepalive"):
        ledger.run(partial(sessions.keepalive, session_id=session_id, actor="bench"))
    with timed("release"):
        ledger.run(partial(leases.release, lease_id=plain.id, actor="bench"))
    with timed("session close"):  # ends the lease granted in it
        ledger.run(partial(sessions.close, session_id=session_id, actor="bench"))
    with timed("reaper tick"):
        reaper.tick(ledger, HOST, claim_idle_s=0)


# --- what the writer's statements read -------------------------------------------------------

_NOT_A_READ = {"ModifyTable"}


def rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's table scans returned or threw away, over all their loops."""
    own = 0
    if "Relation Name" in plan and plan["Node Type"] not in _NOT_A_READ:
        per_loop = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
                    + plan.get("Rows Removed by Index Recheck", 0))
        own = int(per_loop * plan.get("Actual Loops", 1))
    return own + sum(rows_read(child) for child in plan.get("Plans", []))


def pages_touched(plan: dict[str, Any]) -> int:
    """Pages of tables and indexes the statement touched (a node counts its children's)."""
    return int(plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0))


def _shape(statement: str) -> str:
    """A statement named by its first 160 characters, placeholders and all."""
    return re.sub(r"\s+", " ", statement).strip()[:160]


def sqlite_steps(raw: Any, statement: str, parameters: Any) -> int:
    """Instructions SQLite's virtual machine ran for the statement (and its fetch)."""
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0  # go on
    raw.set_progress_handler(step, 1)
    try:
        raw.execute(statement, parameters).fetchall()
    finally:
        raw.set_progress_handler(None, 1)
    return steps


@dataclass
class ReadCounter:
    """Per operation (and per statement, to tell which one grew), while `on`: rows read on
    PostgreSQL, virtual-machine instructions on SQLite."""

    operation: str | None = None
    by_operation: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    by_statement: dict[tuple[str, str], int] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)
    _current: int = 0

    def listen(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, conn: Connection, cursor: Any, statement: str, parameters: Any,
                context: Any, executemany: bool) -> None:
        if self.operation is None or executemany:
            return
        if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "INSERT")):
            return
        raw = cursor.connection  # the same transaction, so it sees what the command sees
        raw.execute("SAVEPOINT bench_explain")
        try:
            if conn.dialect.name == "sqlite":
                read, pages = sqlite_steps(raw, statement, parameters), 0
            else:
                plan = raw.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement,
                                   parameters).fetchone()[0][0]["Plan"]
                read, pages = rows_read(plan), pages_touched(plan)
        finally:
            raw.execute("ROLLBACK TO SAVEPOINT bench_explain")
            raw.execute("RELEASE SAVEPOINT bench_explain")
        self.pages[self.operation] = self.pages.get(self.operation, 0) + pages
        self._current += read
        key = (self.operation, _shape(statement))
        self.by_statement[key] = max(self.by_statement.get(key, 0), read)

    @contextmanager
    def measuring(self, operation: str) -> Iterator[None]:
        self.operation, self._current = operation, 0
        try:
            yield
        finally:
            self.by_operation[operation].append(self._current)
            self.operation = None


def count_reads(ledger: Ledger, rounds: int) -> ReadCounter:
    counter = ReadCounter()
    counter.listen(ledger._write_engine)
    try:
        for _ in range(rounds):
            one_round(ledger, counter.measuring)
    finally:
        event.remove(ledger._write_engine, "before_cursor_execute", counter._before)
    return counter


def time_rounds(ledger: Ledger, rounds: int) -> dict[str, list[float]]:
    took: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def timed(name: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        took[name].append(time.perf_counter() - started)

    for _ in range(rounds):
        one_round(ledger, timed)
    return took


# --- the history of the other hosts ------------------------------------------------------


def grow(url: str, scale: Scale, batch: int = 5000) -> None:
    """Write `scale`'s other hosts, all heartbeating now: each its device in the default pool,
    one claim over it, a live session, its share of the live leases (in the session, renewed
    far ahead) and of the ended ones (released, each with its grant and release events), then on
    PostgreSQL ANALYZE, as autovacuum would have by the time a ledger got this big (on SQLite
    nothing does: poold never runs it)."""
    engine = create_engine(url)
    sqlite = engine.dialect.name == "sqlite"
    with engine.begin() as conn:
        # The ledger's clock: the database server's on PostgreSQL, the host's on SQLite.
        now = datetime.now(UTC) if sqlite else conn.execute(text("SELECT now()")).scalar_one()
        pool_id = conn.execute(text("SELECT id FROM pools WHERE name = 'default'")).scalar_one()
        conn.execute(insert(Tenant), [
            {"name": f"tenant-{t}", "created_at": now, "max_bytes": None, "max_leases": None}
            for t in range(scale.tenants)])
        hosts = [f"host-{h:05d}" for h in range(scale.hosts)]
        conn.execute(insert(HOSTS), [
            {"id": h, "name": h, "state": "up", "registered_at": now - timedelta(days=30),
             "last_seen_at": now} for h in hosts])
        device_ids = _inserted_ids(conn, DEVICES, [
            {"uid": f"gen:{h}", "host_id": h, "pool_id": pool_id, "kind": "emulated",
             "devname": f"emu-{h}", "chardev": f"/nonexistent/{h}", "size": HOST_DEVICE,
             "align": LEASE, "numa_node": None, "state": "online", "tenant_scope": None,
             "created_at": now, "updated_at": now, "pool_assigned": False} for h in hosts])
        claim_ids = _inserted_ids(conn, CLAIMS, [
            {"device_id": d, "host_id": h, "offset": 0, "length": HOST_DEVICE, "state": "active",
             "created_at": now, "ended_at": None}
            for h, d in zip(hosts, device_ids, strict=True)])
        session_ids = [uuid.uuid4().hex for _ in hosts]
        conn.execute(insert(SESSIONS), [
            {"id": session_ids[h], "host_id": hosts[h], "tenant": f"tenant-{h % scale.tenants}",
             "ttl_s": 3600, "opened_at": now, "expires_at": now + timedelta(hours=1),
             "ended_at": None, "state": "active", "labels": {}} for h in range(scale.hosts)])
        rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []

        def flush(force: bool = False) -> None:
            if rows and (force or len(rows) >= batch):
                conn.execute(insert(LEASES), rows)
                rows.clear()
            if events and (force or len(events) >= batch):
                conn.execute(insert(EVENTS), events)
                events.clear()

        for n in range(scale.live + scale.ended):
            h = n % scale.hosts
            live = n < scale.live
            granted = now - timedelta(seconds=(scale.live + scale.ended - n))
            lease_id = uuid.uuid4().hex
            rows.append({
                "id": lease_id, "pool_id": pool_id, "device_id": device_ids[h],
                "claim_id": claim_ids[h], "host_id": hosts[h],
                "tenant": f"tenant-{h % scale.tenants}", "offset": (n // scale.hosts) * LEASE,
                "length": LEASE, "generation": n + 1, "ttl_s": 3600, "granted_at": granted,
                "expires_at": now + timedelta(hours=1) if live else granted + timedelta(hours=1),
                "ended_at": None if live else granted + timedelta(seconds=1),
                "state": "active" if live else "released", "labels": {},
                "idempotency_key": None, "request_digest": None, "ended_as": None,
                "scrubbed_bytes": 0, "session_id": session_ids[h] if live else None,
                "elastic": live and n % 2 == 0, "used_at": None, "reclaim_by": None})
            events.append({"at": granted, "kind": "lease.granted", "actor": "gen",
                           "host_id": hosts[h], "device_id": device_ids[h], "lease_id": lease_id,
                           "details": {}})
            if not live:
                events.append({"at": granted + timedelta(seconds=1), "kind": "lease.released",
                               "actor": "gen", "host_id": hosts[h], "device_id": device_ids[h],
                               "lease_id": lease_id, "details": {}})
            flush()
        flush(force=True)
    if not sqlite:
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()
    engine.dispose()


def _inserted_ids(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> list[int]:
    returning = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return [int(i) for i in conn.execute(returning, rows).scalars()]


@contextmanager
def fresh_schema(base_url: str = PG_URL) -> Iterator[str]:
    """A URL whose search_path is a new schema of its own, dropped afterwards."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url)
    with admin.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA public"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{base_url}?options=-csearch_path%3D{schema},public"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@contextmanager
def sqlite_file() -> Iterator[str]:
    """A URL of a new SQLite ledger file, deleted afterwards."""
    with tempfile.TemporaryDirectory() as state:
        yield f"sqlite:///{state}/ledger.sqlite3"


# --- the run and its report --------------------------------------------------------------


@dataclass
class Side:
    label: str
    reads: ReadCounter
    times: dict[str, list[float]]
    grow_s: float = 0.0


def measure(url: str, scale: Scale, rounds: int, read_rounds: int = 5) -> tuple[Side, Side]:
    ledger = measured_ledger(url)
    try:
        time_rounds(ledger, 5)  # warm: connections, the catalog, statement caches
        small = Side("small", count_reads(ledger, read_rounds), time_rounds(ledger, rounds))
        started = time.perf_counter()
        grow(url, scale)
        grow_s = time.perf_counter() - started
        time_rounds(ledger, 5)
        large = Side("large", count_reads(ledger, read_rounds), time_rounds(ledger, rounds),
                     grow_s)
        return small, large
    finally:
        ledger.close()


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(database: str, scale: Scale, rounds: int, small: Side, large: Side) -> str:
    sqlite = database == "sqlite"
    read = "VM instructions" if sqlite else "rows read"
    what = ("instructions SQLite's virtual machine ran for the operation's statements (each "
            "run alone with a progress handler at every instruction, rolled back; the ledger "
            "not analyzed, as poold runs it)" if sqlite else
            "what PostgreSQL's scans returned or filtered out for the operation's statements "
            "(EXPLAIN ANALYZE of each, rolled back)")
    lines = [
        f"# Ledger scale ({'SQLite' if sqlite else 'PostgreSQL'})",
        "",
        f"Generated by `python bench/ledger_scale.py --database {database}` on "
        f"{datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.2f} before the run).",
        "",
        "One host, a real `Ledger` in multi-host mode, runs the hot path "
        f"{rounds} times on a ledger holding only its own rows (small), then again after "
        f"{scale.hosts} other hosts' history was written ({scale.live} live leases, "
        f"{scale.ended} ended ones with {2 * scale.ended + scale.live} events, a session and "
        f"a device per host, {scale.tenants} tenants; generated in {large.grow_s:.1f} s). "
        f"{read[0].upper()}{read[1:]}: {what}, the most over "
        f"{len(next(iter(small.reads.by_operation.values())))} rounds.",
        "",
        "| operation | p50 small (ms) | p50 large (ms) | p99 small (ms) | p99 large (ms) | "
        f"p99 large/small | {read} small | {read} large"
        + ("" if sqlite else " | pages small | pages large") + " |",
        "|---|---|---|---|---|---|---|---|" + ("" if sqlite else "---|---|"),
    ]
    for op in OPERATIONS:
        s, lg = small.times[op], large.times[op]
        lines.append(
            f"| {op} | {1000 * statistics.median(s):.2f} | {1000 * statistics.median(lg):.2f} "
            f"| {1000 * _p(s, 0.99):.2f} | {1000 * _p(lg, 0.99):.2f} "
            f"| {_p(lg, 0.99) / _p(s, 0.99):.2f}x | {max(small.reads.by_operation[op])} "
            f"| {max(large.reads.by_operation[op])} |"
            + ("" if sqlite else f" {small.reads.pages[op]} | {large.reads.pages[op]} |"))
    grown = sorted(((lg - small.reads.by_statement.get(key, 0), key, lg)
                    for key, lg in large.reads.by_statement.items()), reverse=True)[:5]
    lines += ["", f"The statements whose {read} grew most from small to large:", ""]
    lines += [f"- {op}: +{d} (to {lg}): `{stmt}`" for d, (op, stmt), lg in grown]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--hosts", type=int, default=FULL.hosts)
    parser.add_argument("--ended", type=int, default=FULL.ended)
    parser.add_argument("--live", type=int, default=FULL.live)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    scale = Scale(hosts=args.hosts, ended=args.ended, live=args.live)
    with fresh_schema() if args.database == "postgresql" else sqlite_file() as url:
        small, large = measure(url, scale, args.rounds)
    text_ = report(args.database, scale, args.rounds, small, large)
    print(text_)
    if args.out:
        args.out.write_text(text_)


if __name__ == "__main__":
    main()
