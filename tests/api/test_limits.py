"""Bad input is refused early and clearly: oversized bodies before they are read, absurd sizes
and malformed JSON with the one error shape, on a real server (uvicorn)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poold.config import MAX_BODY_BYTES
from tests.daemon_fixtures import serving_daemon
from tests.timing import patience


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with serving_daemon(tmp_path) as (_daemon, base_url):
        yield base_url


def test_a_declared_oversized_body_is_refused_before_it_is_sent(url: str) -> None:
    """Content-Length over the limit: 413 at once, without waiting for a byte of the body. The
    client never sends one, and this server has no timeout that would end a wait for it, so
    any answer at all is one given without waiting (a server that waited would leave the
    socket's timeout to fail the test)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=patience()) as conn:
        conn.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000000\r\n\r\n")
        reply = conn.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413"), reply
    assert json.loads(reply.partition("\r\n\r\n")[2])["error"] == "PayloadTooLarge"


def test_a_streamed_oversized_body_is_cut_off(url: str) -> None:
    chunk = b" " * 16384

    def body() -> Iterator[bytes]:  # chunked: no Content-Length to judge by
        for _ in range(4 * MAX_BODY_BYTES // len(chunk)):
            yield chunk

    answer = httpx.post(f"{url}/v1/leases", content=body(),
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and answer.json()["error"] == "PayloadTooLarge"


@pytest.mark.parametrize(("body", "error"), [
    ({"size": 2**63}, "ValidationError"),
    ({"size": 10**30}, "ValidationError"),
    ({"size": -1}, "ValidationError"),
    ({"size": 1.5}, "ValidationError"),
    ({"size": "1GiB"}, "ValidationError"),
    ({"size": 2**61}, "LeaseTooLarge"),
    ({"size": 2**20, "ttl_s": 10**12}, "ValidationError"),
    ({"size": 2**20, "labels": {str(i): "x" for i in range(65)}}, "ValidationError"),
])
def test_absurd_requests_are_clear_errors(url: str, body: dict[str, object], error: str) -> None:
    answer = httpx.post(f"{url}/v1/leases", json=body)
    assert answer.status_code == 422 and answer.json()["error"] == error, answer.text


def test_malformed_bodies_get_the_error_shape(url: str) -> None:
    json_type = {"Content-Type": "application/json"}
    truncated = httpx.post(f"{url}/v1/leases", content=b'{"size": 1', headers=json_type)
    assert truncated.status_code == 422 and truncated.json()["error"] == "ValidationError"
    binary = httpx.post(f"{url}/v1/leases", content=b"S\xff", headers=json_type)  # not UTF-8
    assert binary.status_code == 400 and binary.json()["error"] == "MalformedRequest"
    assert httpx.get(f"{url}/v1/leases").status_code == 200  # and the daemon carries on
