"""Several `poold serve` processes (host-0, host-1, host-2) share one emulated device (one ledger
device, arbitrated by claims) through the real PostgreSQL: churn with no overlap (fsck), a
SIGKILLed host's capacity back after host_ttl + grace and not before, a host cut off from the
database by a proxy fenced before the others may use its bytes, and the database dropping every
connection during churn (test_pg_restart.py restarts the real server).

Each holder writes its lease id over its whole lease and reads it back before releasing it, so
a live lease whose memory was emptied or taken would show as a broken pattern.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.client import Lease, LeaseLost, PooldClient
from poold.types import MiB
from tests.conftest import POSTGRES_URL
from tests.multihost.hosts import (
    Host,
    pattern_intact,
    run_fsck,
    start_hosts,
    wait_until_granting,
    write_pattern,
)
from tests.multihost.tcp_proxy import TcpProxy
from tests.timing import patience, run_seed, until

pytestmark = pytest.mark.slow

SIZE = 128 * MiB
# A loaded 2-core machine has held a churning daemon's heartbeat back some 6 s: host_ttl must be
# well above that, or healthy hosts fence themselves (and are declared lost after the grace).
TTL_S, GRACE_S, TICK_S = 10.0, 5.0, 0.2
ENV = {"POOLD_HOST_TTL_S": str(TTL_S), "POOLD_HOST_GRACE_S": str(GRACE_S),
       "POOLD_REAP_INTERVAL_S": str(TICK_S), "POOLD_CLAIM_SLICE": "16MiB",
       "POOLD_CLAIM_IDLE_S": "2"}
# Where no host may be fenced (churn, a short outage, a database restart): room for that and more.
STEADY_TTL_S = 30.0
STEADY_ENV = {**ENV, "POOLD_HOST_TTL_S": str(STEADY_TTL_S)}
SIZES = [2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB, 16 * MiB]
# An SDK lease renews every third of its TTL, 9 s. The host is cut off right after a heartbeat,
# so its fence comes host_ttl later; the SDK has asked again by then (every 9 s, then every
# 0.5 s while it hears LedgerUnavailable) and hears HostFenced within a retry of the fence,
# some 4 s before host_ttl + grace. Its expiry in the ledger, at least two renewal periods
# (18 s) after the cut, comes some 3 s after the others reclaim the host, so the lease is lost
# with its host rather than expired first. Both margins are there for a loaded machine.
SDK_TTL_S = 27
CLOCK_GRAIN_S = 0.05  # two readings of the monotonic clock, in two processes


def _target() -> tuple[str, int]:
    hostport = POSTGRES_URL.split("@", 1)[1].split("/", 1)[0]
    host, _, port = hostport.partition(":")
    return host, int(port or 5432)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    with TcpProxy(*_target()) as p:
        yield p


class Churn:
    """Clients granting, writing, checking and releasing on several hosts; records what each
    was told."""

    def __init__(self, seed: int) -> None:
        self.seed = seed  # each client thread's choices: its own generator, seeded from this
        self.held: dict[str, tuple[Host, dict[str, Any]]] = {}
        self.released: dict[str, Host] = {}
        # Leases whose release was answered 503 and not yet retried to a 200: the database may
        # have committed it before the connection dropped (a COMMIT whose answer was lost), so
        # such a lease may be released already, and its daemon let go of its memory. Its holder
        # asked to give it up: its bytes are no longer the holder's to check.
        self.in_doubt: dict[str, Host] = {}
        self.errors: list[str] = []
        self.broken: list[str] = []
        self.grants = 0
        self.refusals = 0  # 507 NoCapacity answers: the pool was full (what a stall would show)
        self.granted: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def run(self, hosts: list[Host], threads_per_host: int, seconds: float,
            min_grants: int = 0, max_seconds: float = 60.0,
            meanwhile: threading.Thread | None = None) -> None:
        """Churn for `seconds`, and on until `min_grants` grants were acknowledged (a loaded
        machine is slower, not wrong) and `meanwhile` (a fault injected during the churn) has
        finished, but never past `max_seconds`."""
        start = time.monotonic()
        stop, hard_stop = start + seconds, start + max(seconds, max_seconds)

        def go_on() -> bool:
            now = time.monotonic()
            wanted = self.grants < min_grants or (meanwhile is not None and meanwhile.is_alive())
            return now < stop or (wanted and now < hard_stop)

        workers = [threading.Thread(target=self._client,
                                    args=(host, go_on, random.Random(self.seed * 1000 + i)))
                   for i, host in enumerate(hosts * threads_per_host)]
        for w in workers:
            w.start()
        if meanwhile is not None:
            meanwhile.start()
        for w in workers:
            w.join(max(seconds, max_seconds) + 60)
        if meanwhile is not None:
            meanwhile.join(60)

    def wait_for_grants(self, count: int) -> None:
        """Until the churn has `count` acknowledged grants (it is under way)."""
        until(f"{count} grants acknowledged", lambda: self.grants >= count, patience())

    def _client(self, host: Host, go_on: Callable[[], bool], rng: random.Random) -> None:
        mine: list[dict[str, Any]] = []
        while go_on():
            try:
                if not mine or (len(mine) < 6 and rng.random() < 0.6):
                    response = host.grant(rng.choice(SIZES))
                    if response.status_code == 201:
                        lease = response.json()
                        write_pattern(lease)
                        mine.append(lease)
                        with self.lock:
                            self.held[lease["id"]] = (host, lease)
                            self.granted.append(lease)
                            self.grants += 1
                    else:
                        self._error(response.status_code, response.json()["error"])
                    continue
                lease = mine.pop(rng.randrange(len(mine)))
                if lease["id"] not in self.in_doubt and not pattern_intact(lease):
                    self.broken.append(lease["id"])
                response = host.call("DELETE", f"/v1/leases/{lease['id']}")
                if response.status_code == 200:
                    with self.lock:
                        self.held.pop(lease["id"])
                        self.in_doubt.pop(lease["id"], None)
                        self.released[lease["id"]] = host
                else:
                    mine.append(lease)  # not acknowledged: try again later (idempotent)
                    with self.lock:
                        self.in_doubt[lease["id"]] = host
                    self._error(response.status_code, response.json()["error"])
                    time.sleep(0.05)
            except Exception as exc:  # every surprise is recorded, and fails the test
                self.errors.append(f"{host.host_id}: {type(exc).__name__}: {exc}")
                time.sleep(0.05)

    def _error(self, status: int, name: str) -> None:
        if (status, name) == (507, "NoCapacity"):
            self.refusals += 1
            time.sleep(0.01)
            return
        self.errors.append(f"{status} {name}")
        time.sleep(0.05)

    def release_held(self) -> None:
        """Release every lease the churn still holds. A churn keeps the pool close to full
        (a client holds up to six leases; the refusals say how often it was), and grants whose
        answer a fault lost may hold the rest until their TTL: a check that hosts grant again
        needs the room back, or it measures the pool's fill instead of the recovery."""
        for lease_id, (host, _) in list(self.held.items()):
            self._release_now(host, lease_id)

    def _release_now(self, host: Host, lease_id: str) -> None:
        """Release a held lease after the churn, which must be acknowledged."""
        response = host.call("DELETE", f"/v1/leases/{lease_id}")
        assert response.status_code == 200, response.text
        self.held.pop(lease_id)
        self.released[lease_id] = host

    def check_ledger(self) -> None:
        """Every acknowledged grant still held is active with its extent and bytes; every
        acknowledged release is ended; a release in doubt either (and released once retried)."""
        assert not self.broken, f"patterns broken: {self.broken[:5]}"
        for lease_id, host in self.in_doubt.items():
            now = host.call("GET", f"/v1/leases/{lease_id}").json()
            assert now["state"] in {"active", "released", "scrubbing"}, now
            self._release_now(host, lease_id)  # retried
        for host, lease in self.held.values():
            now = host.call("GET", f"/v1/leases/{lease['id']}").json()
            assert now["state"] == "active", now
            assert (now["offset"], now["length"], now["generation"]) == (
                lease["offset"], lease["length"], lease["generation"])
            assert pattern_intact(lease), lease["id"]
        for lease_id, host in self.released.items():
            now = host.call("GET", f"/v1/leases/{lease_id}").json()
            # Released, or still being zeroed after its release: ended either way.
            assert now["state"] in {"released", "scrubbing"} and now["ended_at"], now


