"""Elastic leases: a lease granted `elastic` is a cache its holder gives back on request.

`elastic` marks it; `reclaim_by` is set when the daemon asked its holder to give it back (a
grant is waiting for the room), the instant past which the reaper revokes it; `used_at` is when
its holder last reported using it (the coldest are asked first).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from poold.models.base import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_COLUMNS = ("elastic", "used_at", "reclaim_by")


def upgrade() -> None:
    # Plain ADD COLUMN, not batch mode: on SQLite a batch would rebuild `leases` and drop its
    # overlap triggers.
    op.add_column("leases", sa.Column("elastic", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
    op.add_column("leases", sa.Column("used_at", UTCDateTime(), nullable=True))
    op.add_column("leases", sa.Column("reclaim_by", UTCDateTime(), nullable=True))
    op.create_index("ix_leases_pool_id_elastic_state", "leases", ["pool_id", "elastic", "state"])


def downgrade() -> None:
    op.drop_index("ix_leases_pool_id_elastic_state", table_name="leases")
    for column in reversed(_COLUMNS):
        if op.get_bind().dialect.name == "postgresql":
            op.drop_column("leases", column)
        else:  # SQLite >= 3.35 drops a column in place (no rebuild, triggers kept)
            op.execute(f"ALTER TABLE leases DROP COLUMN {column}")
