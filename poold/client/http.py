"""PooldClient: the REST API as Python calls; the daemon's errors come back as the same classes."""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx

from api.schemas import ClientSession, Device, Event, GrantedLease, Pool, ReclaimAsk
from api.schemas import Lease as LeaseInfo
from poold import errors
from poold.client.lease import Lease
from poold.client.session import IdleReport, ReclaimHandler, Session
from poold.client.wire import error_from_wire

DEFAULT_URL = "http://127.0.0.1:7077"


class PooldClient:
    """A connection to one poold.

    `url` for TCP (https:// with TLS; `verify`: a CA file to trust, or False), or `uds` for the
    daemon's api.sock on this host, where the daemon may know the caller by its uid. `token` is
    a bearer token (default: $POOLD_TOKEN). `fd_socket` (the daemon's fd.sock) lets leases be
    mapped from a descriptor the daemon passes, with no permission on the device; without it
    the SDK opens the chardev itself. `transport` is injectable.
    """

    def __init__(self, url: str = DEFAULT_URL, *, uds: str | None = None,
                 fd_socket: str | None = None, transport: httpx.BaseTransport | None = None,
                 timeout_s: float = 10.0, token: str | None = None,
                 verify: str | bool = True) -> None:
        if uds is not None and transport is None:
            transport = httpx.HTTPTransport(uds=uds)
            url = "http://poold"
        self.fd_socket = fd_socket
        self._timeout_s = timeout_s
        token = token if token is not None else os.environ.get("POOLD_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        trust = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        self._http = httpx.Client(base_url=url, transport=transport, timeout=timeout_s,
                                  headers=headers, verify=trust)

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
        return Lease(self, info, keepalive=keepalive, token=info.token)

    def grant(self, size: int, *, ttl_s: int | None = None, pool: str | None = None,
              labels: dict[str, str] | None = None, idempotency_key: str | None = None,
              session_id: str | None = None, elastic: bool = False, wait_s: float = 0
              ) -> GrantedLease:
        """`elastic`: a cache the holder gives back when asked (see Session); `wait_s`: how
        long the grant may wait for room when the pool is full (0: NoCapacity at once)."""
        body: dict[str, Any] = {"size": size, "labels": labels or {}}
        for key, value in (("ttl_s", ttl_s), ("pool", pool), ("idempotency_key", idempotency_key),
                           ("session_id", session_id)):
            if value is not None:
                body[key] = value
        if elastic:
            body["elastic"] = True
        if wait_s:
            body["wait_s"] = wait_s
        return GrantedLease.model_validate(self._call("POST", "/v1/leases", json=body,
                                                      timeout=self._timeout_s + wait_s))

    def session(self, *, ttl_s: int = 30, labels: dict[str, str] | None = None,
                keepalive: bool = True, on_reclaim: ReclaimHandler | None = None,
                idle_s: IdleReport | None = None) -> Session:
        """Open a session now: leases granted with `session.lease(...)` share its one
        keepalive; use it as a context manager to close it, releasing them all. `on_reclaim`
        and `idle_s`: for elastic leases (see poold.client.session)."""
        return Session(self, self.open_session(ttl_s=ttl_s, labels=labels), keepalive=keepalive,
                       on_reclaim=on_reclaim, idle_s=idle_s)

    def open_session(self, *, ttl_s: int = 30, labels: dict[str, str] | None = None
                     ) -> ClientSession:
        body = {"ttl_s": ttl_s, "labels": labels or {}}
        return ClientSession.model_validate(self._call("POST", "/v1/sessions", json=body))

    def keepalive_session(self, session_id: str, idle_s: dict[str, float] | None = None
                          ) -> ClientSession:
        body = {"idle_s": idle_s} if idle_s else None
        return ClientSession.model_validate(
            self._call("POST", f"/v1/sessions/{session_id}/keepalive", json=body))

    def session_reclaims(self, session_id: str, wait_s: float = 0) -> list[ReclaimAsk]:
        """The session's leases the daemon asked back; a long poll of up to `wait_s`."""
        found = self._call("GET", f"/v1/sessions/{session_id}/reclaims",
                           params={"wait_s": wait_s}, timeout=self._timeout_s + wait_s)
        return [ReclaimAsk.model_validate(x) for x in found]

    def close_session(self, session_id: str) -> ClientSession:
        return ClientSession.model_validate(self._call("DELETE", f"/v1/sessions/{session_id}"))

    def get_session(self, session_id: str) -> ClientSession:
        return ClientSession.model_validate(self._call("GET", f"/v1/sessions/{session_id}"))

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
        if self._http.is_closed:  # a keepalive thread outliving its client: nothing to renew
            raise errors.ClientError(f"{method} {path}: the client is closed")
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
