"""The hot path's reads do not grow with the ledger (PostgreSQL): bench/ledger_scale.py's rounds
(session open, grants, keepalives, release, session close, the reaper tick with its heartbeat
and lost-host check) on a ledger holding one host's rows, then on the same ledger grown to a
thousand hosts' devices, claims and sessions and 11,000 leases with their events. Counted in
rows PostgreSQL read (EXPLAIN ANALYZE of each statement the writer runs), which do not depend on
the machine's load: a statement that scans a table whole shows up as a thousand rows or more."""

from __future__ import annotations

import pytest

from bench import ledger_scale

pytestmark = pytest.mark.slow

# Rows a grown ledger may add to one operation: a table of a few dozen rows (the tenants) is
# read whole when that is the cheaper plan; a scan of any big table reads a thousand or more.
ALLOWANCE = 64


def test_hot_path_reads_stay_flat_as_the_ledger_grows(pg_url: str) -> None:
    small, large = ledger_scale.measure(pg_url, ledger_scale.TEST, rounds=1, read_rounds=3)
    for op in ledger_scale.OPERATIONS:
        ran = [stmt for (name, stmt) in large.reads.by_statement if name == op]
        assert ran, f"no statement of {op!r} was seen: the read counter is not listening"
    grew = {op: (max(small.reads.by_operation[op]), max(large.reads.by_operation[op]))
            for op in ledger_scale.OPERATIONS}
    worst = sorted(((large_n - small.reads.by_statement.get(key, 0), key)
                    for key, large_n in large.reads.by_statement.items()), reverse=True)[:3]
    assert all(after <= before + ALLOWANCE for before, after in grew.values()), \
        f"rows read (small, large) per operation: {grew}; grew most: {worst}"
