"""Tenants with quotas, and bearer tokens (stored as the SHA-256 of their secret).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from poold.models.base import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("max_bytes", sa.BigInteger(), nullable=True),
        sa.Column("max_leases", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_tenants"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name="fk_tokens_tenant_tenants"),
    )
    # Quota checks sum a tenant's live leases.
    op.create_index("ix_leases_tenant_state", "leases", ["tenant", "state"])


def downgrade() -> None:
    op.drop_index("ix_leases_tenant_state", "leases")
    op.drop_table("tokens")
    op.drop_table("tenants")
