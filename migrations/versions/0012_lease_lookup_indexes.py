"""Lease indexes that end in `expires_at`, so that SQLite searches a session's or a tenant's valid
leases by that key and not every valid lease in the ledger.

The statements that ask "the valid leases of X" filter on X, `state = 'active'` and
`expires_at > now`. SQLite plans without statistics (poold never runs ANALYZE): given (X) or
(X, state) beside (state, expires_at), it took (state, expires_at), which holds every valid
lease of every host, so a session keepalive and a tenant's quota check on each grant read the
whole live set (tests/ledger/test_query_plans.py, tests/ledger/test_ledger_scale.py). With the
key, the state and the expiry in one index, that index constrains more columns and is taken.

Both are partial, over the leases that have the key: a lease outside any session, or an
administrator's (no tenant), has no entry to keep, so its grant, renewal and release cost no
more than before. SQLite uses such an index for `x = ?`, which implies `x IS NOT NULL`.
PostgreSQL chose by its statistics before and can only do better with these.

- leases (session_id) -> (session_id, state, expires_at) where session_id is not null;
- leases (tenant, state) -> (tenant, state, expires_at) where tenant is not null.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# (old name, old columns) -> (new name, new columns, the rows it holds), all on `leases`
REPLACED = (
    (("ix_leases_session_id", ["session_id"]),
     ("ix_leases_session_id_state_expires_at", ["session_id", "state", "expires_at"],
      "session_id IS NOT NULL")),
    (("ix_leases_tenant_state", ["tenant", "state"]),
     ("ix_leases_tenant_state_expires_at", ["tenant", "state", "expires_at"],
      "tenant IS NOT NULL")),
)


def upgrade() -> None:
    for (old, _old_columns), (new, columns, where) in REPLACED:
        op.create_index(new, "leases", columns, sqlite_where=sa.text(where),
                        postgresql_where=sa.text(where))
        op.drop_index(old, table_name="leases")


def downgrade() -> None:
    for (old, old_columns), (new, _columns, _where) in reversed(REPLACED):
        op.create_index(old, "leases", old_columns)
        op.drop_index(new, table_name="leases")
