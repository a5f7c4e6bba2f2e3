"""Scrub on release: a lease that ended in a scrubbing pool keeps its extent (state `scrubbing`)
until its bytes are zeroed, so the overlap guards now cover `active` and `scrubbing` leases.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_HOLDING = "('active', 'scrubbing')"


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("ended_as", sa.String(16), nullable=True))
        batch.add_column(sa.Column("scrubbed_bytes", sa.BigInteger(), nullable=False,
                                   server_default="0"))
    _lease_overlap_guard(_HOLDING)


def downgrade() -> None:
    # Scrubbing leases would fall outside the old guard: end them as they were ending.
    op.execute("UPDATE leases SET state = ended_as WHERE state = 'scrubbing'")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("scrubbed_bytes")
        batch.drop_column("ended_as")
    _lease_overlap_guard("('active')")


def _lease_overlap_guard(states: str) -> None:
    """Replace the leases table's overlap guard (0001's) with one over `states`."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE leases DROP CONSTRAINT ex_leases_live_extent")
        op.execute(
            "ALTER TABLE leases ADD CONSTRAINT ex_leases_live_extent EXCLUDE USING gist "
            '(device_id WITH =, int8range("offset", "offset" + length) WITH &&) '
            f"WHERE (state IN {states})"
        )
        return
    overlap = (
        f"NEW.state IN {states} AND EXISTS (SELECT 1 FROM leases AS o "
        f"WHERE o.device_id = NEW.device_id AND o.state IN {states} AND o.id != NEW.id "
        'AND o."offset" < NEW."offset" + NEW.length AND NEW."offset" < o."offset" + o.length)'
    )
    for verb, what in (("INSERT", "INSERT"), ("UPDATE", 'UPDATE OF state, "offset", length')):
        op.execute(f"DROP TRIGGER IF EXISTS tr_leases_no_overlap_{verb.lower()}")
        op.execute(
            f"CREATE TRIGGER tr_leases_no_overlap_{verb.lower()} BEFORE {what} ON leases "
            f"WHEN {overlap} BEGIN SELECT RAISE(ABORT, 'overlapping live extent on leases'); "
            "END"
        )
