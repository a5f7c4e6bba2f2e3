"""PooldClient: the REST API as Python calls; the daemon's errors come back as the same classes."""

from __future__ import annotations

from typing import Any

import httpx

from api.schemas import Device, Event, Pool
from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.lease import Lease

DEFAULT_URL = "http://127.0.0.1:7077"

# Error names the API uses that are not PooldError classes.
_WIRE_ALIASES: dict[str, type[errors.PooldError]] = {
    "ValidationError": errors.InvalidRequest,
    "NotFound": errors.NotFound,
}


def error_from_wire(status: int, payload: Any) -> errors.PooldError:
    """Rebuild the daemon's exception from `{"error": ClassName, "detail": ...}`."""
    name = payload.get("error") if isinstance(payload, dict) else None
    detail = payload.get("detail") if isinstance(payload, dict) else payload
    cls = getattr(errors, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.PooldError)):
        cls = _WIRE_ALIASES.get(str(name), errors.PooldError)
    exc = cls(str(detail) if not isinstance(detail, str) else detail)
    exc.status = status  # type: ignore[attr-defined]
    return exc


class PooldClient:
    """A connection to one poold. `transport` is injectable (tests use httpx.ASGITransport)."""

    def __init__(self, url: str = DEFAULT_URL, *, transport: httpx.BaseTransport | None = None,
                 timeout_s: float = 10.0) -> None:
        self._http = httpx.Client(base_url=url, transport=transport, timeout=timeout_s)

    def __enter__(self) -> PooldClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def lease(self, size: int, *, ttl_s: int = 30, pool: str | None = None,
              labels: dict[str, str] | None = None, idempotency_key: str | None = None,
              keepalive: bool = True) -> Lease:
        """Grant a lease now; use it as a context manager to keep it alive and release it."""
        info = self.grant(size, ttl_s=ttl_s, pool=pool, labels=labels,
                          idempotency_key=idempotency_key)
        return Lease(self, info, keepalive=keepalive)

    def grant(self, size: int, *, ttl_s: int | None = None, pool: str | None = None,
              labels: dict[str, str] | None = None, idempotency_key: str | None = None
              ) -> LeaseInfo:
        body: dict[str, Any] = {"size": size, "labels": labels or {}}
        for key, value in (("ttl_s", ttl_s), ("pool", pool), ("idempotency_key", idempotency_key)):
            if value is not None:
                body[key] = value
        return LeaseInfo.model_validate(self._call("POST", "/v1/leases", json=body))

    def keepalive(self, lease_id: str, ttl_s: int | None = None) -> LeaseInfo:
        body = {"ttl_s": ttl_s} if ttl_s is not None else None
        return LeaseInfo.model_validate(
            self._call("POST", f"/v1/leases/{lease_id}/keepalive", json=body))

    def release(self, lease_id: str) -> LeaseInfo:
        return LeaseInfo.model_validate(self._call("DELETE", f"/v1/leases/{lease_id}"))

    def get_lease(self, lease_id: str) -> LeaseInfo:
        return LeaseInfo.model_validate(self._call("GET", f"/v1/leases/{lease_id}"))

    def leases(self, **params: Any) -> list[LeaseInfo]:
        return [LeaseInfo.model_validate(x) for x in self._call("GET", "/v1/leases", params=params)]

    def devices(self) -> list[Device]:
        return [Device.model_validate(x) for x in self._call("GET", "/v1/devices")]

    def pools(self) -> list[Pool]:
        return [Pool.model_validate(x) for x in self._call("GET", "/v1/pools")]

    def events(self, **params: Any) -> list[Event]:
        return [Event.model_validate(x) for x in self._call("GET", "/v1/events", params=params)]

    def raw(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any endpoint, JSON in and out, errors raised as PooldError classes."""
        return self._call(method, path, **kwargs)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise errors.TransportError(f"{method} {path}: {exc}") from exc
        try:
            payload = response.json()
        except ValueError:
            payload = {"error": "PooldError", "detail": response.text[:500]}
        if response.status_code >= 400:
            raise error_from_wire(response.status_code, payload)
        return payload
