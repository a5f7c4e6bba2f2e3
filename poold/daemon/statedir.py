"""The daemon's state directory: one daemon at a time, and nobody else reads it.

It holds the SQLite ledger, the lease-token key, the admin credential and the fd keeper's socket
(and, through the keeper, the memory of this daemon's emulated leases). Two daemons on one state
directory would each believe they own its leases' memory and its host's space; so a starting
daemon takes an exclusive lock on `poold.lock` there (flock: the kernel drops it when the daemon
dies, however it dies) and refuses to start while another holds it, naming that one's pid.

Whatever the umask: the directory is 0700 and every file the daemon keeps there 0600. The ledger's
SQLite files hold token digests, leases, labels and idempotency keys: the database file is made
0600 before SQLite first opens it, and SQLite gives its -wal and -shm files the database file's
mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from poold.errors import PooldError

LOCK_FILE = "poold.lock"
LEDGER_COMPANIONS = ("-wal", "-shm", "-journal")


class StateDirBusy(PooldError):
    """Another daemon serves from this state directory."""


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def claim(self) -> None:
        """Make the directory private and take its lock; StateDirBusy when another daemon has
        it."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.path.stat().st_uid == os.geteuid():
            self.path.chmod(0o700)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirBusy(f"another poold (pid {holder}) serves from {self.path}: stop it "
                               "first, or give this one a state_dir of its own") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def private_ledger(self, ledger: Path) -> None:
        """The SQLite ledger file exists, 0600, before SQLite opens it (its companions follow
        its mode); files an older version left more open are closed up."""
        os.close(os.open(ledger, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for path in (ledger, *(ledger.with_name(ledger.name + s) for s in LEDGER_COMPANIONS)):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_uid == os.geteuid():
                    path.chmod(0o600)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
