"""Where the daemon's per-lease memory objects outlive the daemon: a file descriptor store.

A lease on an emulated or system-ram device is a memfd (poold.daemon.leasemem): memory that lives
only while a process holds it. A restart must keep every lease and its bytes, so each memfd is
also handed to a store that outlives the daemon, and a starting daemon takes them back:

- `SystemdStore`: systemd's file descriptor store (`FDSTORE=1` with `FDNAME=<lease id>` on the
  notify socket, `FDSTOREREMOVE=1` when the lease ends; the unit sets FileDescriptorStoreMax=).
  systemd hands them back at the next start as LISTEN_FDS / LISTEN_FDNAMES, across `systemctl
  restart`, a crash and the watchdog's restart alike.
- `KeeperStore`: outside systemd, a keeper process (poold.keeper) started by the daemon in a
  session of its own, reached over a socket in the state directory.
- `NoStore`: nothing outlives the daemon (tests of other concerns; `fd_store = "none"`).

Names are lease ids. Leaves alone: what the descriptors are (poold.daemon.leasemem).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from poold.config import Settings
from poold.daemon.sdnotify import Notifier, fdstore_offered, listen_fds

log = logging.getLogger(__name__)

KEEPER_SOCKET = "fd-keeper.sock"
KEEPER_START_S = 10.0  # how long a keeper just spawned may take to listen
MAX_MESSAGE = 65536


class FdStore(Protocol):
    kind: str

    def recover(self) -> dict[str, int]:
        """Every descriptor stored before this daemon started, by name; the caller owns them."""

    def put(self, name: str, fd: int) -> None:
        """Keep a duplicate of `fd` under `name` (the caller keeps its own)."""

    def remove(self, name: str) -> None:
        """Forget `name`: its descriptor is closed in the store."""

    def close(self) -> None:
        """This daemon stops: what was stored stays stored."""


def choose_store(settings: Settings, notifier: Notifier) -> FdStore:
    """The store `fd_store` names; auto: systemd's when it says it keeps one, else a keeper."""
    kind = settings.fd_store
    if kind == "auto":
        kind = "systemd" if fdstore_offered() else "keeper"
    if kind == "systemd":
        return SystemdStore(notifier)
    if kind == "keeper":
        return KeeperStore(settings.state_dir, settings.fd_keeper_linger_s)
    return NoStore()


class NoStore:
    kind = "none"

    def recover(self) -> dict[str, int]:
        return {}

    def put(self, name: str, fd: int) -> None:
        pass

    def remove(self, name: str) -> None:
        pass

    def close(self) -> None:
        pass


class SystemdStore:
    """systemd's fd store through the notify socket (needs FileDescriptorStoreMax= in the unit,
    and NotifyAccess= letting this process speak)."""

    kind = "systemd"

    def __init__(self, notifier: Notifier, environ: Mapping[str, str] | None = None) -> None:
        self._notifier = notifier
        self._environ = environ

    def recover(self) -> dict[str, int]:
        return listen_fds(self._environ)

    def put(self, name: str, fd: int) -> None:
        if not self._notifier.notify_fds(["FDSTORE=1", f"FDNAME={name}"], [fd]):
            log.error("fdstore.put_failed store=systemd name=%s", name)

    def remove(self, name: str) -> None:
        self._notifier.notify("FDSTOREREMOVE=1", f"FDNAME={name}")

    def close(self) -> None:
        pass


class KeeperStore:
    """A keeper process (poold.keeper) holding the descriptors, started on first need."""

    kind = "keeper"

    def __init__(self, state_dir: Path, linger_s: float) -> None:
        self.path = state_dir / KEEPER_SOCKET
        self._linger_s = linger_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def recover(self) -> dict[str, int]:
        with self._lock:
            sock = self._connect()
            sock.send(b"GET")
            found: dict[str, int] = {}
            while True:
                message, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 250)
                if message == b"END":
                    return found
                names = message.decode().split()[1:] if message.startswith(b"FDS") else []
                if not message or len(names) != len(fds):
                    for fd in [*fds, *found.values()]:
                        os.close(fd)
                    raise OSError(f"fd keeper at {self.path} answered {message[:40]!r}")
                found.update(zip(names, fds, strict=True))

    def put(self, name: str, fd: int) -> None:
        self._send(f"PUT {name}".encode(), [fd])

    def remove(self, name: str) -> None:
        self._send(f"DEL {name}".encode(), [])

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def _send(self, message: bytes, fds: list[int]) -> None:
        """One try on the open connection, one more on a fresh one (the keeper may have been
        restarted by hand); a store that cannot be reached is logged, never raised: the lease
        still works, only a restart would lose it."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    socket.send_fds(self._connect(), [message], fds)
                    return
                except OSError as exc:
                    self._drop()
                    if attempt == 2:
                        log.error("fdstore.send_failed store=keeper path=%s error=%r",
                                  self.path, exc)

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        for attempt in (1, 2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            try:
                sock.connect(str(self.path))
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if attempt == 2:
                    raise
                self._spawn()
                continue
            sock.settimeout(10.0)
            self._sock = sock
            return sock
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        """A keeper detached from this daemon: it outlives its stops and crashes. The command
        returns once the keeper listens (its detached child serves)."""
        log.info("fdstore.keeper_started path=%s linger_s=%s", self.path, self._linger_s)
        try:
            subprocess.run(  # our own interpreter and module
                [sys.executable, "-m", "poold.keeper", "--socket", str(self.path),
                 "--linger", str(self._linger_s)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                close_fds=True, timeout=KEEPER_START_S, check=True)
        except subprocess.SubprocessError as exc:
            raise OSError(f"fd keeper for {self.path} did not start: {exc}") from exc

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
