"""Crash safety: SIGKILL the daemon during grant/release churn, restart it, lose nothing.

Proves the requirement "a test kills the daemon with SIGKILL during a grant/release churn several
times, restarts it, and finds `fsck` clean and every acknowledged operation present", on SQLite
(the default ledger in --state-dir) and on PostgreSQL (--database-url, a private schema).

Each round: start `poold serve` on the ledger, let four client threads grant and release leases,
SIGKILL the daemon at a random moment, then check the ledger the crash left behind
(`poold fsck`), restart the daemon and check again through the API: every grant whose response
reached a client is there with the same extent and generation, every acknowledged release is
released, and no two active leases overlap. The ledger accumulates over three rounds.

The kill moments and the clients' choices come from one seed, printed with every failure;
POOLD_TEST_SEED=<seed> makes a run draw the same ones again.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold import errors
from poold.client.http import PooldClient
from poold.types import MiB
from tests.daemon_fixtures import free_port, stop_keeper
from tests.timing import PROBE_S, SEED_VARIABLE, START_S, patience, run_seed, until

pytestmark = pytest.mark.slow

ROUNDS = 3
THREADS = 4
EMULATE = "256MiB"
HOST_ID = "test-host"
CHURN_LIMIT_S = 60.0      # a thread stops by then even if the daemon never died
KILL_WITHIN_S = 1.2       # the kill comes this long at most after the round's first grant
CHURN_MAX_OPS = 2_000     # ... or after this many operations
RELEASE_PROBABILITY = 0.4


# --- the daemon as a process -------------------------------------------------------------------

@dataclass
class LedgerAt:
    """Where the ledger lives, as `poold` command-line options."""

    state_dir: Path
    database_url: str | None = None

    def admin_token(self) -> str:
        """The credential `poold serve` wrote on first start."""
        return (self.state_dir / "admin.token").read_text().strip()

    def options(self) -> list[str]:
        opts = ["--state-dir", str(self.state_dir)]
        if self.database_url:
            opts += ["--database-url", self.database_url]
        return opts


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path
    token: str = ""

    def client(self, **options: Any) -> PooldClient:
        return PooldClient(self.url, token=self.token, **options)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def _env(tmp_path: Path) -> dict[str, str]:
    # The keeper holds the leases' memory across the kills, as it does for any daemon outside
    # systemd.
    return {**os.environ, "POOLD_FD_STORE": "keeper"}


def start_daemon(ledger: LedgerAt, tmp_path: Path, name: str) -> Daemon:
    """`poold serve` on a free port, returned once GET /healthz answers."""
    port = free_port()
    stderr_path = tmp_path / f"{name}.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "poold.cli.main", "serve", *ledger.options(),
             "--emulate", EMULATE, "--listen", f"127.0.0.1:{port}", "--host-id", HOST_ID],
            stdout=subprocess.DEVNULL, stderr=stderr, env=_env(tmp_path))
    daemon = Daemon(process, f"http://127.0.0.1:{port}", stderr_path)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"daemon {name} exited with {process.returncode}:\n{daemon.stderr()}")
        try:
            if httpx.get(f"{daemon.url}/healthz", timeout=PROBE_S).status_code == 200:
                daemon.token = ledger.admin_token()
                return daemon
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    daemon.kill()
    pytest.fail(f"daemon {name} not healthy after {START_S}s:\n{daemon.stderr()}")


def run_fsck(ledger: LedgerAt, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "poold.cli.main", "fsck", *ledger.options()],
                          capture_output=True, text=True, env=_env(tmp_path), timeout=60)


# --- churn ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Extent:
    offset: int
    length: int
    generation: int
    device_id: int


@dataclass
class Record:
    """What the clients were told (acknowledged), shared by the churn threads of every round."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    granted: dict[str, Extent] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    in_doubt: set[str] = field(default_factory=set)   # release sent, no answer: either state
    held: list[str] = field(default_factory=list)     # active leases a thread may release
    unexpected: list[str] = field(default_factory=list)

    def take_held(self, rng: random.Random) -> str | None:
        with self.lock:
            if not self.held:
                return None
            return self.held.pop(rng.randrange(len(self.held)))


def churn(daemon: Daemon, record: Record, seed: int, deadline: float) -> None:
    """Grant and release until the daemon dies (a transport error), the deadline or the count.
    (A request to a live daemon, however loaded the machine, must not look like its death.)"""
    rng = random.Random(seed)
    with daemon.client(timeout_s=patience()) as client:
        for _ in range(CHURN_MAX_OPS):
            if time.monotonic() > deadline:
                return
            lease_id = record.take_held(rng) if rng.random() < RELEASE_PROBABILITY else None
            try:
                if lease_id is not None:
                    _release(client, record, lease_id)
                else:
                    _grant(client, record, rng)
            except errors.TransportError:
                if lease_id is not None:
                    with record.lock:
                        record.in_doubt.add(lease_id)
                return
            except errors.NoCapacity:
                # The device is full: give something back so the churn goes on.
                victim = record.take_held(rng)
                if victim is not None:
                    try:
                        _release(client, record, victim)
                    except errors.TransportError:
                        with record.lock:
                            record.in_doubt.add(victim)
                        return
            except errors.PooldError as exc:
                with record.lock:
                    record.unexpected.append(f"{type(exc).__name__}: {exc.detail}")
                return


def _grant(client: PooldClient, record: Record, rng: random.Random) -> None:
    info = client.grant(rng.randint(2, 8) * MiB, ttl_s=3600)
    with record.lock:
        record.granted[info.id] = Extent(info.offset, info.length, info.generation,
                                         info.device_id)
        record.held.append(info.id)
        if info.state != "active":
            record.unexpected.append(f"grant {info.id} answered state {info.state}")


