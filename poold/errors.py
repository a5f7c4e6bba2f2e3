"""The one error tree of poold.

Domain code raises these; `api.errors` maps each class to an HTTP status and renders
`{"error": ClassName, "detail": ...}`; the SDK rebuilds the same class from that name. Add a class
here and a row in `api/errors.py` together.
"""

from __future__ import annotations


class PooldError(Exception):
    """Base of every error poold raises on purpose."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(PooldError):
    """The request is well-formed JSON but asks for something impossible (bad size, TTL...)."""


class NotFound(PooldError):
    """Base for unknown objects."""


class UnknownLease(NotFound):
    pass


class UnknownPool(NotFound):
    pass


class UnknownDevice(NotFound):
    pass


class UnknownHost(NotFound):
    pass


class UnknownToken(NotFound):
    pass


class UnknownTenant(NotFound):
    pass


class UnknownSession(NotFound):
    pass


class Conflict(PooldError):
    """Base for requests that clash with the ledger's current state."""


class LeaseNotActive(Conflict):
    """The lease was released, revoked or lost; it cannot be renewed."""


class LeaseExpired(Conflict):
    """The lease passed expires_at by the ledger's clock."""


class SessionNotActive(Conflict):
    """The session was closed or revoked: it cannot be renewed, nor leases granted in it."""


class SessionExpired(Conflict):
    """The session passed expires_at by the ledger's clock; its leases expired with it."""


class IdempotencyConflict(Conflict):
    """An idempotency key was reused with a different request."""


class NotLeaseHolder(PooldError):
    """The caller did not show the lease's token: it was not handed this lease."""


class Unauthenticated(PooldError):
    """No credential, or one that is unknown, malformed or revoked."""


class Forbidden(PooldError):
    """The credential is valid but its role may not do this."""


class TenantNotAllowed(Forbidden):
    """The pool admits only the tenants its policy lists, and not this one."""


class PayloadTooLarge(PooldError):
    """The request body is over the daemon's limit (api.limits answers it before reading)."""


class QuotaExceeded(PooldError):
    """The grant would take a tenant past its byte or lease-count quota."""


class FdStoreUnavailable(PooldError):
    """The store that keeps lease memory across restarts (systemd's, or the fd keeper) cannot
    be reached: starting without it would lose every lease whose memory it holds."""


class RateLimited(PooldError):
    """The principal sent more requests than its rate limit allows; retry after `retry_after_s`."""

    def __init__(self, detail: str, retry_after_s: int = 1) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class LeaseTooLarge(InvalidRequest):
    """No device in the pool (or the pool's policy) could ever hold a lease this large."""


class NoCapacity(PooldError):
    """Nothing free right now is large enough; retrying later may succeed."""


class LedgerUnavailable(PooldError):
    """The ledger database cannot be reached or refused the write."""


class HostFenced(LedgerUnavailable):
    """This host has not reached the ledger for host_ttl: it grants nothing, and its leases are
    lost (other hosts may be granted their bytes after host_ttl + grace)."""


class DeviceBusy(Conflict):
    """The device holds live leases, or its memory is in use (system-ram), or the kernel
    answered EBUSY: drain it and let the leases end, or revoke them, then retry."""


class DeviceBound(Conflict):
    """The device asked for, handed to its holders whole, serves another tenant's leases: a
    descriptor of it reaches every byte of it, so it serves one tenant at a time (unless its
    pool is trusted). Another device, or an admin freeing it once that tenant's leases ended
    (`poold device unbind-tenant`), may serve the grant."""


class DeviceDraining(Conflict):
    """The device asked for is draining: it takes no new lease until an admin undrains it (its
    live leases run on). Another device of the pool, or no `device` hint, may serve the grant."""


class RegionFull(Conflict):
    """The dax region has less available than the size asked; destroy or shrink a device."""


class DriverError(PooldError):
    """A kernel or backing-file operation failed; the detail names the path."""


class ClientError(PooldError):
    """Raised by the SDK for local failures (transport, mapping)."""


class MisalignedExtent(ClientError):
    """The extent to map is not a multiple of the device alignment."""


class TransportError(ClientError):
    """The daemon could not be reached."""


class LeaseLost(ClientError):
    """The SDK could not keep the lease alive; the memory must no longer be used."""
