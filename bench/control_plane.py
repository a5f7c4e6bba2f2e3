"""Control-plane throughput: lease grant + release requests/s, poold beside etcd, in one run.

Each client is a separate process with one keep-alive HTTP/1.1 connection (http.client, the
lighter client: httpx halves the rate), looping grant -> release for a fixed time. Reported:
requests/s (grants and releases both count) and p99 latency per request, for 1 and 16 clients,
against poold on SQLite (synchronous=FULL, like etcd's fsync per commit), poold on PostgreSQL
(when reachable) and etcd's JSON gateway (when `etcd` is installed: Debian's etcd-server).

A second table times keepalives of many leases at once: a poold client session holding 64 leases
renewed by one `POST /v1/sessions/{id}/keepalive` (one ledger statement renews all of them),
beside an etcd lease with 64 keys attached renewed by one `POST /v3/lease/keepalive`.

Also reported: the server process's CPU time per request (user + system, from /proc), which
depends far less than requests/s on whatever else the machine is doing, the client processes'
own, and the load average before the run. Servers and clients share the machine's CPUs: what a
request costs both bounds the rate the machine can carry at all (the last table).

    python bench/control_plane.py [--seconds 6] [--clients 1 16] [--rounds 3]
                                  [--out docs/bench-control-plane.md]
"""

from __future__ import annotations

import argparse
import base64
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
from typing import Any

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

# Keepalives: leases (keys) renewed by one request.
HELD = 64


def _json_post(conn: http.client.HTTPConnection, path: str, body: object,
               headers: dict[str, str] | None = None) -> dict[str, object]:
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    payload = response.read()
    assert response.status in (200, 201), payload
    found: dict[str, object] = json.loads(payload)
    return found


def poold_session(conn: http.client.HTTPConnection) -> Callable[[], None]:
    """A session holding HELD leases; returns one keepalive of it (which must renew them all)."""
    auth = {"authorization": f"Bearer {os.environ['POOLD_TOKEN']}"}
    session = _json_post(conn, "/v1/sessions", {"ttl_s": 60}, auth)["id"]
    for _ in range(HELD):
        _json_post(conn, "/v1/leases", {"size": 2 << 20, "session_id": session}, auth)
    path = f"/v1/sessions/{session}/keepalive"

    def keepalive() -> None:
        conn.request("POST", path, headers=auth)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200 and body.count(b",") >= HELD - 1, body
    return keepalive


def etcd_lease(conn: http.client.HTTPConnection) -> Callable[[], None]:
    """An etcd lease with HELD keys attached; returns one keepalive of it."""
    lease = _json_post(conn, "/v3/lease/grant", {"TTL": 60})["ID"]
    for i in range(HELD):
        key = base64.b64encode(f"bench/{os.getpid()}/{i}".encode()).decode()
        _json_post(conn, "/v3/kv/put", {"key": key, "value": "dg==", "lease": lease})
    body = json.dumps({"ID": lease}).encode()

    def keepalive() -> None:
        conn.request("POST", "/v3/lease/keepalive", body=body)
        response = conn.getresponse()
        answer = response.read()
        assert response.status == 200 and b'"TTL"' in answer, answer
    return keepalive


