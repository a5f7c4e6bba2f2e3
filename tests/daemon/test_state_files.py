"""What the daemon keeps on disk is its own: whatever the umask, the state directory is 0700 and
every file in it 0600 (the SQLite ledger and its -wal and -shm, the lease-token key, the admin
credential, the lock, the fd keeper's socket), and another local user can read none of it.
Once, outside systemd, the ledger was 0644 in a 0755 directory: any local user could read every
token digest, lease, label and idempotency key."""

from __future__ import annotations

import multiprocessing
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from poold.client import PooldClient
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon, stop_keeper
from tests.preconditions import need_root

NOBODY = 65534


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(state: Path) -> dict[str, int]:
    """Mode of every file in `state`; not of the API's sockets, there when runtime_dir is
    state_dir, whose access is decided per request (their directory keeps others out)."""
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in state.iterdir()
            if p.name not in ("api.sock", "fd.sock")}


def _read_as_nobody(paths: list[str], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    readable = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.read(1)
            readable.append(path)
        except OSError:
            pass
    out.put(readable)


def test_state_is_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    state = tmp_path / "state"
    with serving_daemon(state, auth="token", fd_store="keeper",
                        runtime_dir=tmp_path / "run") as (_daemon, url):
        token = (state / "admin.token").read_text().strip()
        with PooldClient(url, token=token) as client:
            client.grant(2 * MiB)  # the ledger's WAL is written, the keeper holds a memfd
        found = modes(state)
        readable = _readable_by_another_user(
            [state / name for name in found if name != "poold.lock"])
    stop_keeper(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    expected = {"ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm", "lease-token.key",
                "admin.token", "poold.lock", "fd-keeper.sock", "fd-keeper.sock.lock"}
    assert expected <= set(found), found
    assert {name: mode for name, mode in found.items() if mode != 0o600} == {}
    need_root("read the files as another local user")
    assert readable == []


def _readable_by_another_user(files: list[Path]) -> list[str] | None:
    """Which of `files` `nobody` can read (None where this test cannot become nobody)."""
    if os.geteuid() != 0:
        return None
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    child = ctx.Process(target=_read_as_nobody, args=([str(p) for p in files], out))
    child.start()
    readable: list[str] = out.get(timeout=30)
    child.join(30)
    return readable


def test_an_older_more_open_state_is_closed_up(tmp_path: Path, open_umask: None) -> None:
    state = tmp_path / "state"
    with serving_daemon(state):
        pass
    state.chmod(0o755)
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):
        path = state / name
        if path.exists():
            path.chmod(0o644)
    with serving_daemon(state):
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for name, mode in modes(state).items():
            assert mode == 0o600, name
