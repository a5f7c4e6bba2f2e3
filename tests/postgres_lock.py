"""One PostgreSQL server, several test runs on one machine (a CI run, someone's full suite, a loop
of the timing-sensitive tests): the test that restarts the server (tests/multihost/
test_pg_restart.py) must not do so under another run's tests, whose connections it would cut
(and a run whose first look at the server fell in a restart would skip every PostgreSQL test).

Every test on the server holds a shared lock on one file (per server port) while it runs
(tests/conftest.py's pg_url); the restarting test holds it exclusively. flock alone would let
an unbroken stream of shared holders from several runs starve the restart, so a second file is a
gate: a test holds the gate (shared) only while it takes its own lock, and the restart takes the
gate exclusively first, so no new test starts while it waits for the running ones to end.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ServerLock:
    def __init__(self, port: int) -> None:
        base = Path(tempfile.gettempdir()) / f"poold-test-postgres-{port}"
        self._main_path, self._gate_path = base.with_suffix(".lock"), base.with_suffix(".gate")
        self._main: int | None = None  # this process's lock (tests in it run one at a time)

    @contextmanager
    def shared(self) -> Iterator[None]:
        """While a test uses the server: nobody restarts it."""
        with self._gate(fcntl.LOCK_SH):
            fcntl.flock(self._fd(), fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._fd(), fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Within `shared`: the server is this test's alone (to restart it) until the block
        ends; waits for other runs' tests on it to end, and keeps new ones from starting."""
        fcntl.flock(self._fd(), fcntl.LOCK_UN)  # our own share, or we would wait for ourselves
        try:
            with self._gate(fcntl.LOCK_EX):
                fcntl.flock(self._fd(), fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(self._fd(), fcntl.LOCK_SH)

    # Opened read-only (flock needs no more), so a run as another user can take the lock too.
    def _fd(self) -> int:
        if self._main is None:
            self._main = os.open(self._main_path, os.O_RDONLY | os.O_CREAT, 0o644)
        return self._main

    @contextmanager
    def _gate(self, mode: int) -> Iterator[None]:
        gate = os.open(self._gate_path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(gate, mode)
            yield
        finally:
            os.close(gate)  # and with it the gate