KEEPALIVES: dict[str, Callable[[http.client.HTTPConnection], Callable[[], None]]] = {
    "poold-session": poold_session, "etcd-lease": etcd_lease,
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(protocol: str, port: int, seconds: float, ready: Any, out: mp.Queue) -> None:  # type: ignore[type-arg]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    if protocol in KEEPALIVES:  # one request an operation, after holding what it renews
        operation, per_operation = KEEPALIVES[protocol](conn), 1
        # Waiting for the others to take their leases may leave the connection idle past the
        # server's keep-alive timeout (uvicorn's: 5 s), which closes it: the first timed
        # request opens a new one (http.client reconnects a closed connection).
        conn.close()
    else:  # a grant and a release
        operation, per_operation = (lambda: PAIRS[protocol](conn)), 2
    ready.wait()  # every client set up: the timed window starts for all at once
    latencies: list[float] = []
    cpu = time.process_time()
    end = time.time() + seconds
    while (now := time.perf_counter()) and time.time() < end:
        operation()
        latencies += [(time.perf_counter() - now) / per_operation] * per_operation
    out.put((latencies, time.process_time() - cpu))


# requests/s, p99 ms, server CPU ms per request, the clients' CPU ms per request
Point = tuple[float, float, float, float]
# poold's writer: commands per batch, ms per batch, shares of wall time busy, on a CPU and
# waiting for a CPU (its thread's), and its thread's CPU ms per command
Batches = tuple[float, float, float, float, float, float]


def writer_counters(port: int) -> tuple[float, ...]:
    """poold's writer so far, from its /metrics: batches, commands, seconds in batches."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    found = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
             if line.startswith("poold_ledger_batch")}
    return (found["poold_ledger_batches_total"], found["poold_ledger_batch_commands_total"],
            found["poold_ledger_batch_seconds_total"])


def measure_server(protocol: str, port: int, pid: int, clients: int, seconds: float
                   ) -> tuple[Point, Batches | None]:
    """`measure`, and for poold what its writer did over the same window: its group commit,
    and where its thread's time went."""
    if not protocol.startswith("poold"):
        return measure(protocol, port, pid, clients, seconds), None
    counted: list[tuple[float, ...]] = []
    point = measure(protocol, port, pid, clients, seconds,
                    lambda: counted.append(writer_counters(port) + writer_thread_times(pid)))
    before, after = counted
    batches, commands, busy, on_cpu, cpu_wait = (b - a for a, b in zip(before, after,
                                                                       strict=True))
    return point, (commands / batches, busy / batches * 1000, busy / seconds, on_cpu / seconds,
                   cpu_wait / seconds, on_cpu / commands * 1000)


def writer_thread_times(pid: int) -> tuple[float, float]:
    """Seconds poold's ledger writer thread (its kernel name, poold.osthread) has spent on a
    CPU and runnable waiting for one (/proc schedstat). What it was busy beyond both, it spent
    blocked: its fsync, or waiting to take the GIL back after a sqlite3 call released it."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == "ledger-writer":
                running, waiting, _ = (task / "schedstat").read_text().split()
                return int(running) / 1e9, int(waiting) / 1e9
        except OSError:
            continue
    raise RuntimeError("no ledger-writer thread in the server")


def measure(protocol: str, port: int, pid: int, clients: int, seconds: float,
            probe: Callable[[], None] | None = None) -> Point:
    """One point; `probe`, when given, is called at the window's start and end (beside the
    reads of the server's CPU time, after the clients' setup)."""
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    ready = mp.Barrier(clients + 1)  # the clients, set up, and this process
    procs = [mp.Process(target=client, args=(protocol, port, seconds, ready, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    ready.wait(timeout=120)
    cpu = cpu_seconds(pid)
    if probe is not None:
        probe()
    time.sleep(seconds)
    cpu = cpu_seconds(pid) - cpu
    if probe is not None:
        probe()
    answers = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    latencies = [x for got, _ in answers for x in got]
    requests = len(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    clients_cpu = sum(spent for _, spent in answers)
    return requests / seconds, p99 * 1000, cpu / requests * 1000, clients_cpu / requests * 1000


# --- servers -----------------------------------------------------------------------------------

@contextmanager
def poold_server(database_url: str | None, scrub: bool = False,
                 emulate: str = "1GiB") -> Iterator[tuple[int, int]]:
    """Yields (port, pid) of a serving poold. Scrubbing off unless asked: the control plane
    alone; with it on (the default of a real daemon), each release also has its 2 MiB zeroed by
    the daemon before the bytes can be granted again."""
    with tempfile.TemporaryDirectory() as state:
        port = free_port()
        env = {**os.environ, "POOLD_HOST_ID": "bench", "POOLD_FD_STORE": "none",
               "POOLD_LOG_LEVEL": "WARNING",
               "POOLD_UNSCRUBBED_POOLS": "[]" if scrub else '["default"]'}
        args = [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", state,
                "--emulate", emulate, "--listen", f"127.0.0.1:{port}"]
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
    parser.add_argument("--rounds", type=int, default=3,
                        help="every server this many times, in turn (medians reported)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-control-plane.md")
    args = parser.parse_args()

    targets: list[tuple[str, str, Callable[[], object]]] = [
        ("poold, SQLite (FULL)", "poold", lambda: poold_server(None)),
        ("poold, SQLite (FULL), scrub on release", "poold",
         lambda: poold_server(None, scrub=True))]
    if postgres_reachable():
        targets.append(("poold, PostgreSQL", "poold", lambda: poold_server(pg_schema_url())))
    if shutil.which("etcd"):
        targets.append((ETCD, "etcd", etcd_server))
    # Keepalives: every client holds HELD leases of 2 MiB (4 GiB for 16 clients, never touched).
    renewals: list[tuple[str, str, Callable[[], object]]] = [
        (f"poold, SQLite (FULL): session keepalive renewing {HELD} leases", "poold-session",
         lambda: poold_server(None, emulate="4GiB"))]
    if shutil.which("etcd"):
        renewals.append((ETCD_KEEPALIVE, "etcd-lease", etcd_server))

    load = os.getloadavg()
    rows: Rounds = {}
    kept: Rounds = {}
    commits: Commits = {}
    for round_ in range(args.rounds):  # servers in turn, so a slow spell of the machine
        for name, protocol, server in targets:  # falls on all of them alike
            with server() as (port, pid):  # type: ignore[attr-defined]
                measure(protocol, port, pid, 1, 1.0)  # warm-up
                both = {n: measure_server(protocol, port, pid, n, args.seconds)
                        for n in args.clients}
            _keep(round_, name, both, rows, commits)
        for name, protocol, server in renewals:  # a fresh server each: the clients hold leases
            both = {}
            for n in args.clients:
                with server() as (port, pid):  # type: ignore[attr-defined]
                    both[n] = measure_server(protocol, port, pid, n, args.seconds)
            _keep(round_, name, both, kept, commits)

    write_table(args.out, rows, args.clients, args.seconds, args.rounds, load, kept, commits)


ETCD = "etcd (JSON gateway)"
ETCD_KEEPALIVE = f"etcd (JSON gateway): lease keepalive, {HELD} keys attached"
Rounds = dict[str, list[dict[int, Point]]]  # server -> per round, clients -> point


Commits = dict[str, list[dict[int, Batches]]]  # poold server -> per round, clients -> batches


def _keep(round_: int, name: str, both: dict[int, tuple[Point, Batches | None]],
          rows: Rounds, commits: Commits) -> None:
    """One round of one server: its points into `rows`, poold's group commit into `commits`."""
    got = {n: point for n, (point, _) in both.items()}
    rows.setdefault(name, []).append(got)
    batched = {n: batches for n, (_, batches) in both.items() if batches is not None}
    if batched:
        commits.setdefault(name, []).append(batched)
    _print(round_, name, got)


