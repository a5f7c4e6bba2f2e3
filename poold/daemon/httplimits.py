"""HTTP limits uvicorn does not have: the request header block's size and the time to send it.

uvicorn's httptools protocol buffers a request's headers until they are complete, however large
and however slowly they come (the parser keeps partial header values itself), before any auth
can look at them: one client could grow the daemon by hundreds of megabytes, or hold
connections open forever with a trickle. This protocol, on TCP and on api.sock, counts the bytes
of a request until its headers are complete and answers `431 RequestHeadersTooLarge` once they
pass `max_header_bytes`, and `408 RequestTimeout` when they are not complete `header_timeout_s`
after the request's first byte (or the connection's opening). Both close the connection at
once, so what a client can make the daemon hold is bounded by the limit plus one read.

How many connections are served at once is uvicorn's `limit_concurrency` (503 beyond it); the
body's size is api.limits' middleware.
"""

from __future__ import annotations

import asyncio
import json
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from poold.config import HEADER_TIMEOUT_S, MAX_HEADER_BYTES
from poold.daemon.httpwrites import CoalescingTransport

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class LimitedHttpProtocol(HttpToolsProtocol):
    # Set per server by `limited` (a subclass per configuration: uvicorn makes instances).
    max_header_bytes: ClassVar[int] = MAX_HEADER_BYTES
    header_timeout_s: ClassVar[float] = HEADER_TIMEOUT_S

    _awaiting_headers = True
    _header_bytes = 0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # A response's head and body leave in one write (poold.daemon.httpwrites).
        super().connection_made(CoalescingTransport(transport, self.loop))
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        awaiting = self._awaiting_headers
        super().data_received(data)
        if awaiting and self._awaiting_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse(431, "RequestHeadersTooLarge",
                             f"the request's headers pass {self.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_headers = True
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._header_bytes = 0
        self._disarm()
        super().on_headers_complete()

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self._refuse(408, "RequestTimeout", f"the request's headers did not arrive within "
                                                f"{self.header_timeout_s} s")

    def _refuse(self, status: int, error: str, detail: str) -> None:
        """Answer in the API's error shape and close: nothing more is read from this client."""
        self._disarm()
        body = json.dumps({"error": error, "detail": detail}).encode()
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                             % (status, _REASONS[status], len(body), body))
        self.transport.close()


def limited(base: type[LimitedHttpProtocol], max_header_bytes: int,
            header_timeout_s: float) -> type[LimitedHttpProtocol]:
    """`base` with these limits, as the protocol class a uvicorn server is given."""
    return type(base.__name__, (base,), {"max_header_bytes": max_header_bytes,
                                         "header_timeout_s": header_timeout_s})
