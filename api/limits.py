"""Refuse oversized request bodies before reading them.

Every request poold understands fits in a few KiB; a body larger than the limit is answered 413
with the usual error shape, on its Content-Length alone when it sends one, else as soon as the
streamed bytes pass the limit, so a client cannot make the daemon buffer megabytes.
"""

from __future__ import annotations

import contextlib
import json

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poold.errors import PayloadTooLarge


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"the body of {declared} bytes is over the limit of "
                                     f"{self.max_bytes} bytes")
            return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            # Past the limit: answer 413 now and tell the app the client went away, so it stops
            # reading; whatever the app still tries to send is dropped.
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not refused:
                    refused = True
                    if not started:
                        await self._refuse(send, f"the body is over the limit of "
                                                 f"{self.max_bytes} bytes")
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(ClientDisconnect):
            await self.app(scope, counted, tracked)

    @staticmethod
    async def _refuse(send: Send, detail: str) -> None:
        body = json.dumps({"error": PayloadTooLarge.__name__, "detail": detail}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
