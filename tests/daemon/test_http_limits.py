"""HTTP limits of a real `poold serve`, on TCP and on api.sock: a header block past
max_header_bytes is answered 431 and the connection closed before the daemon buffers more (once,
a 400 MB header block on /healthz was answered 200 and grew the daemon by 265 MB); headers that
do not arrive within header_timeout_s get 408; past max_connections, 503; bodies as before
(tests/api/test_limits.py)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from tests.daemon_fixtures import serve_process
from tests.timing import patience, until

MAX_HEADER_BYTES = 8192
HEADER_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 8
FLOOD = 128 * 2**20  # header bytes a client tries to push


Served = tuple[int, Path, psutil.Process]  # TCP port, api.sock, the daemon


@contextmanager
def _serve(tmp_path_factory: pytest.TempPathFactory, header_timeout_s: float) -> Iterator[Served]:
    """`poold serve` with the limits above and `header_timeout_s`."""
    workdir = tmp_path_factory.mktemp("limits")
    run = workdir / "run"
    with serve_process(workdir, lambda port: httpx.get(
            f"http://127.0.0.1:{port}/healthz").status_code == 200, auth="off",
            max_header_bytes=str(MAX_HEADER_BYTES), header_timeout_s=str(header_timeout_s),
            max_connections=str(MAX_CONNECTIONS), runtime_dir=str(run)) as port:
        daemon = next(p for p in psutil.Process().children()
                      if f"127.0.0.1:{port}" in " ".join(p.cmdline()))
        yield port, run / "api.sock", daemon


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with _serve(tmp_path_factory, HEADER_TIMEOUT_S) as found:
        yield found


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon whose idle connections stay open for as long as a loaded machine may take to
    open the next ones (with HEADER_TIMEOUT_S they could get their 408 first)."""
    with _serve(tmp_path_factory, patience(HEADER_TIMEOUT_S)) as found:
        yield found


Connect = Callable[[], socket.socket]


def _tcp(served: Served) -> Connect:
    return lambda: socket.create_connection(("127.0.0.1", served[0]), timeout=10)


def _uds(served: Served) -> Connect:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(served[1]))
        return sock
    return connect


@pytest.fixture(params=["tcp", "api.sock"])
def connect(request: pytest.FixtureRequest, served: Served
            ) -> Connect:
    return _tcp(served) if request.param == "tcp" else _uds(served)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str]]:
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_header_flood_is_cut_off_at_the_limit(connect: Connect,
                                                 served: Served) -> None:
    daemon = served[2]
    before = daemon.memory_info().rss
    pushed = 0
    with connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ")
        try:
            while pushed < FLOOD:
                sock.sendall(b"a" * 65536)
                pushed += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon closed the connection
        status, body = _answer(sock)
    assert status == 431 and body["error"] == "RequestHeadersTooLarge"
    assert pushed < FLOOD  # it stopped reading long before
    assert daemon.memory_info().rss - before < 16 * 2**20
    assert httpx.get(f"http://127.0.0.1:{served[0]}/healthz").status_code == 200


def test_headers_under_the_limit_are_served(connect: Connect) -> None:
    with connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nCookie: " + b"c" * 4096 + b"\r\n\r\n")
        status, body = _answer(sock)
    assert status == 200 and body["status"] == "ok"


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"],
                         ids=["nothing", "half the headers"])
def test_headers_that_do_not_arrive_in_time_get_408(connect: Connect, sent: bytes) -> None:
    started = time.monotonic()  # before connecting: the daemon's timer starts no sooner
    with connect() as sock:
        sock.sendall(sent)
        status, body = _answer(sock)
        assert sock.recv(1) == b""  # closed
    assert status == 408 and body["error"] == "RequestTimeout"
    assert time.monotonic() - started + 0.05 >= HEADER_TIMEOUT_S  # not before the timeout


def test_past_max_connections_requests_get_503_until_some_go(patient: Served) -> None:
    url = f"http://127.0.0.1:{patient[0]}/healthz"
    connect = _tcp(patient)
    idle = [connect() for _ in range(MAX_CONNECTIONS)]
    try:
        assert httpx.get(url).status_code == 503
    finally:
        for sock in idle:
            sock.close()
    until("connections come back", lambda: httpx.get(url).status_code == 200, patience())
