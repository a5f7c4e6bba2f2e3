"""The Alembic migrations build exactly the schema the ORM models describe, on SQLite and on
PostgreSQL, plus the overlap guards the models cannot express; upgrade is idempotent and a
downgrade to base removes every ledger table, after which upgrade works again.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, pool, text

from poold import db
from poold.models import Base

LEDGER_TABLES = {"hosts", "pools", "pool_quotas", "pool_rules", "devices", "claims", "leases",
                 "events", "counters", "tenants", "tokens", "sessions"}


@contextmanager
def connect(url: str) -> Iterator[Connection]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def schema_diff(url: str) -> list[Any]:
    """Differences autogenerate would emit to make the database match the models.

    No filter is applied: Alembic does not reflect PostgreSQL exclusion constraints nor SQLite
    triggers, so the overlap guards that only the migration creates never show up here (they
    are checked separately by `overlap_guards`). SQLite cannot reflect the expression index
    on idempotency keys either (it warns and skips it): `expression_indexes` checks it there.
    """
    with connect(url) as conn, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*expression-based index")
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, Base.metadata))


def expression_indexes(url: str) -> set[str]:
    """The unique index on (host, tenant or '', idempotency key), as each database has it."""
    with connect(url) as conn:
        if conn.dialect.name == "sqlite":
            query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'leases'"
        else:
            query = ("SELECT indexdef FROM pg_indexes WHERE tablename = 'leases' "
                     "AND schemaname = current_schema()")
        return {" ".join(str(d).lower().replace('"', "").split())
                for d in conn.execute(text(query)).scalars() if d and "coalesce" in str(d).lower()}


def tables(url: str) -> set[str]:
    with connect(url) as conn:
        return set(inspect(conn).get_table_names())


def current_revision(url: str) -> str | None:
    with connect(url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(url: str) -> str | None:
    return ScriptDirectory.from_config(db.alembic_config(url)).get_current_head()


def overlap_guards(url: str) -> set[str]:
    """Names of the migration-only objects that refuse overlapping live extents."""
    with connect(url) as conn:
        if conn.dialect.name == "sqlite":
            query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        else:
            query = ("SELECT conname FROM pg_constraint WHERE contype = 'x' "
                     "AND connamespace = current_schema()::regnamespace")
        return set(conn.execute(text(query)).scalars())


def expected_guards(url: str) -> set[str]:
    if db.is_sqlite(url):
        return {f"tr_{t}_no_overlap_{verb}" for t in ("claims", "leases")
                for verb in ("insert", "update")}
    return {"ex_claims_live_extent", "ex_leases_live_extent"}


def generation_counters(url: str) -> list[int]:
    with connect(url) as conn:
        query = text("SELECT value FROM counters WHERE name = 'generation'")
        return list(conn.execute(query).scalars())


def test_upgrade_builds_exactly_the_models(ledger_url: str) -> None:
    assert tables(ledger_url) == set()
    db.upgrade(ledger_url)
    assert tables(ledger_url) == LEDGER_TABLES | {"alembic_version"}
    assert schema_diff(ledger_url) == []
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    (index,) = expression_indexes(ledger_url)
    assert "unique index uq_leases_host_tenant_idempotency_key" in index
    assert "coalesce(tenant, ''" in index and "idempotency_key" in index
    assert current_revision(ledger_url) == head_revision(ledger_url)


def test_upgrade_is_idempotent(ledger_url: str) -> None:
    db.upgrade(ledger_url)
    db.upgrade(ledger_url)
    assert current_revision(ledger_url) == head_revision(ledger_url)
    assert schema_diff(ledger_url) == []
    assert generation_counters(ledger_url) == [0]  # the seed row is not inserted twice


def test_downgrade_to_base_drops_every_table_and_upgrade_works_again(ledger_url: str) -> None:
    db.upgrade(ledger_url)
    db.downgrade(ledger_url, "base")
    assert tables(ledger_url) == {"alembic_version"}  # Alembic's own bookkeeping, now empty
    assert current_revision(ledger_url) is None
    assert overlap_guards(ledger_url) == set()
    db.upgrade(ledger_url)
    assert schema_diff(ledger_url) == []
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    assert generation_counters(ledger_url) == [0]


def device_uids(url: str) -> list[str]:
    with connect(url) as conn:
        return list(conn.execute(text("SELECT uid FROM devices ORDER BY id")).scalars())


def test_0005_qualifies_host_local_device_keys_with_their_host(ledger_url: str) -> None:
    """A ledger written before 0005 keeps its devices: their keys become what the daemon now
    computes (poold.ledger.registry.ledger_uid), and a downgrade gives the old keys back."""
    db.upgrade(ledger_url, "0004")
    before = ["dax:/platform/hmem.0:0x100000000", "emulated:/dev/shm/poold-h1-emu0",
              "cxl:0x1/0x0+0x0", "emulated:/shared/file"]
    with connect(ledger_url) as conn, conn.begin():
        now = "2026-12-01 00:00:00+00:00"
        conn.execute(text("INSERT INTO hosts (id, name, state, registered_at, last_seen_at) "
                          "VALUES ('h1', 'h1', 'up', :t, :t)"), {"t": now})
        conn.execute(text("INSERT INTO pools (id, name, claim_slice, default_ttl_s, max_ttl_s, "
                          "scrub_on_release, created_at) VALUES (1, 'p', 0, 60, 600, true, :t)"),
                     {"t": now})
        for i, uid in enumerate(before, start=1):
            conn.execute(text(
                "INSERT INTO devices (id, uid, host_id, pool_id, kind, devname, chardev, size, "
                "align, state, created_at, updated_at) VALUES (:id, :uid, :host, 1, 'devdax', "
                "'d', '/dev/d', 2097152, 2097152, 'online', :t, :t)"),
                {"id": i, "uid": uid, "host": None if i == 4 else "h1", "t": now})
    db.upgrade(ledger_url)
    assert device_uids(ledger_url) == [
        "dax:/platform/hmem.0:0x100000000@h1", "emulated:/dev/shm/poold-h1-emu0@h1",
        "cxl:0x1/0x0+0x0", "emulated:/shared/file"]  # shared: no host to qualify with
    db.downgrade(ledger_url, "0004")
    assert device_uids(ledger_url) == before


def test_0008_keeps_pools_and_devices_as_they_were(ledger_url: str) -> None:
    """A ledger written before 0008 keeps its pools' policy (every tenant admitted, no
    description, not retired) and devices (placed by rules, not by hand); the catalog version
    starts at 0 and the rules are not seeded yet (the next start with device_pools writes
    them)."""
    db.upgrade(ledger_url, "0007")
    with connect(ledger_url) as conn, conn.begin():
        now = "2026-12-01 00:00:00+00:00"
        conn.execute(text("INSERT INTO pools (id, name, claim_slice, default_ttl_s, max_ttl_s, "
                          "scrub_on_release, trusted, created_at) "
                          "VALUES (1, 'p', 0, 60, 600, true, false, :t)"), {"t": now})
        conn.execute(text(
            "INSERT INTO devices (id, uid, host_id, pool_id, kind, devname, chardev, size, "
            "align, state, created_at, updated_at) VALUES (1, 'cxl:0x1/0x0+0x0', NULL, 1, "
            "'devdax', 'd', '/dev/d', 2097152, 2097152, 'online', :t, :t)"), {"t": now})
    db.upgrade(ledger_url)
    with connect(ledger_url) as conn:
        pool = conn.execute(text("SELECT name, description, allowed_tenants, retired_at, "
                                 "max_ttl_s FROM pools")).one()
        assert tuple(pool) == ("p", "", None, None, 600)
        assert conn.execute(text("SELECT pool_assigned FROM devices")).scalar_one() in (False, 0)
        counters = dict(conn.execute(text("SELECT name, value FROM counters")).all())
        assert counters == {"generation": 0, "catalog": 0, "rules_seeded": 0}
        assert conn.execute(text("SELECT count(*) FROM pool_rules")).scalar_one() == 0
    db.downgrade(ledger_url, "0007")
    assert not {"pool_rules", "pool_quotas"} & tables(ledger_url)


def write_one_lease(ledger_url: str) -> None:
    """A host, a pool, a device, a claim and an active lease, as the schema of 0008 has them."""
    with connect(ledger_url) as conn, conn.begin():
        now = "2026-12-01 00:00:00+00:00"
        conn.execute(text("INSERT INTO hosts (id, name, state, registered_at, last_seen_at) "
                          "VALUES ('h', 'h', 'up', :t, :t)"), {"t": now})
        conn.execute(text("INSERT INTO pools (id, name, claim_slice, default_ttl_s, max_ttl_s, "
                          "scrub_on_release, trusted, created_at) "
                          "VALUES (1, 'p', 0, 60, 600, true, false, :t)"), {"t": now})
        conn.execute(text(
            "INSERT INTO devices (id, uid, host_id, pool_id, kind, devname, chardev, size, "
            "align, state, created_at, updated_at) VALUES (1, 'emu:0', 'h', 1, "
            "'emulated', 'd', '/dev/d', 4194304, 2097152, 'online', :t, :t)"), {"t": now})
        conn.execute(text("INSERT INTO claims (id, device_id, host_id, \"offset\", length, "
                          "state, created_at) VALUES (1, 1, 'h', 0, 4194304, 'active', :t)"),
                     {"t": now})
        conn.execute(text(
            "INSERT INTO leases (id, pool_id, device_id, claim_id, host_id, \"offset\", length, "
            "generation, ttl_s, granted_at, expires_at, state, labels) VALUES "
            "('" + "a" * 32 + "', 1, 1, 1, 'h', 0, 2097152, 1, 60, :t, :t, 'active', '{}')"),
            {"t": now})


def test_0009_adds_sessions_and_keeps_leases_and_their_overlap_guards(ledger_url: str) -> None:
    """A lease written before 0009 is a plain lease after it (no session), and neither the
    upgrade nor the downgrade rebuilds `leases` (on SQLite that would drop its triggers)."""
    db.upgrade(ledger_url, "0008")
    write_one_lease(ledger_url)
    db.upgrade(ledger_url)
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    with connect(ledger_url) as conn:
        assert conn.execute(text("SELECT session_id FROM leases")).one() == (None,)
    db.downgrade(ledger_url, "0008")
    assert "sessions" not in tables(ledger_url)
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    with connect(ledger_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM leases")).scalar_one() == 1


def test_0010_leaves_older_leases_plain_and_keeps_the_overlap_guards(ledger_url: str) -> None:
    """A lease written before 0010 is not elastic, never used, never asked back after it; the
    columns come and go without rebuilding `leases`."""
    db.upgrade(ledger_url, "0008")
    write_one_lease(ledger_url)
    db.upgrade(ledger_url)
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    with connect(ledger_url) as conn:
        row = conn.execute(text("SELECT elastic, used_at, reclaim_by FROM leases")).one()
        assert (bool(row[0]), row[1], row[2]) == (False, None, None)
    db.downgrade(ledger_url, "0009")
    assert overlap_guards(ledger_url) == expected_guards(ledger_url)
    with connect(ledger_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM leases")).scalar_one() == 1
        columns = conn.execute(text("SELECT * FROM leases")).keys()
        assert not {"elastic", "used_at", "reclaim_by"} & set(columns)
