"""The fd keeper: a small process that holds poold's per-lease memory objects across restarts.

Outside systemd there is no service manager to keep file descriptors for the daemon (systemd's
file descriptor store, FDSTORE=1, does that under the unit). Each lease on an emulated or
system-ram device is a memfd: memory that exists only while some process holds it. So `poold
serve` starts this keeper (a process of its own session, that outlives the daemon's restarts and
crashes), hands it a duplicate of every memfd it makes, and asks for them back when it starts.

Protocol, one SOCK_SEQPACKET connection per daemon, each message one datagram:
  PUT <name>  with one descriptor (SCM_RIGHTS): keep it under <name>, replacing an older one
  DEL <name>  close and forget it
  GET         the keeper answers FDS <name> <name> ... (with those descriptors, a batch at a time)
              and then END
Only a peer with the keeper's own uid is served (SO_PEERCRED); the socket lives in the daemon's
state directory (0700), beside `<socket>.lock`, which the keeper holds locked and which names its
pid (to end it, and the leases' memory it holds, by hand: `kill $(cat fd-keeper.sock.lock)`).

The daemon runs `python -m poold.keeper`, which returns as soon as the socket listens; the
keeper itself goes on in a detached child. It exits when it has held nothing and seen no daemon
for `--idle-exit` seconds, and when no daemon has been connected for `--linger` seconds (by then
every lease it holds has expired: no daemon renewed any). Imports nothing from poold: it must
start fast and depend on nothing that a daemon upgrade changes under it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import selectors
import socket
import struct
import sys
import time
from pathlib import Path

BATCH = 200  # descriptors per answer message (the kernel's SCM_MAX_FD is 253)
MAX_MESSAGE = 4096


class Keeper:
    def __init__(self, path: Path, linger_s: float, idle_exit_s: float) -> None:
        self.path = path
        self.linger_s = linger_s
        self.idle_exit_s = idle_exit_s
        self.fds: dict[str, int] = {}
        self.selector = selectors.DefaultSelector()
        self.clients: set[socket.socket] = set()
        self.last_seen = time.monotonic()

    def serve(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)
        while not self._done():
            for key, _events in self.selector.select(timeout=1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    self._accept(listener)
                else:
                    self._serve_one(sock)
            if self.clients:
                self.last_seen = time.monotonic()

    def _done(self) -> bool:
        if self.clients:
            return False
        idle = time.monotonic() - self.last_seen
        return idle > (self.linger_s if self.fds else self.idle_exit_s)

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        _pid, uid, _gid = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.geteuid():
            conn.close()
            return
        conn.setblocking(True)
        conn.settimeout(5.0)
        self.clients.add(conn)
        self.selector.register(conn, selectors.EVENT_READ)

    def _serve_one(self, conn: socket.socket, flags: int = 0) -> bool:
        """Take one message from `conn` and act on it; False when there was none waiting
        (only with MSG_DONTWAIT) or the connection ended."""
        try:
            message, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 1, flags)
        except BlockingIOError:
            return False
        except OSError:
            message, fds = b"", []
        if not message:
            self._drop_client(conn)
            for fd in fds:
                os.close(fd)
            return False
        self._act(conn, message, fds)
        return True

    def _act(self, conn: socket.socket, message: bytes, fds: list[int]) -> None:
        verb, _, name = message.decode(errors="replace").partition(" ")
        if verb == "PUT" and name and len(fds) == 1:
            old = self.fds.pop(name, None)
            if old is not None:
                os.close(old)
            self.fds[name] = fds[0]
            return
        for fd in fds:
            os.close(fd)
        if verb == "DEL":
            old = self.fds.pop(name, None)
            if old is not None:
                os.close(old)
        elif verb == "GET":
            # What other daemons sent before this GET is applied first: a daemon that removed
            # a lease's memory and stopped may have left its DEL unread when its successor asks.
            for other in list(self.clients - {conn}):
                while self._serve_one(other, socket.MSG_DONTWAIT):
                    pass
            self._send_all(conn)

    def _send_all(self, conn: socket.socket) -> None:
        items = list(self.fds.items())
        try:
            for start in range(0, len(items), BATCH):
                batch = items[start:start + BATCH]
                names = " ".join(name for name, _fd in batch)
                socket.send_fds(conn, [f"FDS {names}".encode()], [fd for _name, fd in batch])
            conn.send(b"END")
        except OSError:
            self._drop_client(conn)

    def _drop_client(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        self.clients.discard(conn)
        conn.close()
        self.last_seen = time.monotonic()


def listen(path: Path) -> tuple[socket.socket, int] | None:
    """Bind the keeper's socket, unless a live keeper holds it (its lock file): then None."""
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a keeper that died left it; we hold the lock now
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(8)
    return sock, lock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poold-keeper", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--linger", type=float, default=86_400.0,
                        help="seconds to keep descriptors with no daemon connected")
    parser.add_argument("--idle-exit", type=float, default=30.0,
                        help="seconds to stay up holding nothing with no daemon connected")
    args = parser.parse_args(argv)
    bound = listen(args.socket)
    if bound is None:
        return 0  # another keeper serves this socket
    listener, lock = bound
    # Detach: the parent returns once the socket listens (what the daemon waits for); the child,
    # reparented away from the daemon, serves in a session of its own.
    if os.fork():
        os._exit(0)
    os.setsid()
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)  # who holds it: `kill $(cat ...lock)`
    try:
        Keeper(args.socket, args.linger, args.idle_exit).serve(listener)
    finally:
        with contextlib.suppress(FileNotFoundError):
            args.socket.unlink()
        os.close(lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
