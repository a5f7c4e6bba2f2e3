"""Shared fixtures: a ledger URL on each real database, and ledgers built on them.

Every ledger test runs on SQLite (a real file) and on the PostgreSQL at 127.0.0.1:5432 (database
`test`, trust auth). Each PostgreSQL test gets its own schema, dropped afterwards. PostgreSQL tests
are skipped when the server is unreachable, unless POOLD_TEST_REQUIRE_POSTGRES=1 (CI sets it), in
which case they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import Engine, create_engine, make_url, text

from poold import db
from poold.inventory import DeviceSpec
from poold.ledger import pools, registry
from poold.ledger.clock import ManualClock
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx
from poold.types import DeviceKind, MiB
from tests.postgres_lock import ServerLock
from tests.preconditions import need_root, unmet

POSTGRES_URL = os.environ.get(
    "POOLD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
POSTGRES_LOCK = ServerLock(make_url(POSTGRES_URL).port or 5432)
# Hypothesis fails an example that runs over 200 ms, and calls the test flaky when the rerun is
# quicker: on a loaded machine that measures the machine, not the code.
settings.register_profile("poold", deadline=None)
settings.load_profile("poold")
HOST = "host-a"
# Every daemon the tests start, in this process or as `poold serve`, keeps its leases' memory in
# no fd store, unless the test says otherwise (the restart tests name the keeper): a keeper per
# test daemon would outlive the test by its linger.
os.environ["POOLD_FD_STORE"] = "none"


def _postgres_reachable() -> str | None:
    try:
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA public"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


_PG_PROBE: list[str | None] = []  # the one probe's answer, once made


def postgres_problem() -> str | None:
    if not _PG_PROBE:
        _PG_PROBE.append(_postgres_reachable())
    return _PG_PROBE[0]


@pytest.fixture
def as_root() -> None:
    """For a test that acts as a second local user (`nobody`): root, else skip (or fail in CI)."""
    need_root("act as another local user")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema of its own. No other test run on
    this machine restarts the server meanwhile (POSTGRES_LOCK; test_pg_restart.py does)."""
    with POSTGRES_LOCK.shared():
        problem = postgres_problem()
        if problem is not None:
            unmet("postgres", f"PostgreSQL unreachable: {problem}")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        admin = create_engine(POSTGRES_URL, pool_pre_ping=True)  # a test may restart the server
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema},public"
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    return str(request.getfixturevalue("pg_url"))


@contextmanager
def migrated_writer_engine(url: str) -> Iterator[Engine]:
    """The ledger at `url` upgraded to the newest schema, and a writer engine on it, made as the
    daemon's writer makes its own (disposed of at the end)."""
    db.upgrade(url)
    engine = db.make_engine(url, writer=True)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def emulated_spec(size: int = 64 * MiB, name: str = "emu0", align: int = 2 * MiB) -> DeviceSpec:
    return DeviceSpec(uid=f"test:{name}", kind=DeviceKind.EMULATED, devname=name,
                      chardev=f"/nonexistent/{name}", size=size, align=align)


def bootstrap(tx: Tx, specs: list[DeviceSpec], claim_slice: int = 0, max_ttl_s: int = 3600,
              scrub: bool = False) -> None:
    """Scrubbing off unless asked: the ledger tests of other concerns want a release to free
    its bytes at once (tests/ledger/test_scrub.py covers scrubbing)."""
    registry.register_host(tx, tx.host_id)
    pool, _ = pools.seed(tx, pools.PoolPolicy(
        name="default", claim_slice=claim_slice, default_ttl_s=60, max_ttl_s=max_ttl_s,
        scrub_on_release=scrub))
    registry.reconcile_devices(tx, specs, pool)


LedgerFactory = Callable[..., Ledger]


@pytest.fixture
def make_ledger(ledger_url: str, clock: ManualClock) -> Iterator[LedgerFactory]:
    """Build started ledgers on the test database (migrated, host/pool/devices registered)."""
    db.upgrade(ledger_url)
    opened: list[Ledger] = []

    def make(specs: list[DeviceSpec] | None = None, host_id: str = HOST,
             claim_slice: int = 0, scrub: bool = False, **kwargs: object) -> Ledger:
        ledger = Ledger(ledger_url, host_id=host_id, default_pool="default", clock=clock,
                        **kwargs)  # type: ignore[arg-type]
        ledger.start()
        opened.append(ledger)
        ledger.run(partial(bootstrap, specs=specs if specs is not None else [emulated_spec()],
                           claim_slice=claim_slice, scrub=scrub))
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(make_ledger: LedgerFactory) -> Ledger:
    return make_ledger()