def test_three_hosts_churn_on_one_shared_device_without_overlap(
        tmp_path: Path, pg_url: str, cleanup: list[Host]) -> None:
    hosts = start_hosts(tmp_path, [pg_url] * 3, "128MiB", STEADY_ENV)
    cleanup.extend(hosts)
    devices = hosts[0].call("GET", "/v1/devices").json()
    assert len(devices) == 1 and devices[0]["host"] is None  # one ledger device, shared
    churn = Churn(run_seed())
    churn.run(hosts, threads_per_host=2, seconds=6.0, min_grants=60)
    assert churn.errors == []
    assert churn.grants >= 60
    # Every host took part: a churn the ledger arbitrated, not one host alone.
    assert {lease["host"] for lease in churn.granted} == {"host-0", "host-1", "host-2"}
    churn.check_ledger()
    granted_by = {lease["host"] for _, lease in churn.held.values()}
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    listed = {h["id"]: h for h in hosts[0].call("GET", "/v1/hosts").json()}
    assert set(listed) == {"host-0", "host-1", "host-2"}
    assert all(h["state"] == "up" and h["heartbeat_age_s"] < STEADY_TTL_S
               for h in listed.values())
    assert granted_by <= set(listed)


def test_a_killed_hosts_capacity_returns_after_ttl_plus_grace_not_before(
        tmp_path: Path, pg_url: str, cleanup: list[Host]) -> None:
    hosts = start_hosts(tmp_path, [pg_url] * 3, "128MiB", ENV)
    cleanup.extend(hosts)
    whole = hosts[2].grant(SIZE)
    assert whole.status_code == 201, whole.text
    write_pattern(whole.json())
    assert hosts[0].grant(2 * MiB).status_code == 507
    hosts[2].kill()

    def granted() -> dict[str, Any] | None:
        response = hosts[0].grant(2 * MiB)
        if response.status_code == 201:
            return dict(response.json())
        assert response.json()["error"] == "NoCapacity"
        return None
    lease = until("the killed host's capacity comes back", granted, patience(TTL_S, GRACE_S))
    write_pattern(lease)
    assert hosts[1].grant(64 * MiB).status_code == 201  # the others use it too
    listed = {h["id"]: h for h in hosts[0].call("GET", "/v1/hosts").json()}
    assert listed["host-2"]["state"] == "lost" and listed["host-2"]["live_leases"] == 0
    # Not before ttl + grace of silence, by the ledger's clock: from the killed host's last
    # heartbeat to its loss, and to the grant of its bytes.
    silence_before(hosts[0], "host-2", lease)
    old = hosts[0].call("GET", f"/v1/leases/{whole.json()['id']}").json()
    assert old["state"] == "lost"
    assert pattern_intact(lease)
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr


