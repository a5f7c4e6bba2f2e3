"""The `poold` command as an operator runs it: a real daemon process, curl, mmap, the CLI."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poold.types import MiB
from tests.daemon_fixtures import free_port
from tests.timing import PROBE_S, START_S

POOLD = [sys.executable, "-m", "poold.cli.main"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*POOLD, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def daemon(tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[str, str]]:
    """`poold serve` as a process, on each database; yields its URL and ledger URL. The CLI
    commands the test runs find the admin credential in the same state directory, as an operator
    with the same config would."""
    monkeypatch.setenv("POOLD_STATE_DIR", str(tmp_path / "state"))
    port = free_port()
    env = {**os.environ, "POOLD_HOST_ID": "cli-host"}
    log = tmp_path / "daemon.log"
    proc = subprocess.Popen(
        [*POOLD, "serve", "--state-dir", str(tmp_path / "state"), "--emulate", "256MiB",
         "--listen", f"127.0.0.1:{port}", "--database-url", ledger_url],
        env=env, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=PROBE_S).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "daemon did not come up"
                time.sleep(0.1)
        yield url, ledger_url
        proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once shut down, so -SIGTERM is a clean stop too.
        assert proc.wait(20) in (0, -signal.SIGTERM)
        assert "daemon.stopped" in log.read_text(), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def admin_token() -> str:
    return (Path(os.environ["POOLD_STATE_DIR"]) / "admin.token").read_text().strip()


def curl_grant(url: str, size: int) -> dict[str, object]:
    body = json.dumps({"size": size, "ttl_s": 120})
    auth = f"Authorization: Bearer {admin_token()}"
    if shutil.which("curl") is None:
        return dict(httpx.post(f"{url}/v1/leases", json=json.loads(body),
                               headers={"Authorization": auth.partition(": ")[2]}).json())
    out = subprocess.run(["curl", "-sf", "-H", "content-type: application/json", "-H", auth,
                          "-d", body, f"{url}/v1/leases"], capture_output=True, text=True,
                         check=True)
    return dict(json.loads(out.stdout))


def test_operator_walkthrough(daemon: tuple[str, str]) -> None:
    url, ledger_url = daemon
    lease = curl_grant(url, 64 * MiB)
    assert lease["length"] == 64 * MiB
    # As the README maps it: map_path at map_offset (an emulated lease: the daemon's memfd).
    fd = os.open(str(lease["map_path"]), os.O_RDWR)
    try:
        with mmap.mmap(fd, 64 * MiB, mmap.MAP_SHARED, offset=int(str(lease["map_offset"]))) as m:
            m[:11] = b"hello, pool"
            m.flush()
        with mmap.mmap(fd, 64 * MiB, mmap.MAP_SHARED, offset=int(str(lease["map_offset"]))) as m:
            assert m[:11] == b"hello, pool"
    finally:
        os.close(fd)

    pools = json.loads(run("list", "pools", "--url", url).stdout)
    admin = {"Authorization": f"Bearer {admin_token()}"}
    assert pools == httpx.get(f"{url}/v1/pools", headers=admin).json()
    assert httpx.get(f"{url}/v1/pools").status_code == 401  # no credential, no answer
    assert pools[0]["leased_bytes"] == 64 * MiB
    human = run("list", "leases", "--url", url, "--human").stdout
    assert str(lease["id"]) in human and "64MiB" in human

    released = json.loads(run("lease", "release", str(lease["id"]), "--url", url).stdout)
    assert released["state"] == "released"
    assert json.loads(run("list", "pools", "--url", url).stdout)[0]["available_bytes"] == \
        256 * MiB

    acquired = run("lease", "acquire", "8MiB", "--ttl", "60", "--url", url)
    assert json.loads(acquired.stdout)["length"] == 8 * MiB, acquired.stderr
    devices = json.loads(run("list", "devices", "--url", url).stdout)
    assert devices[0]["live_leases"] == 1

    check = run("fsck", "--database-url", ledger_url)
    assert check.returncode == 0 and json.loads(check.stdout)["clean"], check.stdout
    assert run("db", "upgrade", "--database-url", ledger_url).returncode == 0


def test_cli_errors_are_clear(daemon: tuple[str, str]) -> None:
    url, _state = daemon
    bad = run("lease", "release", "nope", "--url", url)
    assert bad.returncode == 1 and json.loads(bad.stderr)["error"] == "UnknownLease"
    bad = run("lease", "acquire", "lots", "--url", url)
    assert bad.returncode == 2 and "size" in bad.stderr
    bad = run("lease", "acquire", "1TiB", "--url", url)
    assert bad.returncode == 1 and json.loads(bad.stderr)["error"] == "LeaseTooLarge"
    down = run("list", "pools", "--url", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and json.loads(down.stderr)["error"] == "TransportError"


def test_config_file_and_missing_config(tmp_path: Path) -> None:
    config = tmp_path / "poold.toml"
    config.write_text(f'state_dir = "{tmp_path / "s"}"\n')
    assert run("db", "upgrade", "--config", str(config)).returncode == 0
    assert (tmp_path / "s" / "ledger.sqlite3").exists()
    missing = run("fsck", "--config", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_discover_prints_the_topology(tmp_path: Path) -> None:
    from drivers.topology import scan
    from poold.inventory.discovery import discover_json
    from tests.sysfs_trees import extract

    tree = extract("sysfs-e-hmem-kmem", tmp_path) / "sys"
    out = run("discover", "--sysfs-root", str(tree))
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed == json.loads(json.dumps(discover_json(scan(tree))))
    assert {"memdevs", "regions", "dax_regions", "dax_devices", "numa_nodes"} <= printed.keys()
    verdicts = {d["chardev"]: d["leasable"] for d in printed["dax_devices"]}
    assert verdicts == {"dax0.0": False, "dax0.1": False, "dax0.2": True, "dax0.3": True}
    bad = run("discover", "--sysfs-root", str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "not a sysfs tree" in bad.stderr


def test_same_host_clients_use_the_unix_sockets(daemon: tuple[str, str], tmp_path: Path) -> None:
    """`poold serve` also answers HTTP on <runtime_dir>/api.sock and passes lease descriptors
    on fd.sock (runtime_dir defaults to the state directory)."""
    from poold.client import PooldClient

    state = tmp_path / "state"
    with PooldClient(uds=str(state / "api.sock"), fd_socket=str(state / "fd.sock")) as client:
        assert client.pools()[0].size == 256 * MiB
        with client.lease(2 * MiB) as lease, lease.map() as mapping:
            assert mapping.via == "fd"
            mapping.buffer[:4] = b"unix"
        # No token: the daemon knows the caller by its uid, and this test's user is an admin
        # by the default peer_admins (root) or as the daemon's own user.
        released = next(e for e in client.events(lease_id=lease.id)
                        if e.kind == "lease.released")
        assert released.actor == f"admin:uid{os.geteuid()}"
