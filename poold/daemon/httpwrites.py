"""One socket write per response instead of one per ASGI message.

uvicorn writes a response's head as soon as the app sends `http.response.start` and its body at
`http.response.body`: two send() calls, so two TCP segments on loopback with TCP_NODELAY (asyncio
sets it), each a pass through the kernel's TCP stack on both sides and, often, two wake-ups of the
client. For the lease hot path that was the costliest line of the daemon's own code under load.

`CoalescingTransport` sits between uvicorn's protocol and the socket's transport: what is written
within one turn of the event loop goes out as one write at the end of that turn (a call_soon),
so a head and the body sent right after it leave together. Nothing waits longer than the turn:
a streamed response still flows chunk by chunk as its producer yields, and writes that add up to
FLUSH_AT bytes go at once, so a producer that never yields buffers no more than that here (the
real transport's own limits and uvicorn's flow control then hold as before). Closing sends what
is held first; aborting drops it, as aborting drops the transport's own buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

FLUSH_AT = 64 * 1024


class CoalescingTransport(asyncio.Transport):
    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0

    # --- writing ----------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(bytes(data))
        self._held_bytes += len(data)
        if self._held_bytes >= FLUSH_AT:
            self._flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        if not self._held:
            return  # sent already (a full buffer, a close): the turn's callback finds nothing
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_bytes = [], 0
        if not self._transport.is_closing():  # the peer went: nobody to send it to
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._held_bytes

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    # --- ending -----------------------------------------------------------------------------

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held, self._held_bytes = [], 0
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    # --- the rest, as the transport has it --------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
