"""Indexes that keep the hot path's reads proportional to what changed, not to the ledger's size
(bench/ledger_scale.py found each of these statements reading every row of its table on a ledger
of 1,000 hosts):

- hosts (state, last_seen_at): the reaper's search for lost hosts reads the silent ones only;
- claims (host_id, state): a host's live claims (its fingerprint, adoption);
- devices (host_id): the writer's catalog reads the devices this host can use (its own, shared);
- leases (host_id, state): a host's holding leases (its fingerprint, expiries, a fence),
  without its ended history;
- leases (claim_id, state): whether a claim still holds a lease, when giving it back idle.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_hosts_state_last_seen_at", "hosts", ["state", "last_seen_at"]),
    ("ix_claims_host_id_state", "claims", ["host_id", "state"]),
    ("ix_devices_host_id", "devices", ["host_id"]),
    ("ix_leases_host_id_state", "leases", ["host_id", "state"]),
    ("ix_leases_claim_id_state", "leases", ["claim_id", "state"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
