"""Lease indexes that end in `expires_at`, so that SQLite searches a session's, a tenant's or a
pool's valid leases by that key and not every valid lease in the ledger.

The statements that ask "the valid leases of X" filter on X, `state = 'active'` and
`expires_at > now`. SQLite plans without statistics (poold never runs ANALYZE): given (X) or
(X, state) beside (state, expires_at), it took (state, expires_at), which holds every valid
lease of every host, so a session keepalive, a tenant's quota check on each grant and the search
for elastic leases to ask back each read the whole live set (tests/ledger/test_query_plans.py).
With the key, the state and the expiry in one index, that index constrains more columns and is
taken. PostgreSQL chose by its statistics before and can only do better with these.

- leases (session_id) -> (session_id, state, expires_at): a session's keepalive and close;
- leases (tenant, state) -> (tenant, state, expires_at): a tenant's usage against its quota;
- leases (pool_id, elastic, state) -> (pool_id, elastic, state, expires_at): a pool's elastic
  leases that may be asked back.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# (old name, old columns) -> (new name, new columns), all on `leases`
REPLACED = (
    (("ix_leases_session_id", ["session_id"]),
     ("ix_leases_session_id_state_expires_at", ["session_id", "state", "expires_at"])),
    (("ix_leases_tenant_state", ["tenant", "state"]),
     ("ix_leases_tenant_state_expires_at", ["tenant", "state", "expires_at"])),
    (("ix_leases_pool_id_elastic_state", ["pool_id", "elastic", "state"]),
     ("ix_leases_pool_id_elastic_state_expires_at",
      ["pool_id", "elastic", "state", "expires_at"])),
)


def upgrade() -> None:
    for (old, _old_columns), (new, columns) in REPLACED:
        op.create_index(new, "leases", columns)
        op.drop_index(old, table_name="leases")


def downgrade() -> None:
    for (old, old_columns), (new, _columns) in reversed(REPLACED):
        op.create_index(old, "leases", old_columns)
        op.drop_index(new, table_name="leases")
