"""SQLite's guard against overlapping live leases looks at one neighbour per holding state, not
at every live lease of the device.

0003's trigger asked whether any holding ('active' or 'scrubbing') lease of the device overlaps
the new extent; SQLite answered by reading every holding lease of the device (its index gave
device and state, not the offset), so a grant cost grew with the leases on its device: 0.52 ms
with 100, 3.1 ms with 10,000 on this project's 2-core machine. The holding leases of a device
never overlap (this guard keeps them so), so ordered by offset their ends are ordered too: the
new extent overlaps one of them exactly when it overlaps the last one starting before the new
extent ends (the longest, among those starting at the same offset). The same holds within each
holding state, so the trigger asks that of the last active lease and of the last scrubbing one,
each found by one descent of (device_id, state, offset, length), which replaces (device_id,
state) (every search by device and state still has its prefix; no index is added, so a grant
and a release keep as many index entries as before). Lengths are positive, as every lease the
daemon writes (a zero-length extent overlaps nothing on PostgreSQL's ranges and was not judged
alike here before either).

PostgreSQL keeps its exclusion constraint (a GiST index answers it without a scan); the index
changes there too, as the models say, and serves the sharing path's search of a device's
holding leases in a range.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_HOLDING = ("active", "scrubbing")
_IN_HOLDING = "({})".format(", ".join(f"'{state}'" for state in _HOLDING))
OLD, NEW = "ix_leases_device_id_state", "ix_leases_device_id_state_offset_length"


def _last_before_end_overlaps(state: str) -> str:
    return (
        'EXISTS (SELECT 1 FROM (SELECT o."offset", o.length FROM leases AS o '
        f"WHERE o.device_id = NEW.device_id AND o.state = '{state}' AND o.id != NEW.id "
        'AND o."offset" < NEW."offset" + NEW.length '
        'ORDER BY o."offset" DESC, o.length DESC LIMIT 1) AS p '
        'WHERE NEW."offset" < p."offset" + p.length)'
    )


def upgrade() -> None:
    op.create_index(NEW, "leases", ["device_id", "state", "offset", "length"])
    op.drop_index(OLD, table_name="leases")
    if op.get_bind().dialect.name == "sqlite":
        neighbours = " OR ".join(_last_before_end_overlaps(state) for state in _HOLDING)
        _guard(f"NEW.state IN {_IN_HOLDING} AND ({neighbours})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _guard(  # 0003's
            f"NEW.state IN {_IN_HOLDING} AND EXISTS (SELECT 1 FROM leases AS o "
            f"WHERE o.device_id = NEW.device_id AND o.state IN {_IN_HOLDING} "
            'AND o.id != NEW.id AND o."offset" < NEW."offset" + NEW.length '
            'AND NEW."offset" < o."offset" + o.length)'
        )
    op.create_index(OLD, "leases", ["device_id", "state"])
    op.drop_index(NEW, table_name="leases")


def _guard(overlap: str) -> None:
    for verb, what in (("INSERT", "INSERT"), ("UPDATE", 'UPDATE OF state, "offset", length')):
        op.execute(f"DROP TRIGGER IF EXISTS tr_leases_no_overlap_{verb.lower()}")
        op.execute(
            f"CREATE TRIGGER tr_leases_no_overlap_{verb.lower()} BEFORE {what} ON leases "
            f"WHEN {overlap} BEGIN SELECT RAISE(ABORT, 'overlapping live extent on leases'); "
            "END"
        )
