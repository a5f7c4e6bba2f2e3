"""Wire schemas of the REST API, shared with the client SDK.

Requests are strict: sizes and TTLs must be JSON integers (not strings, floats or booleans),
unknown fields are refused, every string and map is bounded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from poold.types import LEASE_ID_PATTERN, MAX_BYTES, TEXT_PATTERN, LeaseState, Role, SessionState

# Every string the API takes is bounded and holds no control character (a NUL byte cannot even
# be stored in PostgreSQL): refused at the edge, 422, before any ledger sees it.
Label = Annotated[str, Field(min_length=1, max_length=256, pattern=TEXT_PATTERN)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)]
TenantName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.-]*$")]


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: Annotated[StrictInt, Field(gt=0, le=MAX_BYTES, description="Bytes; rounded up to align.")]
    pool: Name | None = None
    ttl_s: Annotated[StrictInt | None, Field(gt=0, le=10 * 365 * 86_400)] = None
    labels: Annotated[dict[Label, Label], Field(max_length=64)] = Field(default_factory=dict)
    idempotency_key: Annotated[str | None, Field(min_length=1, max_length=255,
                                                 pattern=TEXT_PATTERN)] = None
    device: Annotated[Name | None, Field(description="Devname hint.")] = None
    numa_node: Annotated[StrictInt | None, Field(ge=0, le=65_535)] = None
    tenant: Annotated[TenantName | None, Field(
        description="Whom the lease is for; admins and host agents only (a tenant's own "
                    "leases are always its own).")] = None
    session_id: Annotated[str | None, Field(
        pattern=LEASE_ID_PATTERN,
        description="Grant it in this session (POST /v1/sessions): it lives as long as the "
                    "session, and the session's keepalive renews it; leave ttl_s out.")] = None
    elastic: StrictBool = Field(
        default=False,
        description="A cache its holder gives back on request: while it is held, a grant "
                    "that finds no room asks holders of elastic leases in the pool, coldest "
                    "first, to release them, and revokes those not released by the deadline.")
    wait_s: Annotated[float, Field(
        ge=0, le=60, strict=True,
        description="Seconds this grant may wait for room (elastic leases given back, others "
                    "ending) when the pool has none; waiting grants are answered in order of "
                    "arrival. 0, the default: refused at once (507 NoCapacity).")] = 0


class SessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl_s: Annotated[StrictInt, Field(gt=0, le=86_400)] = 30
    labels: Annotated[dict[Label, Label], Field(max_length=64)] = Field(default_factory=dict)
    tenant: Annotated[TenantName | None, Field(
        description="Whose session; admins and host agents only, as for leases.")] = None


class ReclaimAsk(BaseModel):
    """An elastic lease the daemon asked its holder to give back (a grant waits for room)."""

    lease: str
    length: int
    by: datetime = Field(description="Released by then, or revoked.")


class ClientSession(BaseModel):
    """A client session: leases granted in it live as long as it does; `leases` are its live
    leases (after a keepalive: the ones it renewed); `reclaim`, those of its elastic leases the
    daemon asked back."""

    id: str
    host: str
    tenant: str | None
    ttl_s: int
    opened_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: SessionState
    labels: dict[str, str]
    leases: list[str]
    reclaim: list[ReclaimAsk] = Field(default_factory=list)


class SessionKeepalive(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idle_s: Annotated[
        dict[Annotated[str, Field(pattern=LEASE_ID_PATTERN)],
             Annotated[float, Field(ge=0, le=10 * 365 * 86_400)]],
        Field(max_length=4096, description="Seconds since the holder last used each of the "
              "session's leases: the coldest elastic leases are asked back first.")] = \
        Field(default_factory=dict)


class KeepaliveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl_s: Annotated[StrictInt | None, Field(gt=0, le=10 * 365 * 86_400)] = None


class Lease(BaseModel):
    """A lease: where it is in its device (chardev, offset, length: the ledger's accounting and
    the memory map) and where its bytes are mapped (map_path, map_offset)."""

    id: str
    pool: str
    host: str
    tenant: str | None
    device: str
    device_id: int
    chardev: str
    offset: int
    length: int
    align: int
    generation: int
    ttl_s: int
    granted_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    state: LeaseState
    labels: dict[str, str]
    idempotency_key: str | None
    scrubbed_bytes: int = Field(description="While scrubbing: bytes zeroed so far.")
    kind: str = Field(description="The device's kind: devdax, emulated or system-ram.")
    map_path: str | None = Field(
        description="What root (or the daemon's user) opens to map the lease: the devdax "
        "chardev, or for emulated and system-ram leases the daemon's memfd of this lease "
        "(/proc/<pid>/fd/<n>, on the lease's host, while the lease holds its memory). Holders "
        "without that right map through the daemon's fd.sock.")
    map_offset: int = Field(description="Where the lease's bytes start in map_path.")
    session_id: str | None = Field(default=None,
                                   description="The session it was granted in, if any.")
    elastic: bool = Field(default=False, description="Given back by its holder on request.")
    reclaim_by: datetime | None = Field(
        default=None, description="Set when the daemon asked its holder to give it back: "
                                  "it is revoked past this instant.")


class GrantedLease(Lease):
    """The grant's answer: the lease, plus the token that proves its bearer was handed it (needed
    to receive the device's file descriptor over the daemon's UNIX socket). Shown only once."""

    token: str


class Device(BaseModel):
    id: int
    uid: str
    devname: str
    kind: str
    chardev: str
    pool: str
    host: str | None
    size: int
    align: int
    numa_node: int | None
    state: str
    claimed_bytes: int
    leased_bytes: int
    scrubbing_bytes: int = Field(description="Held by ended leases being zeroed.")
    free_bytes: int
    live_leases: int
    tenant_scope: str | None = Field(
        default=None, description="A devdax device handed out whole, outside a trusted pool: "
        "the tenant whose leases it serves ('' for leases of no tenant); null when free.")
    pool_assigned: bool = Field(default=False, description="Put in its pool by an admin: it "
                                "stays there whatever the placement rules say.")


PoolName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.-]*$")]
TtlSeconds = Annotated[StrictInt, Field(gt=0, le=10 * 365 * 86_400)]
Description = Annotated[str, Field(max_length=1024, pattern=TEXT_PATTERN)]
AllowedTenants = Annotated[list[TenantName] | None, Field(
    max_length=1024, description="Tenants that may lease from the pool; null: every tenant.")]


class PoolEdit(BaseModel):
    """A change to a pool's policy: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    description: Description | None = None
    scrub_on_release: bool | None = Field(default=None, description="Zero a lease's bytes "
                                          "before anyone else is granted them.")
    trusted: bool | None = Field(default=None, description="Its tenants share devices handed "
                                 "out whole; else such a device serves one tenant at a time.")
    default_ttl_s: TtlSeconds | None = None
    max_ttl_s: TtlSeconds | None = None
    max_lease_size: Annotated[StrictInt | None, Field(gt=0, le=MAX_BYTES)] = None
    claim_slice: Annotated[StrictInt | None, Field(ge=0, le=MAX_BYTES)] = None
    allowed_tenants: AllowedTenants = None


