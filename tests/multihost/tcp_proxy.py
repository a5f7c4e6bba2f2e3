"""A fault-injecting TCP proxy on loopback (asyncio, in a thread of its own), put between a
poold and PostgreSQL to cut that host off the ledger, or to drop every connection as a server
restart does.

Modes: `pass` forwards; `refuse` closes every connection, open ones at once and new ones as
they arrive (the host is partitioned away, or the server is down); back to `pass` heals it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.mode = "pass"
        self.accepted = 0
        self.refused = 0  # connections closed at once, while refusing
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tcp-proxy")
        self._server: asyncio.Server | None = None

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url_for(self, url: str) -> str:
        """`url` (a PostgreSQL URL to the target) through this proxy."""
        host, port = self.target
        return url.replace(f"{host}:{port}", f"127.0.0.1:{self.port}")

    def refuse(self) -> None:
        self._call(self._set_mode, "refuse")

    def heal(self) -> None:
        self._call(self._set_mode, "pass")

    def _call(self, fn: object, *args: object) -> None:
        future = asyncio.run_coroutine_threadsafe(fn(*args), self._loop)  # type: ignore[operator]
        future.result(10)

    async def _set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == "refuse":
            for writer in list(self._writers):
                writer.transport.abort()  # RST: the peer learns at once
            self._writers.clear()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode != "pass":
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(OSError, RuntimeError):
                writer.transport.abort()
