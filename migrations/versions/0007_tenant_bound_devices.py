"""Devices handed out whole serve one tenant at a time; pools may be declared trusted.

A devdax device that cannot be carved per lease (a static namespace, a region carved by hand) is
handed to its holders whole: a descriptor of it reaches every byte of it. From 0007 such a device
serves the leases of one tenant at a time (devices.tenant_scope, set by its first lease), unless
its pool's tenants trust each other (pools.trusted, from the trusted_pools setting).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("trusted", sa.Boolean(), nullable=False,
                                   server_default=sa.text("false")))
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("tenant_scope", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("tenant_scope")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("trusted")
