"""The hot path's reads do not grow with the ledger: bench/ledger_scale.py's rounds (session
open, grants, keepalives, release, session close, the reaper tick with its heartbeat and
lost-host check) on a ledger holding one host's rows, then on the same ledger grown to a
thousand hosts' devices, claims and sessions and 11,000 leases with their events. Counted in
what the database did for each statement the writer runs, which does not depend on the
machine's load: on PostgreSQL the rows it read (EXPLAIN ANALYZE), where a statement that scans
a table whole shows up as a thousand rows or more; on SQLite the instructions its virtual
machine ran, where reading the grown ledger's thousand live leases is some 5,000 more."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import ledger_scale

pytestmark = pytest.mark.slow

# What a grown ledger may add to one operation. PostgreSQL, rows: a table of a few dozen rows
# (the tenants) is read whole when that is the cheaper plan; a scan of any big table reads a
# thousand or more. SQLite, instructions: a row read costs about five.
ALLOWANCE = {"postgresql": 64, "sqlite": 500}


def assert_flat(url: str, database: str) -> None:
    small, large = ledger_scale.measure(url, ledger_scale.TEST, rounds=1, read_rounds=3)
    for op in ledger_scale.OPERATIONS:
        ran = [stmt for (name, stmt) in large.reads.by_statement if name == op]
        assert ran, f"no statement of {op!r} was seen: the read counter is not listening"
    grew = {op: (max(small.reads.by_operation[op]), max(large.reads.by_operation[op]))
            for op in ledger_scale.OPERATIONS}
    worst = sorted(((large_n - small.reads.by_statement.get(key, 0), key)
                    for key, large_n in large.reads.by_statement.items()), reverse=True)[:3]
    assert all(after <= before + ALLOWANCE[database] for before, after in grew.values()), \
        f"{database}: reads (small, large) per operation: {grew}; grew most: {worst}"


def test_hot_path_reads_stay_flat_as_the_ledger_grows(pg_url: str) -> None:
    assert_flat(pg_url, "postgresql")


def test_hot_path_reads_stay_flat_as_a_sqlite_ledger_grows(tmp_path: Path) -> None:
    """SQLite plans from the schema alone (poold never runs ANALYZE): given a key's index and
    (state, expires_at), it took the second for "the valid leases of X" and read every valid
    lease of the ledger (migration 0012)."""
    assert_flat(f"sqlite:///{tmp_path}/ledger.sqlite3", "sqlite")
