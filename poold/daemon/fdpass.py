"""Hands the open file descriptor of a leased device to a local client (SCM_RIGHTS).

Clients then need no permission on /dev/daxX.Y: they connect to the daemon's UNIX socket, send
`{"lease_id": ..., "token": ...}` and receive the fd with a JSON answer naming the extent to map.
The daemon identifies the caller by SO_PEERCRED (logged with every hand-out) and gives the fd
only for an active lease of this host whose token matches, i.e. to whoever was handed the lease.
The fd covers the whole device: what keeps a holder inside its extent is the same as for a
process with device permission (its own mapping code, checked by the SDK); isolated pools
(poold.daemon.isolated) give each lease a device of its own, which removes even that.

A lease on a system-ram device has no chardev to open: its memory is a memfd bound to the
device's NUMA node (poold.daemon.nodemem), the same one for every request, covering nothing but
the lease. The answer says where in the fd the lease's bytes start (`map_offset`): the lease's
offset for a chardev, 0 for a memfd.
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
from poold.daemon.nodemem import NodeMemory
from poold.ledger import reads
from poold.ledger.ledger import Ledger
from poold.security import token_matches
from poold.types import DeviceKind, LeaseState

log = logging.getLogger(__name__)

MAX_REQUEST = 4096
REQUEST_TIMEOUT_S = 5.0


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process on the other end, as the kernel saw it connect."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class FdServer:
    def __init__(self, path: Path, ledger: Ledger, key: bytes,
                 node_memory: NodeMemory | None = None) -> None:
        self.path = path
        self._ledger = ledger
        self._key = key
        self._node_memory = node_memory
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

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
        while self._sock is not None:
            try:
                conn, _addr = self._sock.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                try:
                    self._handle(conn)
                except Exception:
                    log.exception("fdpass.failed")

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT_S)
        pid, uid, gid = peer_credentials(conn)
        peer = {"pid": pid, "uid": uid, "gid": gid}
        try:
            lease_id, token = _parse(conn.recv(MAX_REQUEST))
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
        lease, kind, node = self._ledger.read(lambda s, now: reads.lease_memory(s, lease_id, now))
        if not token_matches(self._key, lease_id, token):
            raise errors.NotLeaseHolder(f"wrong token for lease {lease_id}")
        if lease.host != self._ledger.host_id:
            raise errors.InvalidRequest(f"lease {lease_id} is held on host {lease.host}")
        if lease.state is not LeaseState.ACTIVE:
            raise errors.LeaseNotActive(f"lease {lease_id} is {lease.state}")
        answer = {"lease_id": lease.id, "chardev": lease.chardev, "offset": lease.offset,
                  "length": lease.length, "align": lease.align, "generation": lease.generation,
                  "kind": kind, "map_offset": lease.offset}
        if kind == DeviceKind.SYSTEM_RAM:
            if self._node_memory is None:
                raise errors.InvalidRequest(f"lease {lease_id} is on system-ram; this daemon "
                                            "hands out no node memory")
            fd = self._node_memory.open(lease.id, node, lease.length)
            return {**answer, "map_offset": 0, "numa_node": node}, fd
        try:
            fd = os.open(lease.chardev, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise errors.DriverError(f"{lease.chardev}: {exc.strerror}") from exc
        return answer, fd


def _parse(raw: bytes) -> tuple[str, str]:
    try:
        request = json.loads(raw.decode())
        lease_id, token = request["lease_id"], request["token"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise errors.InvalidRequest("send one JSON object {\"lease_id\", \"token\"}") from exc
    if not isinstance(lease_id, str) or not isinstance(token, str) or len(lease_id) > 64:
        raise errors.InvalidRequest("lease_id and token must be strings")
    return lease_id, token


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"
