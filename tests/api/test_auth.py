"""Auth and tenants on a real daemon: tokens, roles, tenant isolation, quotas, UNIX-socket peers.

Each test runs a daemon with `auth = "token"` on each real database; the admin uses the
credential the daemon wrote on first start, as an operator would.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poold.client import PooldClient
from poold.errors import Forbidden, QuotaExceeded, Unauthenticated, UnknownLease
from poold.types import MiB
from tests.daemon_fixtures import serve_process, serving_daemon

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
        for attempt in (lambda: b.get_lease(lease.id), lambda: b.keepalive(lease.id),
                        lambda: b.release(lease.id)):
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


def test_quotas_hold_under_concurrent_grants(served: Served) -> None:
    dave = served.token("dave", tenant="team-d")
    with served.client() as admin:
        admin.raw("PUT", "/v1/tenants/team-d", json={"max_bytes": 40 * MiB, "max_leases": 8})
    outcomes: list[str] = []
    lock = threading.Lock()

    def grant() -> None:
        with served.client(dave) as d:
            try:
                d.grant(8 * MiB, ttl_s=60)
                result = "granted"
            except QuotaExceeded:
                result = "quota"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=grant) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes).count("granted") == 5  # 40 MiB / 8 MiB
    assert outcomes.count("quota") == 7
    with served.client() as admin:
        team = admin.raw("GET", "/v1/tenants/team-d")
        assert (team["leased_bytes"], team["live_leases"]) == (40 * MiB, 5)
        admin.raw("PUT", "/v1/tenants/team-d", json={"max_bytes": None, "max_leases": 5})
    with served.client(dave) as d, pytest.raises(QuotaExceeded, match="5 leases"):
        d.grant(2 * MiB, ttl_s=60)


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
    if os.geteuid() != 0:
        pytest.fail("this test drops to uid 65534 to be another peer: run it as root")
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
