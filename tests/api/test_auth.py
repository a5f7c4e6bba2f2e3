"""Auth and tenants on a real daemon: tokens, roles, tenant isolation, quotas, UNIX-socket peers.

Each test runs a daemon with `auth = "token"` on each real database; the admin uses the
credential the daemon wrote on first start, as an operator would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

from poold.client import PooldClient
from poold.errors import Forbidden, QuotaExceeded, Unauthenticated, UnknownLease
from poold.ledger.ledger import Ledger
from poold.ledger.tenants import RETRY_S
from poold.types import MiB
from tests.daemon_fixtures import serve_process, serving_daemon
from tests.preconditions import need_root
from tests.timing import patience, until

NOBODY = 65534


class Served:
    def __init__(self, url: str, state: Path) -> None:
        self.url = url
        self.state = state
        self.admin_bearer = (state / "admin.token").read_text().strip()

    def client(self, token: str | None = None) -> PooldClient:
        return PooldClient(self.url, token=token or self.admin_bearer)

    def token(self, name: str, role: str = "tenant", tenant: str | None = None) -> str:
        with self.client() as admin:
            made = admin.raw("POST", "/v1/tokens",
                             json={"name": name, "role": role, "tenant": tenant})
        return str(made["bearer"])


@pytest.fixture
def served(tmp_path: Path, ledger_url: str) -> Iterator[Served]:
    with serving_daemon(tmp_path, auth="token", database_url=ledger_url,
                        emulate_size=128 * MiB,
                        peer_tenants={str(NOBODY): "team-nobody"}) as (_daemon, url):
        yield Served(url, tmp_path)


def test_admin_credential_is_written_once_0600(served: Served) -> None:
    path = served.state / "admin.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with served.client() as admin:
        me = admin.raw("GET", "/v1/auth/whoami")
        assert me["role"] == "admin" and me["name"].startswith("admin@")
        listed = admin.raw("GET", "/v1/tokens")
    assert [t["role"] for t in listed] == ["admin"]
    assert "secret" not in json.dumps(listed) and served.admin_bearer not in json.dumps(listed)


def test_requests_without_a_valid_credential_are_refused(served: Served) -> None:
    for headers in ({}, {"Authorization": "Bearer nonsense"},
                    {"Authorization": f"Basic {served.admin_bearer}"},
                    {"Authorization": served.admin_bearer[:-4] + "AAAA"},
                    {"Authorization": "Bearer " + served.admin_bearer[:-4] + "AAAA"}):
        answer = httpx.get(f"{served.url}/v1/leases", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json()["error"] == "Unauthenticated"
    # Health and metrics stay open for probes and scrapers.
    assert httpx.get(f"{served.url}/healthz").status_code == 200
    assert httpx.get(f"{served.url}/readyz").status_code == 200


def test_tenants_see_and_touch_only_their_own_leases(served: Served) -> None:
    alice, bob = served.token("alice", tenant="team-a"), served.token("bob", tenant="team-b")
    with served.client(alice) as a, served.client(bob) as b, served.client() as admin:
        lease = a.grant(4 * MiB, ttl_s=60)
        assert lease.tenant == "team-a"
        assert [x.id for x in a.leases()] == [lease.id]
        assert b.leases() == []
        attempts: list[Callable[[], object]] = [
            lambda: b.get_lease(lease.id), lambda: b.keepalive(lease.id),
            lambda: b.release(lease.id)]
        for attempt in attempts:
            with pytest.raises(UnknownLease):
                attempt()
        with pytest.raises(Forbidden):
            b.raw("POST", "/v1/leases", json={"size": MiB, "tenant": "team-a"})
        with pytest.raises(Forbidden):  # revoking is an admin act, even of one's own lease
            a.raw("POST", f"/v1/leases/{lease.id}/revoke")
        for path in ("/v1/events", "/v1/hosts", "/v1/tokens", "/v1/devices/1/extents"):
            with pytest.raises(Forbidden):
                b.raw("GET", path)
        assert admin.get_lease(lease.id).state == "active"  # untouched by bob's attempts
        assert [t["name"] for t in b.raw("GET", "/v1/tenants")] == ["team-b"]
        a.keepalive(lease.id)
        assert a.release(lease.id).state in ("released", "scrubbing")
        actors = {e.kind: e.actor for e in admin.events(lease_id=lease.id)}
    assert actors["lease.granted"] == "tenant:alice"
    assert actors["lease.released"] == "tenant:alice"


def test_a_revoked_token_is_refused_at_once(served: Served) -> None:
    carol = served.token("carol", tenant="team-c")
    with served.client(carol) as c, served.client() as admin:
        assert c.raw("GET", "/v1/auth/whoami")["tenant"] == "team-c"  # now cached as valid
        token_id = next(t["id"] for t in admin.raw("GET", "/v1/tokens") if t["name"] == "carol")
        revoked = admin.raw("DELETE", f"/v1/tokens/{token_id}")
        assert revoked["revoked_at"] is not None
        with pytest.raises(Unauthenticated):
            c.raw("GET", "/v1/auth/whoami")
        kinds = [e.kind for e in admin.events(kind="token.revoked")]
    assert kinds == ["token.revoked"]


def race_grants(grants: list[tuple[Served, str]], size: int) -> list[str]:
    """Each (daemon, bearer) asks for `size` at the same moment, from a thread of its own;
    returns what each was told: "granted" or "quota"."""
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(grants))

    def grant(served: Served, bearer: str) -> None:
        with served.client(bearer) as client:
            start.wait(10)
            try:
                client.grant(size, ttl_s=60)
                result = "granted"
            except QuotaExceeded:
                result = "quota"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=grant, args=g) for g in grants]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def test_quotas_hold_under_concurrent_grants(served: Served) -> None:
    dave = served.token("dave", tenant="team-d")
    with served.client() as admin:
        admin.raw("PUT", "/v1/tenants/team-d", json={"max_bytes": 40 * MiB, "max_leases": 8})
    outcomes = race_grants([(served, dave)] * 12, 8 * MiB)
    assert sorted(outcomes).count("granted") == 5  # 40 MiB / 8 MiB
    assert outcomes.count("quota") == 7
    with served.client() as admin:
        team = admin.raw("GET", "/v1/tenants/team-d")
        assert (team["leased_bytes"], team["live_leases"]) == (40 * MiB, 5)
        admin.raw("PUT", "/v1/tenants/team-d", json={"max_bytes": None, "max_leases": 5})
    with served.client(dave) as d, pytest.raises(QuotaExceeded, match="5 leases"):
        d.grant(2 * MiB, ttl_s=60)


def test_lease_count_quota_holds_under_concurrent_grants_on_two_hosts(
        tmp_path: Path, ledger_url: str) -> None:
    """Two daemons (two writers) on one ledger, grants racing on both: exactly max_leases are
    granted, as the tenant's row is locked inside each grant's transaction."""
    with two_daemons(tmp_path, ledger_url) as (a, b):
        erin = a.token("erin", tenant="team-e")
        with a.client() as admin:
            admin.raw("PUT", "/v1/tenants/team-e", json={"max_bytes": None, "max_leases": 4})
        outcomes = race_grants([(a if i % 2 else b, erin) for i in range(16)], 2 * MiB)
        assert (outcomes.count("granted"), outcomes.count("quota")) == (4, 12)
        with b.client() as admin:
            team = admin.raw("GET", "/v1/tenants/team-e")
        assert (team["leased_bytes"], team["live_leases"]) == (8 * MiB, 4)


def test_tokens_are_stored_as_sha256_of_the_secret_only(served: Served, ledger_url: str) -> None:
    bearer = served.token("frank", tenant="team-f")
    token_id, secret = bearer.removeprefix("pd_").split("_", 1)
    engine = create_engine(ledger_url)
    try:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM tokens"))]
    finally:
        engine.dispose()
    assert len(rows) == 2  # the admin credential and frank's
    row = next(r for r in rows if r["id"] == token_id)
    assert row["secret_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    for stored in rows:  # no column of any row holds a secret or a bearer string
        text_of_row = " ".join(str(v) for v in stored.values())
        assert secret not in text_of_row and bearer not in text_of_row
        # pd_<id>_<secret>: the secret is token_urlsafe, which may hold "_" itself
        assert served.admin_bearer.removeprefix("pd_").split("_", 1)[1] not in text_of_row
        assert re.fullmatch(r"[0-9a-f]{64}", stored["secret_sha256"])


def test_a_revoked_token_is_refused_at_once_by_every_daemon(tmp_path: Path, pg_url: str) -> None:
    """Revoked through host A, refused by host B on its very next request, though B had just
    accepted (and cached) it: B hears of the revocation from PostgreSQL as it commits."""
    with two_daemons(tmp_path, pg_url) as (a, b), a.client() as admin_a:
        for round_ in range(5):
            bearer = a.token(f"gina-{round_}", tenant="team-g")
            with b.client(bearer) as on_b:
                assert on_b.raw("GET", "/v1/auth/whoami")["tenant"] == "team-g"
                token_id = bearer.removeprefix("pd_").split("_", 1)[0]
                admin_a.raw("DELETE", f"/v1/tokens/{token_id}")
                with pytest.raises(Unauthenticated, match="revoked"):
                    on_b.raw("GET", "/v1/auth/whoami")


def test_revocations_missed_while_not_listening_are_not_trusted(tmp_path: Path,
                                                                 pg_url: str) -> None:
    """A revocation B could not hear (written without a notification, as if while B's listening
    connection was down) is seen once B reconnects: everything cached before is dropped."""
    with two_daemons(tmp_path, pg_url) as (a, b):
        bearer = a.token("hank", tenant="team-h")
        token_id = bearer.removeprefix("pd_").split("_", 1)[0]
        engine = create_engine(pg_url)
        try:
            with b.client(bearer) as on_b:
                assert on_b.raw("GET", "/v1/auth/whoami")["tenant"] == "team-h"
                with engine.begin() as conn:
                    conn.execute(text("UPDATE tokens SET revoked_at = now() WHERE id = :id"),
                                 {"id": token_id})
                # Unheard, so B still trusts what it cached: the cache is not read per request.
                assert on_b.raw("GET", "/v1/auth/whoami")["tenant"] == "team-h"
                listener = _listener_pid(engine, "host-b")
                with engine.begin() as conn:
                    conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener})
                until("B listens again", lambda: _listener_pid(engine, "host-b") not in (
                    None, listener), patience(RETRY_S[1]))
                with pytest.raises(Unauthenticated, match="revoked"):
                    on_b.raw("GET", "/v1/auth/whoami")
        finally:
            engine.dispose()


def _listener_pid(engine: Engine, host: str) -> int | None:
    with engine.connect() as conn:
        pid = conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
            {"name": f"poold-revocations@{host}"}).scalar()
    return None if pid is None else int(pid)


@contextmanager
def two_daemons(tmp_path: Path, ledger_url: str) -> Iterator[tuple[Served, Served]]:
    """Hosts A and B on one ledger, each with its own emulated device and admin credential."""
    with serving_daemon(tmp_path / "a", auth="token", database_url=ledger_url,
                        host_id="host-a", emulate_size=64 * MiB) as (_a, url_a), \
            serving_daemon(tmp_path / "b", auth="token", database_url=ledger_url,
                           host_id="host-b", emulate_size=64 * MiB) as (_b, url_b):
        yield Served(url_a, tmp_path / "a"), Served(url_b, tmp_path / "b")


@pytest.fixture
def served_process(tmp_path: Path) -> Iterator[Path]:
    """`poold serve` as a process (the UNIX socket is only served there); yields the runtime
    directory, made where any uid can reach api.sock."""
    runtime = Path(tempfile.mkdtemp(prefix="poold-run-", dir="/tmp"))
    os.chmod(runtime, 0o755)
    try:
        with serve_process(tmp_path, lambda _port: _answers(runtime / "api.sock"), auth="token",
                           runtime_dir=str(runtime),
                           peer_tenants=json.dumps({str(NOBODY): "team-nobody"})):
            yield runtime
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _answers(sock: Path) -> bool:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)),
                      base_url="http://poold") as c:
        return c.get("/healthz").status_code == 200


def test_unix_socket_peers_are_known_by_uid(served_process: Path) -> None:
    """No token on api.sock: root (peer_admins) is an admin; uid 65534 maps to its tenant by
    config, and leases as that tenant."""
    sock = str(served_process / "api.sock")
    with PooldClient(uds=sock, token="") as local:
        me = local.raw("GET", "/v1/auth/whoami")
    assert me["role"] == "admin" and me["name"] == f"uid{os.geteuid()}"
    need_root("be another peer (uid 65534)")
    whoami = json.loads(_as_uid(NOBODY, sock, "GET /v1/auth/whoami HTTP/1.0\r\n\r\n"))
    body = json.dumps({"size": 2 * MiB})
    lease = json.loads(_as_uid(NOBODY, sock, (
        f"POST /v1/leases HTTP/1.0\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}")))
    assert whoami == {"name": f"uid{NOBODY}", "role": "tenant", "tenant": "team-nobody"}
    assert lease["tenant"] == "team-nobody"


def _as_uid(uid: int, sock_path: str, request: str) -> str:
    """Send one HTTP request on the UNIX socket from a forked child running as `uid` (a new
    interpreter could not read this venv as that uid); returns the response body."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only syscalls, then _exit
        code = 1
        try:
            os.close(read_end)
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(sock_path)
                conn.sendall(request.encode())
                reply = b""
                while chunk := conn.recv(65536):
                    reply += chunk
            os.write(write_end, reply)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    reply = b""
    while chunk := os.read(read_end, 65536):
        reply += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    head, _, body = reply.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 2"), head
    return body


