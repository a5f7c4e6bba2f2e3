"""Device keys: a name that means something on one host only is qualified with that host.

Up to 0004 a device's key was its discovered identity everywhere. Identical machines sharing one
PostgreSQL ledger name their own, different hmem or pmem devices alike (kernel path and physical
address), and emulated files alike, so the second host took over the first one's device row.
From 0005 such host-local identities are stored as `<identity>@<host id>`; CXL identities (by
serial and device address: the same memory wherever it is seen) and shared devices keep the
identity itself (poold.ledger.registry.ledger_uid). This rewrites the keys of existing devices to
what the daemon now computes, so a restart after the upgrade finds its devices again.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_HOST_LOCAL = "host_id IS NOT NULL AND (uid LIKE 'dax:%' OR uid LIKE 'emulated:%')"


def upgrade() -> None:
    op.execute(f"UPDATE devices SET uid = uid || '@' || host_id WHERE {_HOST_LOCAL} "
               "AND uid NOT LIKE '%@' || host_id")


def downgrade() -> None:
    op.execute("UPDATE devices SET uid = substr(uid, 1, length(uid) - length(host_id) - 1) "
               f"WHERE {_HOST_LOCAL} AND uid LIKE '%@' || host_id")
