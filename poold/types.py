"""Plain domain types shared by every layer, the SDK included.

Nothing here touches the database, the network or the kernel. States are StrEnums whose values are
what the ledger stores and the API prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

# Largest byte count anything in poold accepts: fits a signed 64-bit column with room for
# offset + length, and is far beyond any memory device that exists.
MAX_BYTES = 2**62

# devdax devices align to 2 MiB on x86-64; the emulated device copies that so client code is the
# same on both.
DEFAULT_ALIGN = 2 * MiB


class DeviceKind(StrEnum):
    DEVDAX = "devdax"
    SYSTEM_RAM = "system-ram"
    EMULATED = "emulated"
    # A dynamic dax region carved per lease: each lease is a dax device made for it alone.
    DAX_REGION = "dax-region"


class DeviceState(StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    MISSING = "missing"


class HostState(StrEnum):
    UP = "up"
    LOST = "lost"


class ClaimState(StrEnum):
    ACTIVE = "active"
    RELEASED = "released"


class LeaseState(StrEnum):
    """`active` is the only valid state. `scrubbing`: ended (released, expired or revoked) in a
    pool that scrubs, its bytes being zeroed; it still holds its extent, and becomes the state it
    ended as once they are. The rest are final.

    An active lease past its expires_at is reported as `expired` by every read even before the
    reaper has finalised it (DESIGN invariant 5).
    """

    ACTIVE = "active"
    SCRUBBING = "scrubbing"
    RELEASED = "released"
    EXPIRED = "expired"
    REVOKED = "revoked"
    LOST = "lost"


# States in which a lease holds its extent: nothing else may be granted over it.
HOLDING_STATES = (LeaseState.ACTIVE.value, LeaseState.SCRUBBING.value)

# Lease ids are uuid4 hex (poold.ledger.leases.grant); anything else names no lease, and is
# refused at the edge before it reaches a query (a NUL byte would fail PostgreSQL's text type).
LEASE_ID_PATTERN = r"^[0-9a-f]{32}$"
_LEASE_ID = re.compile(LEASE_ID_PATTERN)


def is_lease_id(value: str) -> bool:
    return _LEASE_ID.fullmatch(value) is not None


# Bearer token ids (poold.security.new_token).
TOKEN_ID_PATTERN = r"^[0-9a-f]{16}$"
# Any other text the API takes (names, labels, idempotency keys, filters): no control characters.
# A NUL byte cannot be stored in PostgreSQL's text type; the rest have no place in a name.
TEXT_PATTERN = r"^[^\x00-\x1f\x7f]*$"
_TEXT = re.compile(TEXT_PATTERN)


def is_text(value: str) -> bool:
    return _TEXT.fullmatch(value) is not None



class Role(StrEnum):
    """What a bearer token may do: admins everything; tenants their own leases; host agents
    lease for any tenant on their host and read the inventory, but manage nothing."""

    ADMIN = "admin"
    TENANT = "tenant"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: from a bearer token, a UNIX-socket peer mapped by config, or the daemon."""

    name: str
    role: Role
    tenant: str | None = None

    @property
    def actor(self) -> str:
        """How the audit log names this principal."""
        return f"{self.role.value}:{self.name}"

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def owns(self, tenant: str | None) -> bool:
        """Whether a lease of `tenant` is this principal's to see and touch."""
        return self.role is not Role.TENANT or tenant == self.tenant


class SessionState(StrEnum):
    """`active` until closed by its holder, revoked by an admin or expired (computed on read
    past expires_at, as for leases); its leases end with it."""

    ACTIVE = "active"
    CLOSED = "closed"
    EXPIRED = "expired"
    REVOKED = "revoked"


class EventKind(StrEnum):
    LEASE_GRANTED = "lease.granted"
    LEASE_RENEWED = "lease.renewed"
    LEASE_RELEASED = "lease.released"
    LEASE_EXPIRED = "lease.expired"
    LEASE_REVOKED = "lease.revoked"
    LEASE_LOST = "lease.lost"
    LEASE_SCRUBBED = "lease.scrubbed"
    LEASE_RECLAIM_ASKED = "lease.reclaim_asked"
    CLAIM_CREATED = "claim.created"
    CLAIM_RELEASED = "claim.released"
    DEVICE_ADDED = "device.added"
    DEVICE_CHANGED = "device.changed"
    DEVICE_MISSING = "device.missing"
    DEVICE_CREATED = "device.created"
    DEVICE_DESTROYED = "device.destroyed"
    DEVICE_RESIZED = "device.resized"
    DEVICE_RECONFIGURED = "device.reconfigured"
    DEVICE_DRAINED = "device.drained"
    DEVICE_UNDRAINED = "device.undrained"
    HOST_REGISTERED = "host.registered"
    HOST_LOST = "host.lost"
    HOST_RECOVERED = "host.recovered"
    CLAIM_ADOPTED = "claim.adopted"
    POOL_CREATED = "pool.created"
    POOL_CHANGED = "pool.changed"
    POOL_RETIRED = "pool.retired"
    POOL_QUOTA_CHANGED = "pool.quota_changed"
    POOL_RULES_CHANGED = "pool.rules_changed"
    TOKEN_CREATED = "token.created"
    TOKEN_REVOKED = "token.revoked"
    TENANT_CHANGED = "tenant.changed"
    SESSION_OPENED = "session.opened"
    SESSION_RENEWED = "session.renewed"
    SESSION_CLOSED = "session.closed"
    SESSION_EXPIRED = "session.expired"
    SESSION_REVOKED = "session.revoked"


@dataclass(frozen=True, slots=True)
class Extent:
    """A byte range [offset, offset + length) on one device."""

    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length

    def overlaps(self, other: Extent) -> bool:
        return self.offset < other.end and other.offset < self.end

    def contains(self, other: Extent) -> bool:
        return self.offset <= other.offset and other.end <= self.end


def round_up(value: int, align: int) -> int:
    return -(-value // align) * align


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}


def parse_size(text: str) -> int:
    """Parse "64MiB", "1G", "2097152" into bytes (binary units, as ndctl and daxctl read them)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use bytes or a unit such as 64MiB, 1GiB)")
    unit = (match.group(2) or "").upper().rstrip("B").rstrip("I")
    size = int(match.group(1)) * _UNITS[unit or ""]
    if size > MAX_BYTES:
        raise ValueError(f"size {text!r} is larger than poold accepts ({MAX_BYTES} bytes)")
    return size


def format_size(size: int) -> str:
    for unit, factor in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
