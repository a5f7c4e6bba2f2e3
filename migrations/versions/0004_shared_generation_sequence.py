"""Several hosts on one PostgreSQL ledger: fencing tokens from a sequence.

Up to 0003 each grant took the next generation by updating the `counters` row, which every host's
writer then held to the end of its transaction: hosts sharing a ledger queued behind one row, and
a writer holding it while waiting for a device lock (to claim) deadlocked with one holding that
device lock while waiting for the row. A sequence hands out values without a row lock and never
goes back, which is all a fencing token needs (gaps are harmless). PostgreSQL only: a SQLite
ledger has one writer, which keeps using the row.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SEQUENCE = "lease_generation"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} AS bigint MINVALUE 1")
    # Start past every token handed out so far, so tokens keep growing across the change.
    op.execute(
        f"SELECT setval('{SEQUENCE}', GREATEST(1, "
        "(SELECT value FROM counters WHERE name = 'generation'), "
        "(SELECT COALESCE(MAX(generation), 0) FROM leases)), "
        "(SELECT GREATEST((SELECT value FROM counters WHERE name = 'generation'), "
        "(SELECT COALESCE(MAX(generation), 0) FROM leases)) > 0))"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "UPDATE counters SET value = GREATEST(value, "
        "(SELECT COALESCE(MAX(generation), 0) FROM leases)) WHERE name = 'generation'"
    )
    op.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")