def test_unknown_token_ids_are_remembered_not_read_each_time(ledger: Ledger,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Once, each request with an unknown token id cost a ledger read (a flood of made-up ids
    was a flood of reads, and timed apart from known ids); now both are answered from memory
    after the first look, and the unknown ones kept are bounded."""
    from starlette.requests import Request

    from api import auth as auth_module
    from api.auth import TokenAuthenticator
    from poold.ledger import tenants as tenant_ledger
    from poold.types import Role

    _view, bearer = ledger.run(lambda tx: tenant_ledger.create_token(
        tx, name="known", role=Role.ADMIN, tenant=None, actor="test"))
    reads: list[object] = []
    real_read = ledger.read

    def counted(query: Any) -> Any:
        reads.append(query)
        return real_read(query)

    monkeypatch.setattr(ledger, "read", counted)
    authenticator = TokenAuthenticator(ledger, cache_s=60.0)

    def ask(token: str) -> str:
        scope = {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}
        try:
            return authenticator.authenticate(Request(scope)).name
        except Unauthenticated as exc:
            return exc.detail

    unknown = "pd_" + "0" * 16 + "_" + "s" * 43
    assert {ask(unknown) for _ in range(50)} == {"unknown credential"}
    assert {ask(bearer) for _ in range(50)} == {"known"}
    assert len(reads) == 2  # one look each
    monkeypatch.setattr(auth_module, "UNKNOWN_TOKENS_KEPT", 8)
    for i in range(20):
        ask(f"pd_{i:016x}_" + "s" * 43)
    assert len(authenticator._unknown) == 8
