"""Control-plane throughput: lease grant + release requests/s, poold beside etcd, in one run.

Each client is a separate process with one keep-alive HTTP/1.1 connection (http.client, the
lighter client: httpx halves the rate), looping grant -> release for a fixed time. Reported:
requests/s (grants and releases both count) and p99 latency per request, for 1 and 16 clients,
against poold on SQLite (synchronous=FULL, like etcd's fsync per commit), poold on PostgreSQL
(when reachable) and etcd's JSON gateway (when `etcd` is installed: Debian's etcd-server).

Also reported: the server process's CPU time per request (user + system, from /proc), which
depends far less than requests/s on whatever else the machine is doing, and the load average
before the run. Servers and clients share the machine's CPUs.

    python bench/control_plane.py [--seconds 6] [--clients 1 16] [--out docs/bench-control-plane.md]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("POOLD_BENCH_POSTGRES_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(port: int, path: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", path)
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not come up")


# --- the two protocols -----------------------------------------------------------------------

def poold_pair(conn: http.client.HTTPConnection) -> None:
    # The admin credential of the daemon under test (poold_server puts it in the environment,
    # which the forked client processes inherit): auth is part of what a request costs.
    auth = {"authorization": f"Bearer {os.environ['POOLD_TOKEN']}"}
    conn.request("POST", "/v1/leases", body=b'{"size": 2097152, "ttl_s": 60}',
                 headers={"content-type": "application/json", **auth})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 201, body
    conn.request("DELETE", f"/v1/leases/{json.loads(body)['id']}", headers=auth)
    response = conn.getresponse()
    assert response.status == 200, response.read()
    response.read()


def etcd_pair(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/v3/lease/grant", body=b'{"TTL": 60}')
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, body
    conn.request("POST", "/v3/lease/revoke", body=json.dumps({"ID": json.loads(body)["ID"]}))
    response = conn.getresponse()
    response.read()
    assert response.status == 200


PAIRS: dict[str, Callable[[http.client.HTTPConnection], None]] = {
    "poold": poold_pair, "etcd": etcd_pair,
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(protocol: str, port: int, seconds: float, start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    pair = PAIRS[protocol]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.time() < start:
        time.sleep(0.001)
    latencies: list[float] = []
    end = start + seconds
    while (now := time.perf_counter()) and time.time() < end:
        pair(conn)
        latencies.append((time.perf_counter() - now) / 2)  # per request
    out.put(latencies)


Point = tuple[float, float, float]  # requests/s, p99 ms, server CPU ms per request


def measure(protocol: str, port: int, pid: int, clients: int, seconds: float) -> Point:
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    start = time.time() + 0.5
    procs = [mp.Process(target=client, args=(protocol, port, seconds, start, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start - time.time()))
    cpu = cpu_seconds(pid)
    time.sleep(max(0.0, start + seconds - time.time()))
    cpu = cpu_seconds(pid) - cpu
    latencies = [x for _ in procs for x in out.get(timeout=seconds + 60)]
    for p in procs:
        p.join()
    requests = 2 * len(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return requests / seconds, p99 * 1000, cpu / requests * 1000


# --- servers -----------------------------------------------------------------------------------

@contextmanager
def poold_server(database_url: str | None, scrub: bool = False) -> Iterator[tuple[int, int]]:
    """Yields (port, pid) of a serving poold. Scrubbing off unless asked: the control plane
    alone; with it on (the default of a real daemon), each release also has its 2 MiB zeroed by
    the daemon before the bytes can be granted again."""
    with tempfile.TemporaryDirectory() as state:
        port = free_port()
        env = {**os.environ, "POOLD_HOST_ID": "bench", "POOLD_FD_STORE": "none",
               "POOLD_LOG_LEVEL": "WARNING",
               "POOLD_UNSCRUBBED_POOLS": "[]" if scrub else '["default"]'}
        args = [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", state,
                "--emulate", "1GiB", "--listen", f"127.0.0.1:{port}"]
        if database_url:
            args += ["--database-url", database_url]
        proc = subprocess.Popen(args, env=env, cwd=ROOT)
        try:
            wait_http(port, "/healthz", proc)
            os.environ["POOLD_TOKEN"] = (Path(state) / "admin.token").read_text().strip()
            yield port, proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


@contextmanager
def etcd_server() -> Iterator[tuple[int, int]]:
    """Yields (port, pid) of a serving etcd."""
    with tempfile.TemporaryDirectory() as data:
        port, peer = free_port(), free_port()
        proc = subprocess.Popen(
            ["etcd", "--data-dir", data, "--listen-client-urls", f"http://127.0.0.1:{port}",
             "--advertise-client-urls", f"http://127.0.0.1:{port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(port, "/version", proc)
            yield port, proc.pid
        finally:
            proc.terminate()
            proc.wait(30)


def postgres_reachable() -> bool:
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:
        return False


def pg_schema_url() -> str:
    """A fresh schema for the run so the benchmark never touches other data."""
    import sqlalchemy

    schema = f"bench_{os.getpid()}"
    engine = sqlalchemy.create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        conn.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
        conn.execute(sqlalchemy.text("CREATE EXTENSION IF NOT EXISTS btree_gist "
                                     "WITH SCHEMA public"))
    engine.dispose()
    return f"{PG_URL}?options=-csearch_path%3D{schema},public"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-control-plane.md")
    args = parser.parse_args()

    targets: list[tuple[str, str, Callable[[], object]]] = [
        ("poold, SQLite (FULL)", "poold", lambda: poold_server(None)),
        ("poold, SQLite (FULL), scrub on release", "poold",
         lambda: poold_server(None, scrub=True))]
    if postgres_reachable():
        targets.append(("poold, PostgreSQL", "poold", lambda: poold_server(pg_schema_url())))
    if shutil.which("etcd"):
        targets.append(("etcd (JSON gateway)", "etcd", etcd_server))

    load = os.getloadavg()
    rows: dict[str, dict[int, Point]] = {}
    for name, protocol, server in targets:
        with server() as (port, pid):  # type: ignore[attr-defined]
            measure(protocol, port, pid, 1, 1.0)  # warm-up
            rows[name] = {n: measure(protocol, port, pid, n, args.seconds) for n in args.clients}
            print(name, {n: f"{r:.0f} req/s, p99 {p:.1f} ms, server CPU {c:.2f} ms/req"
                         for n, (r, p, c) in rows[name].items()})

    write_table(args.out, rows, args.clients, args.seconds, load)


def write_table(out: Path, rows: dict[str, dict[int, Point]], clients: list[int],
                seconds: float, load: tuple[float, float, float]) -> None:
    etcd = rows.get("etcd (JSON gateway)")
    header = "| server | " + " | ".join(f"{n} client(s): req/s (p99 ms)" for n in clients)
    header += " | " + " | ".join(f"ratio to etcd at {n}" for n in clients) if etcd else ""
    header += " | " + " | ".join(f"server CPU ms/req at {n}" for n in clients) + " |"
    lines = [
        "# Control plane: lease grant + release, requests/s", "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, load average "
        f"{load[0]:.2f} before the run), {seconds:.0f} s per point, one keep-alive connection "
        "per client process (`python bench/control_plane.py`). Server CPU is the server "
        "process's user + system time per request over the same window (for poold on "
        "PostgreSQL, without the database server's own CPU). poold runs as shipped but for "
        "scrubbing: every request carries its admin bearer token; the pool does not scrub on "
        "release, so this is the control plane alone, except in the row that says so (each "
        "release then also zeroes its 2 MiB before reuse; a grant refused because the zeroing "
        "fell behind would stop the run).", "",
        header, "|" + "---|" * (1 + len(clients) * (3 if etcd else 2)),
    ]
    for name, by_clients in rows.items():
        cells = [f"{by_clients[n][0]:.0f} ({by_clients[n][1]:.1f})" for n in clients]
        if etcd:
            cells += [f"{by_clients[n][0] / etcd[n][0]:.2f}" for n in clients]
        cells += [f"{by_clients[n][2]:.2f}" for n in clients]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