def _print(round_: int, name: str, got: dict[int, Point]) -> None:
    print(f"round {round_ + 1}:", name, {n: f"{r:.0f} req/s, p99 {p:.1f} ms, server CPU "
                                         f"{c:.2f} ms/req, clients' CPU {k:.2f} ms/req"
                                         for n, (r, p, c, k) in got.items()})


def _medians(rounds: list[dict[int, Point]], clients: list[int]) -> dict[int, Point]:
    """Per client count, the median point of one server's rounds."""
    return {n: _median([got[n] for got in rounds]) for n in clients}


def _median(points: list[Point]) -> Point:
    rate, p99, cpu, clients_cpu = (statistics.median(values)
                                   for values in zip(*points, strict=True))
    return rate, p99, cpu, clients_cpu


def budget_table(rows: Rounds, clients: list[int], etcd: str | None,
                 cpus: int) -> list[str]:
    """What each request cost the whole machine (the server's CPU and its clients', which share
    the CPUs), the rate at which that would fill every CPU, and the share of it reached. Beside
    etcd: the server CPU per request at which this machine could carry etcd's rate, with the
    server's own clients' cost, for more than one client (one client's requests run one step
    after another: their latency, not the CPUs, sets its rate). Medians over the rounds."""
    header = "| server | " + " | ".join(
        f"{n} client(s): server + clients' CPU ms/req; ceiling req/s (reached)" for n in clients)
    many = [n for n in clients if n > 1] if etcd else []
    header += "".join(f" | server CPU ms/req for etcd's rate at {n}" for n in many)
    lines = [header + " |", "|" + "---|" * (1 + len(clients) + len(many))]
    theirs = _medians(rows[etcd], many) if etcd else {}
    for name, rounds in rows.items():
        median = _medians(rounds, clients)
        cells = []
        for n in clients:
            rate, _, server, own_clients = median[n]
            ceiling = cpus * 1000 / (server + own_clients)
            cells.append(f"{server:.2f} + {own_clients:.2f}; {ceiling:.0f} "
                         f"({rate / ceiling:.0%})")
        cells += [f"{cpus * 1000 / theirs[n][0] - median[n][3]:.2f}" for n in many]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def table(rows: Rounds, clients: list[int], etcd: str | None) -> list[str]:
    """Medians over the rounds; a ratio to etcd is the median of each round's own ratio (the
    two measured minutes apart), with the lowest and highest."""
    header = "| server | " + " | ".join(f"{n} client(s): req/s (p99 ms)" for n in clients)
    if etcd:
        header += " | " + " | ".join(f"ratio to etcd at {n} (range)" for n in clients)
    header += " | " + " | ".join(f"server CPU ms/req at {n}" for n in clients) + " |"
    lines = [header, "|" + "---|" * (1 + len(clients) * (3 if etcd else 2))]
    for name, rounds in rows.items():
        median = _medians(rounds, clients)
        cells = [f"{median[n][0]:.0f} ({median[n][1]:.1f})" for n in clients]
        if etcd:
            for n in clients:
                ratios = [got[n][0] / theirs[n][0] for got, theirs in zip(rounds, rows[etcd],
                                                                            strict=True)]
                cells.append(f"{statistics.median(ratios):.2f} "
                             f"({min(ratios):.2f}-{max(ratios):.2f})")
        cells += [f"{median[n][2]:.2f}" for n in clients]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def commit_table(commits: Commits, clients: list[int]) -> list[str]:
    """Medians over the rounds of poold's group commit, read from its writer's counters, and of
    where the writer thread's time went."""
    lines = ["| server | " + " | ".join(f"{n} client(s): commands per batch, ms per batch; "
                                        f"writer busy / on a CPU / waiting for a CPU; "
                                        f"its CPU ms per command"
                                        for n in clients) + " |",
             "|" + "---|" * (1 + len(clients))]
    for name, rounds in commits.items():
        cells = []
        for n in clients:
            size, per_batch, busy, on_cpu, cpu_wait, per_command = (
                statistics.median(v) for v in zip(*(got[n] for got in rounds), strict=True))
            cells.append(f"{size:.1f}, {per_batch:.2f}; {busy:.2f} / {on_cpu:.2f} / "
                         f"{cpu_wait:.2f}; {per_command:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def write_table(out: Path, rows: Rounds, clients: list[int], seconds: float, rounds: int,
                load: tuple[float, float, float], kept: Rounds, commits: Commits) -> None:
    lines = [
        "# Control plane: lease grant + release, requests/s", "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, load average "
        f"{load[0]:.2f} before the run), {seconds:.0f} s per point, one keep-alive connection "
        f"per client process (`python bench/control_plane.py --rounds {rounds}`). Each server "
        f"ran {rounds} times, the servers in turn; the figures are medians of the rounds "
        "(single runs of one server on this machine differ by up to a third). Server CPU is "
        "the server process's user + system time per request over the same window (for poold "
        "on PostgreSQL, without the database server's own CPU). poold runs as shipped but for "
        "scrubbing: every request carries its admin bearer token; the pool does not scrub on "
        "release, so this is the control plane alone, except in the row that says so (each "
        "release then also zeroes its 2 MiB before reuse; a grant refused because the zeroing "
        "fell behind would stop the run).", "",
        *table(rows, clients, ETCD if ETCD in rows else None),
        "", "## poold's group commit", "",
        "From the writer's counters in `/metrics` (`poold_ledger_batches_total`, "
        "`poold_ledger_batch_commands_total`, `poold_ledger_batch_seconds_total`) over each "
        "point's window: how many requests one transaction (one fsync) acknowledged, and how "
        "long the single writer was busy with it. Then the writer's share of the window's wall "
        "time busy with batches, and its thread's on a CPU and runnable but waiting for one "
        "(`/proc/<pid>/task/*/schedstat` of the thread the kernel knows as `ledger-writer`): "
        "busy beyond both, it was blocked, on its fsync or taking the GIL back after each "
        "sqlite3 call, which releases it. Last, the writer thread's CPU per command: what of "
        "the server's CPU per request the ledger's side costs (the rest is HTTP, auth, the "
        "lease's memory and the hand-overs).", "",
        *commit_table(commits, clients),
        "", "## What a request costs the machine", "",
        f"The clients run on the same {os.cpu_count()} CPUs as the server, so a request's cost "
        "to the machine is the server's CPU and its client's (user + system time of the client "
        "processes over the window). At that cost the CPUs are full at the ceiling below; no "
        "server reaches it (a single writer, the GIL and wake-ups leave CPUs idle), but none can "
        "pass it. The last columns: the server CPU per request at which this machine could "
        "carry etcd's rate at all, given what the server's own clients spend per request (for "
        "more than one client: one client's requests run one step after another, so their "
        "latency, not the CPUs, sets its rate).", "",
        *budget_table(rows, clients, ETCD if ETCD in rows else None, os.cpu_count() or 1),
    ]
    if kept:
        lines += [
            "", "## Keepalives of many leases at once", "",
            f"Each client first holds {HELD} leases (poold: 2 MiB leases in one client session; "
            f"etcd: one lease with {HELD} keys attached), then renews them all with one request "
            "in a loop: a poold session keepalive (one ledger statement renews every lease in "
            "the session, one event) beside etcd's lease keepalive. A fresh server for each "
            "client count.", "",
            *table(kept, clients, ETCD_KEEPALIVE if ETCD_KEEPALIVE in kept else None),
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
