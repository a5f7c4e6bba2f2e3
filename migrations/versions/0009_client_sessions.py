"""Client sessions: a session (TTL, labels) that leases are granted under; one keepalive of the
session renews every lease in it, and ending it ends them (what etcd calls a lease covering
many keys). Plain leases (session_id NULL) work as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from poold.models.base import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("host_id", sa.String(128), sa.ForeignKey("hosts.id"), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("ttl_s", sa.Integer(), nullable=False),
        sa.Column("opened_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
    )
    op.create_index("ix_sessions_host_id_state_expires_at", "sessions",
                    ["host_id", "state", "expires_at"])
    op.create_index("ix_sessions_tenant_state", "sessions", ["tenant", "state"])
    if op.get_bind().dialect.name == "postgresql":
        op.add_column("leases", sa.Column("session_id", sa.String(64),
                                          sa.ForeignKey("sessions.id"), nullable=True))
    else:
        # Not batch mode: on SQLite that would rebuild `leases` and drop its overlap triggers.
        # A plain ADD COLUMN keeps them, and SQLite takes the REFERENCES clause of a NULL column
        # (alembic would refuse to emit it).
        op.execute("ALTER TABLE leases ADD COLUMN session_id VARCHAR(64) "
                   "REFERENCES sessions (id)")
    op.create_index("ix_leases_session_id", "leases", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_leases_session_id", table_name="leases")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("leases", "session_id")
    else:  # SQLite >= 3.35 drops a column in place (no rebuild, triggers kept)
        op.execute("ALTER TABLE leases DROP COLUMN session_id")
    op.drop_index("ix_sessions_tenant_state", table_name="sessions")
    op.drop_index("ix_sessions_host_id_state_expires_at", table_name="sessions")
    op.drop_table("sessions")
