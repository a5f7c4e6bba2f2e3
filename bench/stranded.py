"""Stranded capacity: one demand trace replayed over HTTP against real `poold serve` processes,
one per host, sharing one emulated device through PostgreSQL, and against the same poold run as
a static per-host partition of the same capacity (each host its own unshared device of
capacity / hosts), on the same trace and time scale.

The trace: each host's demand rises and falls on its own phase, so the busiest host changes over
time while the total stays near the capacity; sizes are mixed; lifetimes are exponential; a
fraction of the leases is abandoned (never released, never renewed: they expire). One client
thread per host replays that host's grants and releases at their times.

A refusal (507 NoCapacity) is judged from the ledger's own audit log. Every lease's extent comes
from its `lease.granted` event; its hold is bounded by what the ledger recorded and what the
client saw: it may have held bytes from max(granted event, request sent) until min(expires_at,
release acknowledged), and certainly held them from the grant's answer until min(expires_at, end
event). Past its expires_at a lease's bytes count as idle (DESIGN.md: what an expired lease
holds is reclaimed before a refusal). The refusal is *stranded* when some device had a run of
the request's size that no lease may have held at any instant from the request's sending to its
answer: whatever instant the ledger refused at, idle capacity could have served it. It is
*borderline* when such a run existed at some instant of the round trip only (a race with another
host's grant or release, milliseconds wide).

Run: python bench/stranded.py [--database-url URL] [--out docs] (about three minutes): writes
docs/bench-stranded.md and, with matplotlib installed, docs/bench-stranded.png.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, func, make_url, select, text

from poold import db

MiB = 1 << 20
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
END_KINDS = ("lease.released", "lease.expired", "lease.lost", "lease.revoked")
START_TIMEOUT_S = 60.0
# A lease that ended without the client hearing so (a release whose answer was lost) may have
# held its bytes until its end event committed: that event's transaction began at its `at`, and
# a ledger transaction of this bench takes milliseconds.
END_SLACK_S = 1.0
SIDES = {"poold": "poold (shared)", "static": "static partition"}


@dataclass(frozen=True)
class Shape:
    hosts: int = 4
    capacity: int = 1024 * MiB
    steps: int = 400
    step_s: float = 0.2
    sizes: tuple[int, ...] = tuple(n * MiB for n in (2, 4, 8, 16, 32, 64))
    mean_life: float = 20.0  # steps
    load: float = 0.9  # of the capacity, on average
    abandoned: float = 0.1  # of the leases: never released, they expire
    seed: int = 7

    @property
    def claim_slice(self) -> int:
        return self.capacity // 16


FULL = Shape()
# What the suite runs (tests/bench/test_stranded.py): the same code, a trace of 8 s a side.
SHORT = Shape(hosts=3, capacity=192 * MiB, steps=40, sizes=tuple(n * MiB for n in (2, 4, 8, 16)),
              mean_life=10.0)
# The poold under test, the same on both sides: claims of capacity/16, idle claims given back
# after 5 s, a reaper pass every 0.25 s, no scrubbing (zeroing would hold released bytes a few
# ms, neither leased nor idle; its cost is the data-path bench's concern).
POOLD_ENV = {"POOLD_WATCH_UDEV": "false", "POOLD_DISCOVER_DAX": "false",
             "POOLD_CLAIM_IDLE_S": "5", "POOLD_REAP_INTERVAL_S": "0.25",
             "POOLD_UNSCRUBBED_POOLS": '["default"]', "POOLD_LOG_LEVEL": "WARNING"}


@dataclass(frozen=True)
class Request:
    step: int
    host: int
    size: int
    lifetime: int  # steps
    abandoned: bool


def trace(shape: Shape) -> list[Request]:
    """Each host's rate follows a raised sine of period steps/2 on its own phase (so the busiest
    host changes four times a run), scaled so the trace asks for `load` of the capacity on
    average."""
    rng = random.Random(shape.seed)
    mean_size = sum(shape.sizes) / len(shape.sizes)
    requests = []
    for step in range(shape.steps):
        for host in range(shape.hosts):
            phase = 2 * math.pi * (step / (shape.steps / 2) + host / shape.hosts)
            weight = 4 * max(0.0, math.sin(phase)) ** 2  # mean 1 per host, up to 4
            rate = shape.load * shape.capacity / mean_size / shape.mean_life / shape.hosts
            for _ in range(_poisson(rng, rate * weight)):
                life = max(1, round(rng.expovariate(1 / shape.mean_life)))
                requests.append(Request(step, host, rng.choice(shape.sizes), life,
                                        rng.random() < shape.abandoned))
    return requests


def _poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


@dataclass
class Sent:
    """One request as the client saw it: wall-clock times (the database's clock, see
    clock_offset), the answer, and the lease it got."""
    host: int
    size: int
    sent: float
    answered: float
    status: int
    error: str | None = None
    lease: dict[str, Any] | None = None
    late_s: float = 0.0  # behind the trace's schedule when sent


@dataclass
class Hold:
    device_id: int
    offset: int
    length: int
    begin_lb: float  # may hold bytes from here ...
    end_ub: float  # ... until here
    begin_ub: float  # certainly holds them from here ...
    end_lb: float  # ... until here

    def may_hold(self, lo: float, hi: float) -> bool:
        return self.begin_lb < hi and self.end_ub > lo

    def holds(self, at: float) -> bool:
        return self.begin_ub <= at < self.end_lb


@dataclass
class Result:
    side: str
    shape: Shape
    requests: int = 0
    granted: int = 0
    refusals: int = 0
    stranded: int = 0
    borderline: int = 0
    fragmented: int = 0  # not stranded, but that many bytes were idle on one device, in pieces
    errors: list[str] = field(default_factory=list)
    overlaps: int = 0  # reconstructed holds overlapping in bytes and time: must be 0
    max_late_s: float = 0.0
    latencies: list[float] = field(default_factory=list)  # of grants, seconds
    utilisation: list[float] = field(default_factory=list)  # per step
    refused_at: list[tuple[int, bool]] = field(default_factory=list)  # (step, stranded)


@contextlib.contextmanager
def ledger_schema(base_url: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema on `base_url`'s database, dropped after."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(base_url, pool_pre_ping=True)  # the server may restart meanwhile
    with engine.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA public"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema},public"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


def clock_offset(url: str) -> tuple[float, float]:
    """(database clock - this host's wall clock, uncertainty) in seconds, from the tightest of a
    few round trips."""
    engine = create_engine(url)
    best = (0.0, math.inf)
    try:
        with engine.connect() as conn:
            for _ in range(5):
                before = time.time()
                db_now = conn.execute(select(func.clock_timestamp())).scalar_one()
                after = time.time()
                if (after - before) / 2 < best[1]:
                    best = (db_now.timestamp() - (before + after) / 2, (after - before) / 2)
    finally:
        engine.dispose()
    return best


@dataclass
class Host:
    process: subprocess.Popen[bytes]
    url: str
    state_dir: Path
    log: Path
    token: str = ""


def start_hosts(side: str, shape: Shape, url: str, workdir: Path) -> list[Host]:
    """One `poold serve` per host: on the shared side all name one ledger device (the same
    emulate_uid); on the static side each has its own capacity/hosts."""
    shared = side == "poold"
    db.upgrade(url)  # here, once, so that every host can start at the same time
    hosts = []
    for h in range(shape.hosts):
        port = free_port()
        state = workdir / f"{side}-host-{h}"
        env = {**os.environ, **POOLD_ENV, "POOLD_FD_STORE": "none",
               "POOLD_CLAIM_SLICE": str(shape.claim_slice)}
        if shared:
            env["POOLD_EMULATE_UID"] = "bench:shared"
        log = workdir / f"{side}-host-{h}.log"
        size = shape.capacity if shared else shape.capacity // shape.hosts
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", str(state),
                 "--database-url", url, "--emulate", str(size), "--listen",
                 f"127.0.0.1:{port}", "--host-id", f"{side}-{h}"],
                stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        hosts.append(Host(process, f"http://127.0.0.1:{port}", state, log))
    for host in hosts:
        _wait_healthy(host)
    return hosts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(host: Host) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if host.process.poll() is not None:
            raise RuntimeError(f"poold exited: {host.log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError, OSError):
            if httpx.get(f"{host.url}/healthz", timeout=1.0).status_code == 200:
                host.token = (host.state_dir / "admin.token").read_text().strip()
                return
        time.sleep(0.1)
    raise RuntimeError(f"poold not healthy after {START_TIMEOUT_S}s: {host.log.read_text()}")


def stop_hosts(hosts: list[Host]) -> None:
    for host in hosts:
        host.process.terminate()
    for host in hosts:
        try:
            host.process.wait(10)
        except subprocess.TimeoutExpired:
            host.process.kill()
            host.process.wait(10)


@dataclass
class Replayed:
    """What the clients saw: every grant's answer, when each release was acknowledged (lease id
    -> database clock), and what failed otherwise."""
    start: float  # the trace's step 0, database clock
    sent: list[Sent] = field(default_factory=list)
    released: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def replay(hosts: list[Host], shape: Shape, requests: list[Request], offset: float
           ) -> Replayed:
    """Every host's part of the trace at its times, one client thread per host."""
    start = time.time() + 0.5
    seen = Replayed(start + offset)
    clients = [_Client(h, host, shape, requests, start, offset, seen)
               for h, host in enumerate(hosts)]
    threads = [threading.Thread(target=c.run) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen


class _Client:
    """One host's client: its grants and releases in time order, a step's releases first."""

    def __init__(self, h: int, host: Host, shape: Shape, requests: list[Request], start: float,
                 offset: float, seen: Replayed) -> None:
        self.h, self.shape, self.requests, self.seen = h, shape, requests, seen
        self.start, self.offset = start, offset
        self.http = httpx.Client(base_url=host.url, timeout=30.0,
                                 headers={"Authorization": f"Bearer {host.token}"})
        # (step, 0 release | 1 grant, request index)
        self.queue = [(r.step, 1, i) for i, r in enumerate(requests) if r.host == h]
        heapq.heapify(self.queue)
        self.leases: dict[int, str] = {}

    def run(self) -> None:
        with self.http:
            while self.queue:
                step, order, i = heapq.heappop(self.queue)
                due = self.start + step * self.shape.step_s
                time.sleep(max(0.0, due - time.time()))
                try:
                    if order == 0:
                        self._release(i)
                    else:
                        self._grant(i, step, due)
                except httpx.HTTPError as exc:  # recorded: the run is then judged failed
                    with self.seen.lock:
                        self.seen.errors.append(f"host {self.h}: {type(exc).__name__}: {exc}")

    def _grant(self, i: int, step: int, due: float) -> None:
        r = self.requests[i]
        ttl = math.ceil(r.lifetime * self.shape.step_s) if r.abandoned else 3600
        before = time.time()
        response = self.http.post("/v1/leases", json={"size": r.size, "ttl_s": ttl})
        after = time.time()
        body = response.json()
        outcome = Sent(self.h, r.size, before + self.offset, after + self.offset,
                       response.status_code, late_s=before - due)
        if response.status_code == 201:
            outcome.lease = body
            if not r.abandoned and step + r.lifetime < self.shape.steps:  # after it: not judged
                self.leases[i] = body["id"]
                heapq.heappush(self.queue, (step + r.lifetime, 0, i))
        else:
            outcome.error = str(body.get("error"))
        with self.seen.lock:
            self.seen.sent.append(outcome)

    def _release(self, i: int) -> None:
        response = self.http.delete(f"/v1/leases/{self.leases[i]}")
        with self.seen.lock:
            if response.status_code == 200:
                self.seen.released[self.leases[i]] = time.time() + self.offset
            else:
                self.seen.errors.append(f"host {self.h}: release {response.status_code}")


def ledger_holds(host: Host, seen: Replayed) -> list[Hold]:
    """Every lease the ledger recorded, with its hold bounded as the module docstring says."""
    events: dict[str, list[dict[str, Any]]] = {}
    headers = {"Authorization": f"Bearer {host.token}"}
    for kind in ("lease.granted", "lease.renewed", *END_KINDS):
        found = httpx.get(f"{host.url}/v1/events", params={"kind": kind, "limit": 10_000},
                          headers=headers, timeout=60).raise_for_status().json()
        if len(found) == 10_000:
            raise RuntimeError(f"over 10,000 {kind} events: shorten the trace")
        for event in found:
            events.setdefault(event["lease_id"], []).append(event)
    answered = {s.lease["id"]: s for s in seen.sent if s.lease is not None}
    holds = []
    for lease_id, found in events.items():
        # The first event of each kind (newest first in, so the oldest is written last).
        by_kind = {e["kind"]: e for e in sorted(found, key=lambda e: -e["id"])}
        granted = by_kind["lease.granted"]
        at = _ts(granted["at"])
        expires = at + granted["details"]["ttl_s"]
        for e in found:
            if e["kind"] == "lease.renewed":
                expires = max(expires, _ts(e["details"]["expires_at"]))
        ends = [_ts(by_kind[k]["at"]) for k in END_KINDS if k in by_kind]
        ended = min(ends) if ends else math.inf
        mine = answered.get(lease_id)
        end_ub = seen.released.get(lease_id, ended + END_SLACK_S if ends else math.inf)
        details = granted["details"]
        holds.append(Hold(
            device_id=granted["device_id"], offset=details["offset"], length=details["length"],
            begin_lb=max(at, mine.sent) if mine else at, end_ub=min(expires, end_ub),
            begin_ub=mine.answered if mine else math.inf, end_lb=min(expires, ended)))
    return holds


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def largest_gap(size: int, extents: list[tuple[int, int]]) -> int:
    """The longest run of a device of `size` bytes that none of (offset, length) covers."""
    best, end = 0, 0
    for offset, length in sorted(extents):
        best = max(best, offset - end)
        end = max(end, offset + length)
    return max(best, size - end)


def judge(result: Result, devices: dict[int, int], holds: list[Hold], seen: Replayed,
          margin: float) -> None:
    """Count refusals, stranded and borderline ones (module docstring; `margin`: how far the
    client's clock may be off the database's), and the utilisation at each step's middle."""
    on: dict[int, list[Hold]] = {d: [] for d in devices}
    for hold in holds:
        on[hold.device_id].append(hold)
    for outcome in seen.sent:
        result.requests += 1
        result.max_late_s = max(result.max_late_s, outcome.late_s)
        result.latencies.append(outcome.answered - outcome.sent)
        if outcome.status == 201:
            result.granted += 1
        elif outcome.status != 507:
            result.errors.append(f"{outcome.status} {outcome.error}")
        else:
            result.refusals += 1
            lo, hi = outcome.sent - margin, outcome.answered + margin
            stranded = any(_fits(outcome.size, size, [h for h in on[d] if h.may_hold(lo, hi)])
                           for d, size in devices.items())
            result.stranded += stranded
            step = int((outcome.sent - seen.start) / result.shape.step_s)
            result.refused_at.append((step, stranded))
            instants = {lo} | {t for h in holds for t in (h.begin_ub, h.end_lb) if lo < t <= hi}
            result.borderline += not stranded and any(
                _fits(outcome.size, size, [h for h in on[d] if h.holds(t)])
                for t in instants for d, size in devices.items())
            result.fragmented += not stranded and any(
                size - _covered([h for h in on[d] if h.may_hold(lo, hi)]) >= outcome.size
                for d, size in devices.items())
    capacity = sum(devices.values())
    for step in range(result.shape.steps):
        t = seen.start + (step + 0.5) * result.shape.step_s
        result.utilisation.append(sum(h.length for h in holds if h.holds(t)) / capacity)
    result.overlaps = _overlaps(on)


def _fits(wanted: int, size: int, holds: list[Hold]) -> bool:
    return largest_gap(size, [(h.offset, h.length) for h in holds]) >= wanted


def _covered(holds: list[Hold]) -> int:
    """Bytes of the union of the holds' extents."""
    total, end = 0, 0
    for h in sorted(holds, key=lambda h: h.offset):
        total += max(0, h.offset + h.length - max(end, h.offset))
        end = max(end, h.offset + h.length)
    return total


def _overlaps(by_device: dict[int, list[Hold]]) -> int:
    """Pairs of holds that certainly held the same bytes at the same time: a reconstruction that
    finds any is wrong (or the ledger is)."""
    found = 0
    for on in by_device.values():
        on = sorted(on, key=lambda h: h.offset)
        for i, a in enumerate(on):
            for b in on[i + 1:]:
                if b.offset >= a.offset + a.length:
                    break
                if a.begin_ub < b.end_lb and b.begin_ub < a.end_lb:
                    found += 1
    return found


def run_side(side: str, shape: Shape, requests: list[Request], url: str, workdir: Path
             ) -> Result:
    """Start the side's hosts on `url`, replay the trace, judge it from their ledger."""
    workdir.mkdir(parents=True, exist_ok=True)
    hosts = start_hosts(side, shape, url, workdir)
    try:
        offset, uncertainty = clock_offset(url)
        seen = replay(hosts, shape, requests, offset)
        holds = ledger_holds(hosts[0], seen)
        listed = httpx.get(f"{hosts[0].url}/v1/devices", timeout=30,
                           headers={"Authorization": f"Bearer {hosts[0].token}"}).json()
    finally:
        stop_hosts(hosts)
    result = Result(side, shape, errors=list(seen.errors))
    judge(result, {d["id"]: d["size"] for d in listed}, holds, seen, uncertainty)
    return result


def demand(shape: Shape, requests: list[Request]) -> list[float]:
    """What the trace holds at each step if nothing is refused, over the capacity."""
    delta = [0] * (shape.steps + 1)
    for r in requests:
        delta[r.step] += r.size
        delta[min(shape.steps, r.step + r.lifetime)] -= r.size
    out, total = [], 0
    for step in range(shape.steps):
        total += delta[step]
        out.append(total / shape.capacity)
    return out


def plot(results: list[Result], wanted: list[float], path: Path) -> str:
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return "No plot: matplotlib is not installed (`pip install matplotlib`)."
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    shape = results[0].shape
    seconds = [s * shape.step_s for s in range(shape.steps)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(seconds, wanted, color="0.6", linestyle="--", label="demand (nothing refused)")
    for colour, r in zip(("C0", "C1"), results, strict=False):
        top.plot(seconds, r.utilisation, color=colour, label=f"{SIDES[r.side]}: leased")
        refused = [0] * shape.steps
        stranded = [0] * shape.steps
        for step, was_stranded in r.refused_at:
            refused[min(step, shape.steps - 1)] += 1
            stranded[min(step, shape.steps - 1)] += was_stranded
        bottom.plot(seconds, _cumulative(refused), color=colour,
                    label=f"{SIDES[r.side]}: refusals")
        bottom.plot(seconds, _cumulative(stranded), color=colour, linestyle=":", linewidth=3,
                    label=f"{SIDES[r.side]}: stranded")
    top.set_ylabel("fraction of capacity")
    top.set_title(f"{shape.hosts} hosts, {shape.capacity // MiB} MiB, demand moving between hosts")
    top.legend(loc="upper right", fontsize="small")
    bottom.set_ylabel("refusals so far")
    bottom.set_xlabel("time (s)")
    bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"![utilisation and refusals over time]({path.name})"


def _cumulative(values: list[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


def report(results: list[Result], requests: list[Request], out: Path, url: str,
           seconds: float, load: float) -> None:
    shape = results[0].shape
    picture = plot(results, demand(shape, requests), out / "bench-stranded.png")
    rows = "\n".join(
        f"| {SIDES[r.side]} | {r.requests} | {r.granted} | {r.refusals} | **{r.stranded}** | "
        f"{r.borderline} | {r.fragmented} | "
        f"{100 * sum(r.utilisation) / len(r.utilisation):.1f}% | "
        f"{100 * max(r.utilisation):.1f}% | {1000 * statistics.median(r.latencies):.0f} ms | "
        f"{r.max_late_s * 1000:.0f} ms |" for r in results)
    engine = create_engine(url)
    with engine.connect() as conn:
        server = str(conn.execute(text("SHOW server_version")).scalar_one())
    engine.dispose()
    sizes = ", ".join(str(s // MiB) for s in shape.sizes)
    title = "# Stranded capacity: poold shared vs a static partition"
    head = ("| side | requests | granted | refusals | stranded | borderline | fragmented "
            "| mean utilisation | peak | grant latency (median) | most behind schedule |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    (out / "bench-stranded.md").write_text(f"""{title}

`.venv/bin/python bench/stranded.py` ({seconds:.0f} s), {datetime.now(UTC):%Y-%m-%d}, on
{platform.node()}: {os.cpu_count()} CPUs (load average {load:.1f} when it began: shared with
other work), Linux {platform.release()}, Python {platform.python_version()}, PostgreSQL
{server} on the same machine. Seed {shape.seed}.

{shape.hosts} `poold serve` processes a side (host ids poold-N, static-N), clients over HTTP,
one ledger on PostgreSQL. **poold**: one emulated device of {shape.capacity // MiB} MiB shared by
all (one file, one emulate_uid), claims of {shape.claim_slice // MiB} MiB, idle claims given back
after 5 s, a host short of room expiring, reclaiming and trimming others' idle bytes
(`poold.ledger.sharing.make_room`). **static partition**: the same poold, each host its own
unshared device of {shape.capacity // shape.hosts // MiB} MiB. Scrubbing off on both.

The trace: {len(requests)} requests over {shape.steps} steps of {shape.step_s} s, sizes
{{{sizes}}} MiB, lifetimes exponential (mean {shape.mean_life * shape.step_s:.0f} s),
{shape.abandoned:.0%} abandoned (they expire); each host's demand peaks on its own phase, the
total near {shape.load:.0%} of the capacity.

A refusal is **stranded** when the ledger's audit log shows a run of its size on some device
that no lease may have held at any instant between the request's sending and its answer (expired
leases count as idle); **borderline** when such a run existed for part of that round trip only
(a race with another host's grant or release that the request may have lost fairly);
**fragmented** when, not stranded, a device had that many bytes idle but in shorter runs.
Rebuilt from the audit log, no two leases held the same bytes at once
({sum(r.overlaps for r in results)} overlaps found).

{head}
{rows}

{picture}

Every other refusal asked, at that moment, for a run that no device had free or held by an
expired lease: the demand passes the capacity at its peaks (the dashed line), and what is idle
then is in runs shorter than the request. Both sides replay the very same requests at the same
times; a refused request is not retried. Run it again with `.venv/bin/python bench/stranded.py`
(`--database-url` for another PostgreSQL; matplotlib draws the plot when installed).
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("POOLD_BENCH_URL", DEFAULT_URL))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "docs")
    args = parser.parse_args()
    shape, began, load = FULL, time.monotonic(), os.getloadavg()[0]
    requests = trace(shape)
    results = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        for side in SIDES:
            with ledger_schema(args.database_url) as url:
                results.append(run_side(side, shape, requests, url, Path(tmp) / side))
    for r in results:
        print(f"{r.side:17} requests={r.requests} granted={r.granted} refusals={r.refusals} "
              f"stranded={r.stranded} borderline={r.borderline} fragmented={r.fragmented} "
              f"errors={len(r.errors)} "
              f"overlaps={r.overlaps} mean_util={sum(r.utilisation) / len(r.utilisation):.3f} "
              f"late={r.max_late_s:.3f}s")
    args.out.mkdir(parents=True, exist_ok=True)
    report(results, requests, args.out, args.database_url, time.monotonic() - began, load)


if __name__ == "__main__":
    main()
