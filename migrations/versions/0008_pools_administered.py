"""Pools are administered in the ledger: a description, who may lease, per-tenant quotas in the
pool, retirement, placement rules and devices assigned by hand, and a catalog version every
daemon checks before it trusts its cached policy.

Before 0008 a pool's policy came from each host's config file at every start (the last host to
start won). From 0008 the file seeds a pool the first time it is named and the ledger wins; an
admin edits pools through the API, and each edit bumps the `catalog` counter, so every daemon
of the ledger reads the new policy before its next grant.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from poold.models.base import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("description", sa.String(1024), nullable=False,
                                   server_default=sa.text("''")))
        # NULL: every tenant may lease from the pool; else a JSON list of tenant names.
        batch.add_column(sa.Column("allowed_tenants", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("retired_at", UTCDateTime(), nullable=True))
    op.create_table(
        "pool_quotas",
        sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id"), primary_key=True),
        sa.Column("tenant", sa.String(128), sa.ForeignKey("tenants.name"), primary_key=True),
        sa.Column("max_bytes", sa.BigInteger(), nullable=True),
        sa.Column("max_leases", sa.Integer(), nullable=True),
    )
    # Placement rules, first match (lowest position) wins; a device moved by an admin keeps its
    # pool (pool_assigned) whatever the rules say.
    op.create_table(
        "pool_rules",
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("field", sa.String(16), nullable=False),
        sa.Column("pattern", sa.String(256), nullable=False),
        sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id"), nullable=False),
    )
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("pool_assigned", sa.Boolean(), nullable=False,
                                   server_default=sa.text("false")))
    op.execute("INSERT INTO counters (name, value) VALUES ('catalog', 0)")
    # 1 once a host's config seeded the rules: after that the ledger's rules are the rules.
    op.execute("INSERT INTO counters (name, value) VALUES ('rules_seeded', 0)")


def downgrade() -> None:
    op.execute("DELETE FROM counters WHERE name IN ('catalog', 'rules_seeded')")
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("pool_assigned")
    op.drop_table("pool_rules")
    op.drop_table("pool_quotas")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("retired_at")
        batch.drop_column("allowed_tenants")
        batch.drop_column("description")
