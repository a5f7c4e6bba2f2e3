"""Ledger tables: hosts, pools, devices, claims, leases, events, tenants, tokens, counters.

Byte columns are BigInteger. Live extents may not overlap: PostgreSQL refuses it with exclusion
constraints, SQLite with triggers (both created by the migration, see migrations/versions).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, ForeignKey, Index, Integer, String, false, text
from sqlalchemy.orm import Mapped, mapped_column

from poold.models.base import Base, UTCDateTime


class Host(Base):
    __tablename__ = "hosts"
    __table_args__ = (Index("ix_hosts_state_last_seen_at", "state", "last_seen_at"),)

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Pool(Base):
    __tablename__ = "pools"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    claim_slice: Mapped[int] = mapped_column(BigInteger)
    default_ttl_s: Mapped[int] = mapped_column(Integer)
    max_ttl_s: Mapped[int] = mapped_column(Integer)
    max_lease_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    scrub_on_release: Mapped[bool] = mapped_column(Boolean)
    # Its tenants trust each other with their bytes: a device that is not carved per lease
    # serves all of them at once (else one tenant at a time: Device.tenant_scope).
    trusted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    description: Mapped[str] = mapped_column(String(1024), default="", server_default=text("''"))
    # None: every tenant may lease from it; else the names of those who may.
    allowed_tenants: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # A retired pool grants nothing and takes no device; its name and history stay.
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Device(Base):
    __tablename__ = "devices"
    __table_args__ = (Index("ix_devices_host_id", "host_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(512), unique=True)
    host_id: Mapped[str | None] = mapped_column(ForeignKey("hosts.id"), nullable=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    kind: Mapped[str] = mapped_column(String(16))
    devname: Mapped[str] = mapped_column(String(128))
    chardev: Mapped[str] = mapped_column(String(1024))
    size: Mapped[int] = mapped_column(BigInteger)
    align: Mapped[int] = mapped_column(BigInteger)
    numa_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    # A devdax device handed out whole, in a pool that is not trusted, serves the leases of one
    # tenant at a time: that tenant ('' for leases of no tenant), from its first lease until an
    # admin frees it. None: free.
    tenant_scope: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Put in its pool by an admin (poold.ledger.pools.move_device): it stays there, whatever the
    # placement rules say, also when it comes back after going missing.
    pool_assigned: Mapped[bool] = mapped_column(Boolean, default=False,
                                                server_default=text("false"))


class Claim(Base):
    __tablename__ = "claims"
    __table_args__ = (
        Index("ix_claims_device_id_state", "device_id", "state"),
        Index("ix_claims_host_id_state", "host_id", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"))
    offset: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ClientSession(Base):
    """A client's session (what etcd calls a lease): leases granted under it live as long as it
    does, and one keepalive of the session renews all of them. Opened on one host, whose
    reaper expires it; ending it ends its leases."""

    __tablename__ = "sessions"
    __table_args__ = (
        Index("ix_sessions_host_id_state_expires_at", "host_id", "state", "expires_at"),
        Index("ix_sessions_tenant_state", "tenant", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"))
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)
    ttl_s: Mapped[int] = mapped_column(Integer)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)


_HAS_TENANT = text("tenant IS NOT NULL")
_IN_SESSION = text("session_id IS NOT NULL")


class Lease(Base):
    __tablename__ = "leases"
    __table_args__ = (
        Index("ix_leases_state_expires_at", "state", "expires_at"),
        # SQLite's overlap guard finds a new lease's neighbour by offset through it (0013).
        Index("ix_leases_device_id_state_offset_length", "device_id", "state", "offset",
              "length"),
        # An idempotency key is its tenant's (admins' leases share the '' scope): another
        # tenant can neither squat it nor learn that it exists.
        Index("uq_leases_host_tenant_idempotency_key", "host_id", text("coalesce(tenant, '')"),
              "idempotency_key", unique=True),
        Index("ix_leases_host_id_ended_at", "host_id", "ended_at"),
        # Each ends in expires_at so that SQLite, planning without statistics, searches the
        # valid leases of a tenant or a session by it rather than by (state, expires_at); each
        # holds only the leases that have the key (migration 0012).
        Index("ix_leases_tenant_state_expires_at", "tenant", "state", "expires_at",
              sqlite_where=_HAS_TENANT, postgresql_where=_HAS_TENANT),
        Index("ix_leases_session_id_state_expires_at", "session_id", "state", "expires_at",
              sqlite_where=_IN_SESSION, postgresql_where=_IN_SESSION),
        Index("ix_leases_pool_id_elastic_state", "pool_id", "elastic", "state"),
        Index("ix_leases_host_id_state", "host_id", "state"),
        Index("ix_leases_claim_id_state", "claim_id", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    claim_id: Mapped[int] = mapped_column(ForeignKey("claims.id"))
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"))
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)
    offset: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)
    generation: Mapped[int] = mapped_column(BigInteger)
    ttl_s: Mapped[int] = mapped_column(Integer)
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # While scrubbing: the state it becomes once zeroed, and how many bytes are zeroed so far.
    ended_as: Mapped[str | None] = mapped_column(String(16), nullable=True)
    scrubbed_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Granted under a client session: it expires with the session and is renewed with it.
    session_id: Mapped[str | None] = mapped_column(ForeignKey("sessions.id"), nullable=True)
    # A cache its holder gives back on request: asked at `reclaim_by` - the grace, revoked past
    # it; the coldest (`used_at`, reported by the holder, else its grant) are asked first.
    elastic: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reclaim_by: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Event(Base):
    """Append-only audit row, written in the same transaction as the change it records."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(32), index=True)
    actor: Mapped[str] = mapped_column(String(255))
    host_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    device_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    lease_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)


class Tenant(Base):
    """A tenant and its quotas (None: unlimited). Grants lock the row, so quotas hold across
    hosts."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    max_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_leases: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class PoolRule(Base):
    """Where a new device goes: the first rule (by position) whose glob matches the device's
    `field` (name, identity, device = name or identity, numa_node, serial) names its pool."""

    __tablename__ = "pool_rules"

    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    field: Mapped[str] = mapped_column(String(16))
    pattern: Mapped[str] = mapped_column(String(256))
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))


class PoolQuota(Base):
    """A tenant's quotas inside one pool (None: unlimited there), beside its global ones."""

    __tablename__ = "pool_quotas"

    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"), primary_key=True)
    max_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_leases: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Token(Base):
    """A bearer credential. Only the SHA-256 of its secret is stored: the secret is random
    (256 bits), so a slow hash would add nothing but latency to every request."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    tenant: Mapped[str | None] = mapped_column(ForeignKey("tenants.name"), nullable=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str] = mapped_column(String(255))
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Counter(Base):
    """Named monotonic counters; `generation` is the fencing token handed to each lease,
    `catalog` grows with every admin change of a pool's policy (daemons re-read on a change)."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
