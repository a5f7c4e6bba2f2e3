"""The writer's per-batch catalog check: what one read of the `catalog` counter costs, through
a Core select beside exec_driver_sql (what poold does: no statement to build or compile, and
still SQLAlchemy's error handling), side by side in one run, on SQLite and on PostgreSQL when
reachable.

    python bench/catalog_check.py [--reads 5000]

Each way reads the counter `reads` times in one transaction, alternating the two ways over 5
rounds; reported: the median microseconds per read of each way and the median of the per-round
ratios. The writer makes this read once per batch of commands (poold.ledger.writer), so its cost
is paid once per batch, not per request.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from sqlalchemy import Connection, create_engine, select, text

from poold import db
from poold.ledger import queries as q
from poold.ledger.queries._tables import COUNTERS

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CORE = select(COUNTERS.c.value).where(COUNTERS.c.name == "catalog")


def per_read_us(read: Callable[[], object], reads: int) -> float:
    started = time.perf_counter()
    for _ in range(reads):
        read()
    return (time.perf_counter() - started) / reads * 1e6


def measure(url: str, reads: int) -> str:
    db.upgrade(url)
    engine = db.make_engine(url, writer=True)
    core, driver, ratios = [], [], []
    with engine.connect() as conn, conn.begin():
        ways: dict[str, Callable[[Connection], object]] = {
            "core": lambda c: c.execute(CORE).scalar_one(),
            "driver": q.pools.catalog_version,
        }
        for way in ways.values():
            way(conn)  # warm: statement caches, the page
        for _ in range(5):
            a = per_read_us(lambda: ways["core"](conn), reads)
            b = per_read_us(lambda: ways["driver"](conn), reads)
            core.append(a)
            driver.append(b)
            ratios.append(a / b)
    engine.dispose()
    return (f"Core select {statistics.median(core):.1f} us, exec_driver_sql "
            f"{statistics.median(driver):.1f} us per read: {statistics.median(ratios):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite:", measure(f"sqlite:///{tmp}/ledger.sqlite3", args.reads))
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(POSTGRES)
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:  # no server: say so, and the SQLite figures stand
        print(f"PostgreSQL: not reachable ({type(exc).__name__})")
        return
    try:
        url = f"{POSTGRES}?options=-csearch_path%3D{schema},public"
        print("PostgreSQL:", measure(url, max(1, args.reads // 5)))
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


if __name__ == "__main__":
    main()