def _release(client: PooldClient, record: Record, lease_id: str) -> None:
    info = client.release(lease_id)
    with record.lock:
        record.released.add(lease_id)
        record.in_doubt.discard(lease_id)
        if info.state not in ("released", "scrubbing"):  # the pool zeroes it before reuse
            record.unexpected.append(f"release {lease_id} answered state {info.state}")


def churn_then_kill(daemon: Daemon, record: Record, rng: random.Random) -> float:
    """Four churn threads; SIGKILL the daemon at a random moment once the churn is under way
    (up to KILL_WITHIN_S after the round's first acknowledged grant). Returns that delay."""
    deadline = time.monotonic() + CHURN_LIMIT_S
    granted_before = len(record.granted)
    threads = [threading.Thread(target=churn, args=(daemon, record, rng.randrange(2**32),
                                                    deadline), daemon=True)
               for _ in range(THREADS)]
    for t in threads:
        t.start()
    delay = rng.uniform(0.0, KILL_WITHIN_S)
    until("a grant acknowledged in this round", lambda: len(record.granted) > granted_before,
          patience())
    time.sleep(delay)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(timeout=10)
    for t in threads:
        t.join(timeout=CHURN_LIMIT_S + 10)
        assert not t.is_alive(), "a churn thread did not stop after the daemon died"
    return delay


# --- checks -----------------------------------------------------------------------------------

def assert_fsck_clean(ledger: LedgerAt, tmp_path: Path, when: str) -> None:
    result = run_fsck(ledger, tmp_path)
    assert result.returncode == 0, (
        f"fsck {when} exited {result.returncode}\nstdout: {result.stdout}\n"
        f"stderr: {result.stderr}")


def assert_acknowledged_present(client: PooldClient, record: Record) -> None:
    problems = []
    for lease_id, extent in record.granted.items():
        try:
            info = client.get_lease(lease_id)
        except errors.NotFound:
            problems.append(f"acknowledged grant {lease_id} is missing")
            continue
        found = Extent(info.offset, info.length, info.generation, info.device_id)
        if found != extent:
            problems.append(f"grant {lease_id} was {extent}, now {found}")
        if lease_id in record.released:
            expected = {"released", "scrubbing"}
        elif lease_id in record.in_doubt:
            expected = {"active", "released", "scrubbing"}
        else:
            expected = {"active"}
        if info.state not in expected:
            problems.append(f"lease {lease_id} is {info.state}, expected one of {expected}")
    assert not problems, "\n".join(problems)
    generations = [e.generation for e in record.granted.values()]
    assert len(generations) == len(set(generations)), "two acknowledged grants share a generation"


def assert_no_overlap(client: PooldClient) -> list[str]:
    """No two active leases overlap on a device; returns the active lease ids."""
    active = client.leases(state="active", limit=10_000)
    by_device: dict[int, list[tuple[int, int, str]]] = {}
    for info in active:
        by_device.setdefault(info.device_id, []).append((info.offset, info.length, info.id))
    for device_id, extents in by_device.items():
        extents.sort()
        for (a_off, a_len, a_id), (b_off, _b_len, b_id) in itertools.pairwise(extents):
            assert a_off + a_len <= b_off, (
                f"active leases {a_id} and {b_id} overlap on device {device_id}")
    return [info.id for info in active]


# --- the test ---------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerAt:
    state_dir = tmp_path / "state"
    if request.param == "sqlite":
        return LedgerAt(state_dir)
    return LedgerAt(state_dir, database_url=str(request.getfixturevalue("pg_url")))


@pytest.fixture
def daemons(ledger_at: LedgerAt) -> Iterator[list[Daemon]]:
    """Every daemon the test starts; all are SIGKILLed at teardown, whatever happened, and so is
    their fd keeper."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.kill()
    stop_keeper(ledger_at.state_dir)


def test_sigkill_during_churn_loses_no_acknowledged_operation(
        ledger_at: LedgerAt, tmp_path: Path, daemons: list[Daemon]) -> None:
    seed = run_seed()
    rng = random.Random(seed)
    record = Record()
    daemon = start_daemon(ledger_at, tmp_path, "round0")
    daemons.append(daemon)
    for round_no in range(1, ROUNDS + 1):
        granted_before, released_before = len(record.granted), len(record.released)
        delay = churn_then_kill(daemon, record, rng)
        context = (f"({SEED_VARIABLE}={seed}, round {round_no}, killed {delay:.2f}s after "
                   "its first grant)")
        assert not record.unexpected, f"{context}: {record.unexpected}"
        assert len(record.granted) > granted_before, f"{context}: no grant acknowledged"

        assert_fsck_clean(ledger_at, tmp_path, f"after SIGKILL {context}")
        daemon = start_daemon(ledger_at, tmp_path, f"round{round_no}")
        daemons.append(daemon)
        assert_fsck_clean(ledger_at, tmp_path, f"after restart {context}")
        with daemon.client() as client:
            assert_acknowledged_present(client, record)
            active = assert_no_overlap(client)
        print(f"round {round_no}: killed {delay:.2f}s after its first grant, "
              f"+{len(record.granted) - granted_before} grants, "
              f"+{len(record.released) - released_before} releases acknowledged, "
              f"{len(active)} active")
        # Next round may release anything still active, including grants whose answer was lost.
        record.held = active
        # An unanswered release that is no longer active did commit: expect it released from now on.
        record.released |= record.in_doubt - set(active)
        record.in_doubt.clear()
