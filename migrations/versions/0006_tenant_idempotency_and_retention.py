"""Idempotency keys per tenant, and an index for pruning ended leases.

Up to 0005 an idempotency key was unique per host: one tenant could squat another's keys (the
owner then got 409 for good) and learn which keys existed. From 0006 a key is unique per host
and tenant (admins' leases share the '' scope). Keys and ended leases are pruned after the
retention age (poold.ledger.retention), which `(host_id, ended_at)` serves.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("uq_leases_host_id_idempotency_key", table_name="leases")
    op.create_index("uq_leases_host_tenant_idempotency_key", "leases",
                    ["host_id", sa.text("coalesce(tenant, '')"), "idempotency_key"], unique=True)
    op.create_index("ix_leases_host_id_ended_at", "leases", ["host_id", "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_leases_host_id_ended_at", table_name="leases")
    op.drop_index("uq_leases_host_tenant_idempotency_key", table_name="leases")
    # Keys another tenant also used cannot all stay: keep the newest of each.
    op.execute("UPDATE leases SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND "
               "EXISTS (SELECT 1 FROM leases other WHERE other.host_id = leases.host_id AND "
               "other.idempotency_key = leases.idempotency_key AND "
               "other.granted_at > leases.granted_at)")
    op.create_index("uq_leases_host_id_idempotency_key", "leases",
                    ["host_id", "idempotency_key"], unique=True)