def test_a_host_cut_off_from_the_ledger_is_fenced_before_others_get_its_bytes(
        tmp_path: Path, pg_url: str, proxy: TcpProxy,
        cleanup: list[Host]) -> None:
    hosts = start_hosts(tmp_path, [pg_url, pg_url, proxy.url_for(pg_url)],
                        "128MiB", ENV)
    cleanup.extend(hosts)
    cut_off = hosts[2]
    whole = cut_off.grant(SIZE - 16 * MiB, ttl_s=600).json()
    witnesses = [FenceWitness() for _ in range(2)]
    clients = [PooldClient(cut_off.url, token=cut_off.token, transport=witness)
               for witness in witnesses]
    try:
        sdk = [client.lease(8 * MiB, ttl_s=SDK_TTL_S) for client in clients]
        until("a fresh heartbeat of the host to cut off", lambda: heartbeat_age_s(
            hosts[0], cut_off.host_id) < 5 * TICK_S, patience(TTL_S), interval_s=0.01)
        proxy.refuse()
        _fenced_window(cut_off, hosts[0], whole, sdk, witnesses)
        # Healed: the fenced host records its leases lost, rejoins, and grants again; until
        # then it still grants nothing.
        proxy.heal()

        def grants_again() -> bool:
            response = cut_off.grant(2 * MiB)
            if response.status_code != 201:
                assert (response.status_code, response.json()["error"]) == (503, "HostFenced")
            return response.status_code == 201
        until("the healed host grants again", grants_again, patience(TTL_S), interval_s=0.1)
        for lease in (whole, *(lease.info.model_dump() for lease in sdk)):
            state = cut_off.call("GET", f"/v1/leases/{lease['id']}").json()["state"]
            assert state in {"lost", "scrubbing"}, (lease["id"], state)
        for lease in sdk:
            lease.release()  # idempotent: it ended as lost
    finally:
        for client in clients:
            client.close()
    listed = {h["id"]: h for h in hosts[0].call("GET", "/v1/hosts").json()}
    assert listed["host-2"]["state"] == "up"
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr


class FenceWitness(httpx.BaseTransport):
    """The SDK's transport to the cut-off host: passes every request on, and notes when a
    keepalive was first answered HostFenced (when the client learned its lease is lost)."""

    def __init__(self) -> None:
        self._real = httpx.HTTPTransport()
        self.fenced_at: float | None = None  # time.monotonic()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._real.handle_request(request)
        if (self.fenced_at is None and request.url.path.endswith("/keepalive")
                and response.status_code == 503):
            response.read()
            if response.json().get("error") == "HostFenced":
                self.fenced_at = time.monotonic()
        return response


