"""One socket write per response (poold.daemon.httpwrites): a real `poold serve` answers each
request of the lease hot path and the rest in one TCP data segment, head and body together; the
transport under it, on real loopback sockets, sends what one loop turn wrote at the end of that
turn, a full buffer at once, what it holds before closing, and nothing after an abort.

Segments are counted by the kernel: tcp_info's tcpi_data_segs_in on the client's socket."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest

from poold.daemon.httpwrites import FLUSH_AT, CoalescingTransport
from tests.daemon_fixtures import serve_process

_DATA_SEGS_IN = 152  # offset of tcpi_data_segs_in in struct tcp_info (linux/tcp.h, since 4.6)


def data_segments_in(sock: socket.socket) -> int:
    return int(struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO,
                                                       256), _DATA_SEGS_IN)[0])


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of one response with a content-length."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with serve_process(tmp_path_factory.mktemp("writes"), lambda p: httpx.get(
            f"http://127.0.0.1:{p}/healthz").status_code == 200, auth="off") as found:
        yield found


def test_each_answer_of_the_daemon_is_one_segment(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        def ask(method: str, path: str, body: bytes = b"") -> tuple[int, bytes, int]:
            before = data_segments_in(sock)
            sock.sendall(f"{method} {path} HTTP/1.1\r\nhost: poold\r\n"
                         f"content-type: application/json\r\n"
                         f"content-length: {len(body)}\r\n\r\n".encode() + body)
            head, answer = read_response(sock)
            return int(head.split(b" ", 2)[1]), answer, data_segments_in(sock) - before

        status, body, segments = ask("POST", "/v1/leases", b'{"size": 1048576, "ttl_s": 60}')
        assert (status, segments) == (201, 1), body
        lease = json.loads(body)["id"]
        assert ask("POST", f"/v1/leases/{lease}/keepalive")[::2] == (200, 1)
        assert ask("DELETE", f"/v1/leases/{lease}")[::2] == (200, 1)
        assert ask("GET", "/healthz")[::2] == (200, 1)  # through FastAPI's stack, too
        assert ask("DELETE", f"/v1/leases/{'0' * 32}")[::2] == (404, 1)  # a refusal as well


# --- the transport, on real loopback sockets ---------------------------------------------------

@asynccontextmanager
async def wrapped() -> AsyncIterator[tuple[CoalescingTransport, socket.socket]]:
    """A coalescing transport over the server end of a loopback TCP connection, and the
    client's socket (non-blocking: what it can read is what the server has sent)."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    client.setblocking(False)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, accepted)
    try:
        yield CoalescingTransport(transport, loop), client  # type: ignore[arg-type]
    finally:
        transport.abort()
        client.close()


def readable(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 20)
    except BlockingIOError:
        return b""


async def settled(_client: socket.socket) -> None:
    """Let the loop finish the turn (and loopback deliver what it sent)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0.01)


def test_what_one_turn_writes_leaves_as_one_write_at_its_end() -> None:
    async def scenario() -> None:
        async with wrapped() as (transport, client):
            transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
            transport.writelines([b"o", memoryview(b"k")])
            assert readable(client) == b""  # held until the turn ends
            before = data_segments_in(client)
            await settled(client)
            assert readable(client) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            assert data_segments_in(client) - before == 1
            transport.write(b"next turn")  # nothing waits longer than its own turn
            await settled(client)
            assert readable(client) == b"next turn"
    asyncio.run(scenario())


def test_a_full_buffer_goes_at_once() -> None:
    async def scenario() -> None:
        async with wrapped() as (transport, client):
            transport.write(b"x" * (FLUSH_AT - 1))
            assert readable(client) == b""
            transport.write(b"y")  # FLUSH_AT held: sent without waiting for the turn's end
            got = b""
            for _ in range(100):
                got += readable(client)
                if len(got) == FLUSH_AT:
                    break
                await asyncio.to_thread(lambda: None)  # the kernel's delivery, not a flush
            assert got == b"x" * (FLUSH_AT - 1) + b"y"
            assert transport.get_write_buffer_size() == 0
    asyncio.run(scenario())


def test_closing_sends_what_is_held_and_aborting_drops_it() -> None:
    async def scenario() -> None:
        async with wrapped() as (transport, client):
            transport.write(b"last words")
            assert transport.get_write_buffer_size() == len(b"last words")
            transport.close()
            await settled(client)
            assert readable(client) == b"last words"
            assert client.recv(100) == b""  # and then the end of the stream
        async with wrapped() as (transport, client):
            transport.write(b"never sent")
            transport.abort()
            await settled(client)
            assert client.recv(100) == b""  # the end of the stream, and nothing before it
    asyncio.run(scenario())
