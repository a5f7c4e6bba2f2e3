"""Hands a lease's memory to its holder as an open file descriptor (SCM_RIGHTS) on fd.sock.

Clients then need no permission on /dev/daxX.Y: they connect to the daemon's UNIX socket, send
`{"lease_id": ..., "token": ...}` and receive the fd with a JSON answer naming what to map. The
daemon identifies the caller by SO_PEERCRED (logged with every hand-out) and gives the fd only
for an active lease of this host whose token matches, i.e. to whoever was handed the lease.

What the fd reaches (invariant 8), as poold.daemon.backing opens it:
- emulated and system-ram leases: the lease's own sealed memfd (poold.daemon.leasemem), nothing
  else; `map_offset` 0;
- a region carved per lease: the dax device made for the lease alone; `map_offset` 0;
- other devdax: the device's chardev at the lease's offset.

Connections are served concurrently, each in a thread of its own, at most MAX_CONNECTIONS at
once and each for at most REQUEST_TIMEOUT_S: a client that connects and says nothing delays no
one else, and is closed without a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Any

from poold import errors
from poold.daemon.backing import LeaseBacking
from poold.ledger import reads
from poold.ledger.ledger import Ledger
from poold.osthread import name_this_thread
from poold.security import token_matches
from poold.types import DeviceKind, LeaseState, is_lease_id

log = logging.getLogger(__name__)

MAX_REQUEST = 4096
REQUEST_TIMEOUT_S = 5.0
# Connections served at once; one more waits in the listen backlog until a slot is free. An idle
# client holds a slot for REQUEST_TIMEOUT_S at most.
MAX_CONNECTIONS = 64


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process on the other end, as the kernel saw it connect."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class FdServer:
    def __init__(self, path: Path, ledger: Ledger, key: bytes,
                 backing: LeaseBacking | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.path = path
        self._ledger = ledger
        self._key = key
        self._backing = backing
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(max_connections)

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        # Anyone local may ask; only a lease's token gets its fd.
        os.chmod(self.path, 0o666)
        sock.listen(64)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="fdpass", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
        if self._thread is not None:
            self._thread.join(5)
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        name_this_thread()
        while self._sock is not None:
            self._slots.acquire()
            try:
                conn, _addr = self._sock.accept()
            except OSError:
                self._slots.release()
                return  # closed by stop()
            threading.Thread(target=self._connection, args=(conn,), name="fdpass-conn",
                             daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._handle(conn)
        except (TimeoutError, ConnectionError) as exc:  # a client that stalled or went away
            log.info("fdpass.dropped error=%s", type(exc).__name__)
        except Exception:
            log.exception("fdpass.failed")
        finally:
            self._slots.release()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT_S)
        pid, uid, gid = peer_credentials(conn)
        peer = {"pid": pid, "uid": uid, "gid": gid}
        try:
            lease_id, token = _parse(_read_request(conn))
            answer, fd = self._open(lease_id, token)
        except errors.PooldError as exc:
            log.info("fdpass.refused peer=%s error=%s", peer, type(exc).__name__)
            conn.sendall(_line({"error": type(exc).__name__, "detail": exc.detail}))
            return
        try:
            socket.send_fds(conn, [_line({**answer, "peer": peer})], [fd])
            log.info("fdpass.sent lease=%s peer=%s", lease_id, peer)
        finally:
            os.close(fd)

    def _open(self, lease_id: str, token: str) -> tuple[dict[str, Any], int]:
        # The token first: a caller without it costs no ledger read.
        if not token_matches(self._key, lease_id, token):
            raise errors.NotLeaseHolder(f"wrong token for lease {lease_id}")
        lease, kind, node = self._ledger.read(lambda s, now: reads.lease_memory(s, lease_id, now))
        if lease.host != self._ledger.host_id:
            raise errors.InvalidRequest(f"lease {lease_id} is held on host {lease.host}")
        if lease.state is not LeaseState.ACTIVE:
            raise errors.LeaseNotActive(f"lease {lease_id} is {lease.state}")
        if self._backing is None:
            raise errors.InvalidRequest("this daemon hands out no lease memory")
        fd, map_offset = self._backing.open(lease, node)
        answer = {"lease_id": lease.id, "chardev": lease.chardev, "offset": lease.offset,
                  "length": lease.length, "align": lease.align, "generation": lease.generation,
                  "kind": kind, "map_offset": map_offset}
        if kind == DeviceKind.SYSTEM_RAM:
            answer["numa_node"] = node
        return answer, fd


def _read_request(conn: socket.socket) -> bytes:
    """One JSON line (the SDK sends it in one write; a slow writer is read until its newline,
    MAX_REQUEST or the connection's timeout)."""
    raw = b""
    while b"\n" not in raw and len(raw) < MAX_REQUEST:
        chunk = conn.recv(MAX_REQUEST - len(raw))
        if not chunk:
            break
        raw += chunk
    return raw


def _parse(raw: bytes) -> tuple[str, str]:
    try:
        request = json.loads(raw.decode())
        lease_id, token = request["lease_id"], request["token"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise errors.InvalidRequest("send one JSON object {\"lease_id\", \"token\"}") from exc
    if not isinstance(lease_id, str) or not isinstance(token, str):
        raise errors.InvalidRequest("lease_id and token must be strings")
    if not is_lease_id(lease_id):
        raise errors.UnknownLease(f"no lease {lease_id[:64]!r}")
    return lease_id, token


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"