def _fenced_window(cut_off: Host, other: Host, whole: dict[str, Any], sdk: list[Lease],
                   witnesses: list[FenceWitness]) -> None:
    """From the cut on: the cut-off host grants nothing (503, HostFenced from host_ttl on, never
    anything else after), its SDK clients learn their leases are lost, and only after both does
    another host get its bytes (host_ttl + grace); it stays fenced until the proxy heals.

    Times are seconds after the cut by this machine's monotonic clock, which the daemons' fences
    read too; the cut-off host's last heartbeat started before the cut, so from host_ttl after
    it every answer must be HostFenced, however late the loop runs."""
    cut = time.monotonic()
    give_up = patience(TTL_S, GRACE_S)
    fenced_at: float | None = None
    others_sent: float | None = None  # when the first grant the other host answered was sent
    granted: dict[str, Any] = {}
    while others_sent is None or time.monotonic() - cut < others_sent + 1.5:
        sent = time.monotonic() - cut
        assert sent < give_up, "nobody got the capacity"
        answer = cut_off.grant(2 * MiB)
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        if sent > TTL_S + CLOCK_GRAIN_S or fenced_at is not None:
            assert error == "HostFenced", (sent, error)
        else:
            assert error in ("LedgerUnavailable", "HostFenced"), (sent, error)
        if fenced_at is None and error == "HostFenced":
            fenced_at = sent
        if others_sent is None:
            response = other.grant(2 * MiB)
            if response.status_code == 201:
                others_sent, granted = sent, response.json()
            else:
                assert response.json()["error"] == "NoCapacity"
        time.sleep(0.05)
    assert fenced_at is not None
    learned = [w.fenced_at for w in witnesses]
    assert all(at is not None for at in learned), "an SDK client never heard HostFenced"
    last_learned = max(at for at in learned if at is not None) - cut
    assert last_learned < others_sent, (fenced_at, last_learned, others_sent)
    # Not before ttl + grace of the cut-off host's silence, by the ledger's clock.
    silence_before(other, cut_off.host_id, granted)
    for lease in sdk:
        assert lease.lost_reason is not None and lease.lost_reason.startswith("HostFenced")
        with pytest.raises(LeaseLost):
            lease.check()
    answer = cut_off.call("POST", f"/v1/leases/{whole['id']}/keepalive")
    assert (answer.status_code, answer.json()["error"]) == (503, "HostFenced")


def silence_before(observer: Host, silent: str, grant: dict[str, Any]) -> None:
    """`silent` was declared lost, and `grant` (of its bytes, on another host) made, only after
    host_ttl + grace without a heartbeat from it, judged on the ledger's timestamps."""
    last_beat = parse_at(next(h for h in observer.call("GET", "/v1/hosts").json()
                              if h["id"] == silent)["last_seen_at"])
    declared = [e for e in observer.call("GET", "/v1/events", params={"kind": "host.lost"}).json()
                if e["host"] == silent]
    assert len(declared) == 1, declared
    lost_at, granted_at = parse_at(declared[0]["at"]), parse_at(grant["granted_at"])
    after = timedelta(seconds=TTL_S + GRACE_S)
    assert last_beat + after <= lost_at <= granted_at, (last_beat, lost_at, granted_at)


def heartbeat_age_s(observer: Host, host_id: str) -> float:
    return float(next(h for h in observer.call("GET", "/v1/hosts").json()
                      if h["id"] == host_id)["heartbeat_age_s"])


def parse_at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_database_dropping_every_connection_during_churn_loses_nothing(
        tmp_path: Path, pg_url: str, proxy: TcpProxy,
        cleanup: list[Host]) -> None:
    # The outage is far shorter than host_ttl: nobody is fenced.
    hosts = start_hosts(tmp_path, [proxy.url_for(pg_url)] * 3, "128MiB", STEADY_ENV)
    cleanup.extend(hosts)
    churn = Churn(run_seed())
    at_heal: list[int] = []  # grants acknowledged when the outage ended

    def outage() -> None:
        churn.wait_for_grants(20)  # during the churn, not before it
        proxy.refuse()
        time.sleep(2.0)  # the outage itself
        proxy.heal()
        at_heal.append(churn.grants)
        # The churn goes on until it has granted again after the outage.
        until("grants after the outage", lambda: churn.grants >= at_heal[0] + 20, patience())
    breaker = threading.Thread(target=outage)
    churn.run(hosts, threads_per_host=2, seconds=8.0, meanwhile=breaker)
    assert at_heal and churn.grants >= at_heal[0] + 20, (
        at_heal, churn.grants, churn.refusals, len(churn.held), churn.errors[-5:])
    unexpected = [e for e in churn.errors if e != "503 LedgerUnavailable"]
    assert unexpected == []
    assert churn.errors, "the outage was never seen"
    churn.check_ledger()
    churn.release_held()  # room for the grants below (see Churn.release_held)
    for host in hosts:  # every host grants again
        wait_until_granting(host)
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
