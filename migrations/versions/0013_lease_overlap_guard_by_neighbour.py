"""SQLite's guard against overlapping live leases looks at one neighbour, not at every live lease
of the device.

0003's trigger asked whether any holding ('active' or 'scrubbing') lease of the device overlaps
the new extent; SQLite answered by reading every holding lease of the device (the index gives
device and state, not the offset), so a grant cost grew with the leases on its device: 0.52 ms
with 100, 3.1 ms with 10,000 on this project's 2-core machine. The holding leases of a device
never overlap (this guard keeps them so), so ordered by offset their ends are ordered too: the
new extent overlaps one of them exactly when it overlaps the last one starting before the new
extent ends (the longest, among those starting at the same offset). A partial index on the
holding leases' (device, offset, length) finds that one in a descent of the tree. Lengths are
positive, as every lease the daemon writes (a zero-length extent overlaps nothing on
PostgreSQL's ranges and was not judged alike here before either).

PostgreSQL keeps its exclusion constraint (a GiST index answers it without a scan); the partial
index exists there too, as the models say, and serves the sharing path's search of a device's
holding leases in a range.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_HOLDING = "('active', 'scrubbing')"
INDEX = "ix_leases_holding_device_id_offset_length"


def upgrade() -> None:
    where = sa.text(f"state IN {_HOLDING}")
    op.create_index(INDEX, "leases", ["device_id", "offset", "length"],
                    sqlite_where=where, postgresql_where=where)
    if op.get_bind().dialect.name == "sqlite":
        # The subquery's `o.state IN (...)` is written as the index's WHERE, which is what lets
        # SQLite use the partial index.
        _guard(
            f"NEW.state IN {_HOLDING} AND EXISTS (SELECT 1 FROM (SELECT o.\"offset\", o.length "
            f"FROM leases AS o WHERE o.device_id = NEW.device_id AND o.state IN {_HOLDING} "
            'AND o.id != NEW.id AND o."offset" < NEW."offset" + NEW.length '
            'ORDER BY o."offset" DESC, o.length DESC LIMIT 1) AS p '
            'WHERE NEW."offset" < p."offset" + p.length)'
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _guard(  # 0003's
            f"NEW.state IN {_HOLDING} AND EXISTS (SELECT 1 FROM leases AS o "
            f"WHERE o.device_id = NEW.device_id AND o.state IN {_HOLDING} AND o.id != NEW.id "
            'AND o."offset" < NEW."offset" + NEW.length AND NEW."offset" < o."offset" + o.length)'
        )
    op.drop_index(INDEX, table_name="leases")


def _guard(overlap: str) -> None:
    for verb, what in (("INSERT", "INSERT"), ("UPDATE", 'UPDATE OF state, "offset", length')):
        op.execute(f"DROP TRIGGER IF EXISTS tr_leases_no_overlap_{verb.lower()}")
        op.execute(
            f"CREATE TRIGGER tr_leases_no_overlap_{verb.lower()} BEFORE {what} ON leases "
            f"WHEN {overlap} BEGIN SELECT RAISE(ABORT, 'overlapping live extent on leases'); "
            "END"
        )
