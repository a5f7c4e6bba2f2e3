"""Initial ledger: hosts, pools, devices, claims, leases, events, counters.

Live extents may not overlap on one device. PostgreSQL refuses it with exclusion constraints over
int8range (btree_gist gives `device_id WITH =`); SQLite has no such constraint, so triggers abort
an insert or update that would overlap.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from poold.models.base import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_EXTENT_TABLES = ("claims", "leases")


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("registered_at", UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hosts"),
    )
    op.create_table(
        "pools",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("claim_slice", sa.BigInteger(), nullable=False),
        sa.Column("default_ttl_s", sa.Integer(), nullable=False),
        sa.Column("max_ttl_s", sa.Integer(), nullable=False),
        sa.Column("max_lease_size", sa.BigInteger(), nullable=True),
        sa.Column("scrub_on_release", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pools"),
        sa.UniqueConstraint("name", name="uq_pools_name"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("uid", sa.String(512), nullable=False),
        sa.Column("host_id", sa.String(128), nullable=True),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("devname", sa.String(128), nullable=False),
        sa.Column("chardev", sa.String(1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("align", sa.BigInteger(), nullable=False),
        sa.Column("numa_node", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_devices"),
        sa.UniqueConstraint("uid", name="uq_devices_uid"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name="fk_devices_host_id_hosts"),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name="fk_devices_pool_id_pools"),
    )
    op.create_table(
        "claims",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.String(128), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_claims"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], name="fk_claims_device_id_devices"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name="fk_claims_host_id_hosts"),
    )
    op.create_index("ix_claims_device_id_state", "claims", ["device_id", "state"])
    op.create_table(
        "leases",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("claim_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.String(128), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("ttl_s", sa.Integer(), nullable=False),
        sa.Column("granted_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_digest", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_leases"),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name="fk_leases_pool_id_pools"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], name="fk_leases_device_id_devices"),
        sa.ForeignKeyConstraint(["claim_id"], ["claims.id"], name="fk_leases_claim_id_claims"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name="fk_leases_host_id_hosts"),
    )
    op.create_index("ix_leases_state_expires_at", "leases", ["state", "expires_at"])
    op.create_index("ix_leases_device_id_state", "leases", ["device_id", "state"])
    op.create_index(
        "uq_leases_host_id_idempotency_key", "leases", ["host_id", "idempotency_key"], unique=True
    )
    op.create_table(
        "events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True
        ),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("host_id", sa.String(128), nullable=True),
        sa.Column("device_id", sa.Integer(), nullable=True),
        sa.Column("lease_id", sa.String(64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_kind", "events", ["kind"])
    op.create_index("ix_events_lease_id", "events", ["lease_id"])
    op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_counters"),
    )
    op.execute("INSERT INTO counters (name, value) VALUES ('generation', 0)")
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_exclusions()
    else:
        _sqlite_overlap_triggers()


def _postgresql_exclusions() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
    for table in _EXTENT_TABLES:
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT ex_{table}_live_extent EXCLUDE USING gist "
            f'(device_id WITH =, int8range("offset", "offset" + length) WITH &&) '
            f"WHERE (state = 'active')"
        )


def _sqlite_overlap_triggers() -> None:
    for table in _EXTENT_TABLES:
        overlap = (
            f"NEW.state = 'active' AND EXISTS (SELECT 1 FROM {table} AS o "
            f"WHERE o.device_id = NEW.device_id AND o.state = 'active' AND o.id != NEW.id "
            f'AND o."offset" < NEW."offset" + NEW.length AND NEW."offset" < o."offset" + o.length)'
        )
        for verb, what in (("INSERT", "INSERT"), ("UPDATE", 'UPDATE OF state, "offset", length')):
            op.execute(
                f"CREATE TRIGGER tr_{table}_no_overlap_{verb.lower()} BEFORE {what} ON {table} "
                f"WHEN {overlap} BEGIN SELECT RAISE(ABORT, 'overlapping live extent on {table}'); "
                f"END"
            )


def downgrade() -> None:
    for table in ("counters", "events", "leases", "claims", "devices", "pools", "hosts"):
        op.drop_table(table)
