"""Asks the daemon for a leased device's file descriptor over its UNIX socket (SCM_RIGHTS).

The SDK's way to map a lease without permission on the device: the daemon checks the lease's
token and the caller's credentials (SO_PEERCRED) and passes an open descriptor back.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from poold import errors
from poold.client.wire import error_from_wire

TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PassedFd:
    fd: int
    offset: int
    length: int
    align: int
    chardev: str
    peer: dict[str, int]
    # Where the lease's bytes start in the fd: its offset in a chardev, 0 in the memfd of a
    # lease on system-ram (NUMA node memory); `kind` is the device's.
    map_offset: int = 0
    kind: str = "devdax"


def receive_fd(socket_path: str, lease_id: str, token: str) -> PassedFd:
    """The caller owns the returned fd and must close it."""
    request = json.dumps({"lease_id": lease_id, "token": token}).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(socket_path)
            sock.sendall(request)
            message, fds, _flags, _addr = socket.recv_fds(sock, 65536, 1)
    except OSError as exc:
        raise errors.TransportError(f"{socket_path}: {exc.strerror or exc}") from exc
    try:
        answer: dict[str, Any] = json.loads(message.decode())
    except ValueError as exc:
        for fd in fds:
            os.close(fd)
        raise errors.TransportError(f"{socket_path}: answer is not JSON") from exc
    if "error" in answer or not fds:
        for fd in fds:
            os.close(fd)
        raise error_from_wire(0, answer if "error" in answer else
                              {"error": "TransportError", "detail": "no descriptor sent"})
    return PassedFd(fd=fds[0], offset=int(answer["offset"]), length=int(answer["length"]),
                    align=int(answer["align"]), chardev=str(answer["chardev"]),
                    peer=dict(answer.get("peer", {})),
                    map_offset=int(answer.get("map_offset", answer["offset"])),
                    kind=str(answer.get("kind", "devdax")))
