"""HTTP on the UNIX socket with the peer's credentials in every request's scope.

ASGI has no place for them, so the connection's protocol reads SO_PEERCRED once when the
connection is made and adds (pid, uid, gid) to each request's scope under api.auth's key, where
the authenticator maps the uid to a principal. Only the UNIX-socket server uses this protocol:
a TCP peer's uid is unknowable. The header limits of poold.daemon.httplimits apply here too.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from api.auth import PEER_SCOPE_KEY
from poold.daemon.fdpass import peer_credentials
from poold.daemon.httplimits import LimitedHttpProtocol


class PeerCredProtocol(LimitedHttpProtocol):
    _peer: tuple[int, int, int] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock: Any = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            self._peer = peer_credentials(sock)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[PEER_SCOPE_KEY] = self._peer  # type: ignore[literal-required]