class PoolCreate(PoolEdit):
    """A new pool; a field left out takes this daemon's config default."""

    name: PoolName


class DeviceMove(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device_id: Annotated[StrictInt, Field(ge=1, le=2**31, description="As /v1/devices shows.")]


RULE_FIELDS = ("device", "name", "identity", "numa_node", "serial")


class PoolRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: Literal["device", "name", "identity", "numa_node", "serial"] = Field(description=(
        "What the glob matches: the device's name (dax0.1), its identity (as /v1/devices "
        "shows uid), device (either), its NUMA node, or the serial of a CXL memdev behind it."))
    pattern: Annotated[str, Field(min_length=1, max_length=256, pattern=TEXT_PATTERN)]
    pool: PoolName


class PoolRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: Annotated[list[PoolRule], Field(max_length=256, description="First match wins.")]


class PoolRulesView(PoolRules):
    config_rules: list[PoolRule] = Field(
        default_factory=list, description="What this daemon's config file (device_pools) says; "
        "it seeded the rules once, the ledger's win after that.")


class PoolQuota(BaseModel):
    tenant: str
    max_bytes: int | None
    max_leases: int | None
    leased_bytes: int
    live_leases: int


class ConfigDisagreement(BaseModel):
    setting: str
    file: Any
    ledger: Any


class Pool(BaseModel):
    id: int
    name: str
    devices: int
    size: int
    claimed_bytes: int
    leased_bytes: int
    scrubbing_bytes: int = Field(description="Held by ended leases being zeroed.")
    free_bytes: int
    available_bytes: int
    live_leases: int
    claim_slice: int
    default_ttl_s: int
    max_ttl_s: int
    max_lease_size: int | None
    scrub_on_release: bool
    trusted: bool = Field(default=False, description="Its tenants share devices handed out "
                          "whole (trusted_pools).")
    description: str = ""
    allowed_tenants: list[str] | None = Field(
        default=None, description="Tenants that may lease from it; null: every tenant. A "
        "tenant sees only its own name here.")
    retired_at: datetime | None = None
    quotas: list[PoolQuota] = Field(default_factory=list, description="Tenants' quotas in "
                                    "this pool (a tenant sees its own).")
    config_disagrees: list[ConfigDisagreement] = Field(
        default_factory=list, description="What this daemon's config file says of the pool "
        "otherwise than the ledger, whose policy wins.")


class Event(BaseModel):
    id: int
    at: datetime
    kind: str
    actor: str
    host: str | None
    device_id: int | None
    lease_id: str | None
    details: dict[str, Any]


class Health(BaseModel):
    status: str
    host: str
    version: str


class ErrorBody(BaseModel):
    error: str = Field(description="The error class, e.g. NoCapacity; the SDK raises the same.")
    detail: Any


class HostMemory(BaseModel):
    total: int
    available: int
    used: int
    swap_total: int
    swap_used: int


class NumaNode(BaseModel):
    node: int
    cpulist: str
    has_cpu: bool
    mem_total: int | None
    mem_free: int | None
    memory_tier: int | None


class Host(BaseModel):
    """A host in the ledger; memory figures only for the host that answers (it can measure
    its own)."""

    id: str
    name: str
    state: str
    registered_at: datetime
    last_seen_at: datetime
    heartbeat_age_s: float
    claims: int
    claimed_bytes: int
    live_leases: int
    leased_bytes: int
    memory: HostMemory | None = None
    numa_nodes: list[NumaNode] | None = None


class Claim(BaseModel):
    id: int
    host: str
    offset: int
    length: int
    created_at: datetime


class DeviceExtents(BaseModel):
    """A device's live claims and leases: its memory map."""

    device: Device
    claims: list[Claim]
    leases: list[Lease]


class WhoAmI(BaseModel):
    name: str
    role: Role
    tenant: str | None


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    role: Role
    tenant: TenantName | None = Field(default=None, description="Required for role tenant.")


class Token(BaseModel):
    id: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class CreatedToken(Token):
    """Shown once: only a digest of the secret is kept."""

    bearer: str


class TenantQuota(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_bytes: Annotated[StrictInt | None, Field(ge=0, le=MAX_BYTES)] = None
    max_leases: Annotated[StrictInt | None, Field(ge=0, le=1_000_000_000)] = None


class Tenant(BaseModel):
    name: str
    max_bytes: int | None
    max_leases: int | None
    leased_bytes: int
    live_leases: int
