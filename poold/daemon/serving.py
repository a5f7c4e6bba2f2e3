"""Serving the API: HTTP(S) on the TCP address, plain HTTP with peer credentials on
<sockets_dir>/api.sock, both with the header limits (poold.daemon.httplimits), under one lifespan,
telling systemd when both listen and when the server begins to stop."""

from __future__ import annotations

import os
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

from poold.config import Settings
from poold.daemon.httplimits import LimitedHttpProtocol, limited
from poold.daemon.peercred import PeerCredProtocol
from poold.daemon.sdnotify import Notifier


def serve(app: FastAPI, s: Settings, notifier: Notifier) -> None:
    """READY=1 goes to systemd once both sockets listen; STOPPING=1 as soon as a signal asks to
    stop."""
    # log_config=None: uvicorn's records go through the handler `poold serve` configured
    # (text or JSON) instead of uvicorn's own. proxy_headers=False: nothing in poold reads a
    # client's address or scheme, and uvicorn's default would let any local process rewrite
    # both with X-Forwarded-* headers, through one more layer on every request.
    tls = s.tls_certfile is not None
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            log_config=None, proxy_headers=False,
                            http=limited(LimitedHttpProtocol, s.max_header_bytes,
                                         s.header_timeout_s),
                            limit_concurrency=s.max_connections,
                            ssl_certfile=str(s.tls_certfile) if tls else None,
                            ssl_keyfile=str(s.tls_keyfile) if tls else None)
    tcp = socket.create_server((s.listen_host, s.listen_port), reuse_port=False)
    uds_path = s.sockets_dir / "api.sock"
    uds_path.parent.mkdir(parents=True, exist_ok=True)
    uds_path.unlink(missing_ok=True)
    uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    uds.bind(str(uds_path))
    os.chmod(uds_path, 0o666)  # access is decided per request, not by file mode
    local = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                           log_config=None, proxy_headers=False,
                           limit_concurrency=s.max_connections,
                           http=limited(PeerCredProtocol, s.max_header_bytes,
                                        s.header_timeout_s))
    scheme = "https" if tls else "http"
    status = f"serving {scheme}://{s.listen} and {uds_path}"
    try:
        _SystemdServer(config, notifier, status, local, uds).run(sockets=[tcp])
    finally:
        uds_path.unlink(missing_ok=True)
        notifier.close()


class _SystemdServer(uvicorn.Server):
    """uvicorn's server on TCP, with a second one on the UNIX socket (its own protocol, no TLS,
    same app, no second lifespan), telling systemd when both listen and when it begins to
    stop."""

    def __init__(self, config: uvicorn.Config, notifier: Notifier, status: str,
                 local: uvicorn.Config, uds: socket.socket) -> None:
        super().__init__(config)
        self._notifier = notifier
        self._status = status
        self._local = uvicorn.Server(local)
        self._uds = uds

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        self._local.config.load()
        self._local.lifespan = self._local.config.lifespan_class(self._local.config)
        await self._local.startup(sockets=[self._uds])
        if self._local.started:  # the lifespan ran (tasks up) and both sockets accept
            self._notifier.ready(self._status)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._local.started:
            await self._local.shutdown(sockets=[self._uds])
        await super().shutdown(sockets=sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self._notifier.stopping()
        super().handle_exit(sig, frame)
