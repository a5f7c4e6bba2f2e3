"""Elastic leases vs static budgets: agent-shaped KV clients on one pool, side by side.

Several `poold.kv` stores share one emulated pool of a real `poold serve`. Each replays the shape
the coding-agent traces report: busy phases (turns that re-read the whole conversation's KV
prefix and append to it) separated by idle gaps (a tool call, a user), scaled from minutes to
seconds, the clients' phases staggered so one or two are busy at a time. The same schedule runs
twice, each time against a fresh daemon:

- **static**: each store's budget is its share of the pool (pool / clients), leased as needed:
  today's way to keep clients from refusing each other;
- **elastic**: each store may grow to the whole pool, its leases elastic (`elastic=True`), and a
  growth that finds the pool full waits up to `grow_wait_s` for the daemon to ask idle stores
  for their coldest leases (`grow_wait_s`).

Reported: each client's KV hit rate (gets of its prefix that found the block) during its busy
phases, the daemon's refusals (a grant answered 507 after waiting), bytes leased but holding no
block over time, and, for every grant that waited for room, the time from its sending to its
answer split into asking (until the daemon's `lease.reclaim_asked`), the holder giving back (its
feed hearing, dropping the blocks, the release: until `lease.released`), the scrub (until
`lease.scrubbed`) and the rest (the waiting grant's retry, the grant, its answer). Every block a
get returns is checked against the bytes its key was stored with.

Run: python bench/elastic_trace.py [--out docs] (about two minutes): writes docs/bench-elastic.md
and, with matplotlib installed, docs/bench-elastic.png. `--short` runs the small shape the test
tier uses.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from api.schemas import GrantedLease
from bench.poold_serve import poold_serve
from poold.client import PooldClient
from poold.errors import NoCapacity
from poold.kv import KVStore

MiB = 1 << 20


@dataclass(frozen=True)
class Shape:
    clients: int = 4
    pool: int = 256 * MiB
    block: int = MiB
    lease: int = 16 * MiB
    context: tuple[int, int] = (48, 96)  # blocks of a conversation: at its first turn, at most
    appended: int = 4  # blocks a turn appends
    busy_s: float = 4.0
    idle_s: float = 8.0  # a gap: minutes in the traces, seconds here
    think_s: float = 0.05  # between two turns of one busy phase
    duration_s: float = 48.0
    grow_wait_s: float = 1.0
    sample_s: float = 0.1


FULL = Shape()
SHORT = Shape(pool=128 * MiB, lease=8 * MiB, context=(24, 48), busy_s=2.0, idle_s=4.0,
              duration_s=12.0)


@dataclass
class ClientResult:
    name: str
    hits: int = 0
    lookups: int = 0
    wrong_bytes: int = 0
    turns: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


@dataclass
class Waited:
    """A grant that found the pool full and waited, split by the ledger's timestamps."""

    total_s: float
    ask_s: float
    give_back_s: float
    scrub_s: float
    rest_s: float


@dataclass
class SideResult:
    side: str
    clients: list[ClientResult]
    refusals: int
    reclaims_asked: int
    reclaim_revoked: int
    waited: list[Waited]
    grant_answers: list[float]  # seconds, every grant of the run
    samples: list[tuple[float, int, int]]  # (t, leased bytes, leased but empty of blocks)

    @property
    def hit_rate(self) -> float:
        lookups = sum(c.lookups for c in self.clients)
        return sum(c.hits for c in self.clients) / lookups if lookups else 0.0


class TimedClient(PooldClient):
    """Records when each growth's grant was first sent and when one was answered (the bench's
    seam on the SDK): a store waiting for room asks in short steps, each a grant refused 507
    until the room came, so a growth is timed from its first try."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grants: list[tuple[float, float, str]] = []  # (sent, answered, lease id), epoch s
        self._first_try = threading.local()

    def grant(self, size: int, **options: Any) -> GrantedLease:
        sent = getattr(self._first_try, "at", None) or time.time()
        try:
            granted = super().grant(size, **options)
        except NoCapacity:
            self._first_try.at = sent
            raise
        self._first_try.at = None
        self.grants.append((sent, time.time(), granted.id))
        return granted


def content(key: bytes, size: int) -> bytes:
    """The block a key stands for: what a get of it must return, byte for byte."""
    seed = hashlib.sha256(key).digest()
    return (seed * (size // len(seed) + 1))[:size]


def schedule(shape: Shape, index: int) -> list[tuple[float, float]]:
    """(start, end) of the client's busy phases: staggered by a share of the cycle each."""
    cycle = shape.busy_s + shape.idle_s
    offset = cycle * index / shape.clients
    phases, start = [], offset
    while start < shape.duration_s:
        phases.append((start, min(start + shape.busy_s, shape.duration_s)))
        start += cycle
    return phases


def run_client(store: KVStore, shape: Shape, index: int, t0: float,
               result: ClientResult) -> None:
    """Turns of one conversation during the client's busy phases: get the whole prefix, store
    what missed (recomputed), append a few blocks."""
    keys = [f"c{index}-b{i}".encode() for i in range(shape.context[1] + shape.appended * 64)]
    length = shape.context[0]
    for start, end in schedule(shape, index):
        while time.monotonic() - t0 < start:
            time.sleep(min(0.05, start - (time.monotonic() - t0)))
        while time.monotonic() - t0 < end:
            prefix = keys[:length]
            got = store.get_many(prefix)
            missing = []
            for key, value in zip(prefix, got, strict=True):
                result.lookups += 1
                if value is None:
                    missing.append(key)
                elif value != content(key, shape.block):
                    result.wrong_bytes += 1
                else:
                    result.hits += 1
            grown = keys[length:length + shape.appended] if length < shape.context[1] else []
            todo = missing + grown
            if todo:
                store.put_many(todo, b"".join(content(k, shape.block) for k in todo))
            length = min(length + len(grown), shape.context[1])
            result.turns += 1
            time.sleep(shape.think_s)


def run_side(side: str, shape: Shape, work: Path) -> SideResult:
    elastic = side == "elastic"
    work.mkdir(parents=True, exist_ok=True)
    with poold_serve(work, pool=shape.pool) as state:
        uds = str(state / "api.sock")
        clients = [TimedClient(uds=uds, fd_socket=str(state / "fd.sock"))
                   for _ in range(shape.clients)]
        budget = shape.pool if elastic else shape.pool // shape.clients
        stores = [KVStore(c, shape.block, budget, shape.lease, elastic=elastic,
                          grow_wait_s=shape.grow_wait_s if elastic else 0.0,
                          idle_release_s=shape.duration_s, labels={"client": str(i)})
                  for i, c in enumerate(clients)]
        results = [ClientResult(f"client {i}") for i in range(shape.clients)]
        samples: list[tuple[float, int, int]] = []
        t0 = time.monotonic()
        threads = [threading.Thread(target=run_client, args=(s, shape, i, t0, r), daemon=True)
                   for i, (s, r) in enumerate(zip(stores, results, strict=True))]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            # Leased: the ledger's figure (one read); empty: each store's own leases less its
            # blocks (stores read one after another: a lease moving between two of them while
            # they are read would count twice in a sum of theirs).
            leased = clients[0].pools()[0].leased_bytes
            empty = sum(x.leased_bytes - x.blocks_used * shape.block
                        for x in (s.stats() for s in stores))
            samples.append((time.monotonic() - t0, leased, empty))
            time.sleep(shape.sample_s)
        for store, result in zip(stores, results, strict=True):
            stats = store.stats()
            result.stats = {"grow_failures": stats.grow_failures,
                            "budget_refusals": stats.budget_refusals,
                            "leases_reclaimed": stats.leases_reclaimed,
                            "reclaimed_blocks": stats.reclaimed, "evictions": stats.evictions,
                            "leases_lost": stats.leases_lost}
            store.close()
        events = clients[0].events(limit=10_000)
        grants = [g for c in clients for g in c.grants]
        for c in clients:
            c.close()
    return SideResult(side, results, refusals=sum(r.stats["grow_failures"] for r in results),
                      reclaims_asked=sum(e.kind == "lease.reclaim_asked" for e in events),
                      reclaim_revoked=sum(e.kind == "lease.revoked" and e.actor == "reclaimer"
                                          for e in events),
                      waited=split_waits(grants, events),
                      grant_answers=[answered - sent for sent, answered, _ in grants],
                      samples=samples)


def split_waits(grants: list[tuple[float, float, str]], events: list[Any]) -> list[Waited]:
    """For each grant that asked for room: where its time went, by the ledger's timestamps."""
    at = {}  # (kind, lease id) -> epoch seconds
    asks = []
    for e in events:
        when = e.at.timestamp()
        at[(e.kind, e.lease_id)] = when
        if e.kind == "lease.reclaim_asked":
            asks.append((when, e.lease_id))
    found = []
    for sent, answered, _lease_id in grants:
        mine = sorted(a for a in asks if sent <= a[0] <= answered)
        if not mine:
            continue
        asked_at, asked_lease = mine[0]
        ended = at.get(("lease.released", asked_lease)) or at.get(("lease.revoked", asked_lease))
        scrubbed = at.get(("lease.scrubbed", asked_lease))
        if ended is None or scrubbed is None or not asked_at <= ended <= scrubbed <= answered:
            continue  # its room came from elsewhere (another lease ending), not this ask
        found.append(Waited(answered - sent, asked_at - sent, ended - asked_at,
                            scrubbed - ended, answered - scrubbed))
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(shape: Shape, sides: list[SideResult], took_s: float, plot: str | None) -> str:
    static, elastic = sides
    lines = [
        "# Elastic leases vs static budgets: agent-shaped KV clients on one pool",
        "",
        f"`.venv/bin/python bench/elastic_trace.py` ({took_s:.0f} s), "
        f"{datetime.now(UTC):%Y-%m-%d}, on {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} when it ended), "
        f"Linux {platform.release()}, Python {platform.python_version()}.",
        "",
        f"One `poold serve` a side (SQLite ledger, emulated pool of {shape.pool // MiB} MiB, "
        f"scrubbing on), {shape.clients} `poold.kv` stores in one process, blocks of "
        f"{shape.block // MiB} MiB, leases of {shape.lease // MiB} MiB. Each client's "
        f"conversation starts at {shape.context[0]} blocks and grows by {shape.appended} a turn "
        f"to {shape.context[1]} ({shape.context[1] * shape.block // MiB} MiB, more than a "
        f"static share of {shape.pool // shape.clients // MiB} MiB); busy {shape.busy_s:g} s "
        f"(turns {shape.think_s * 1000:.0f} ms apart), then idle {shape.idle_s:g} s, "
        f"staggered, for {shape.duration_s:g} s. A turn gets the whole prefix and stores what "
        "missed. **static**: each store's budget is its share; **elastic**: each may grow to "
        f"the pool, its leases elastic, a growth waiting up to {shape.grow_wait_s:g} s for "
        "room. Every block a get returned was checked against its key's bytes. Leased bytes "
        "are the ledger's, sampled every 100 ms; the bytes leased with no block in them are "
        "each store's own figure, read under its lock, so while a store holds its lock through "
        "a growth the samples pause and the plot joins samples that far apart.",
        "",
        "| side | hit rate (all gets) | turns | refusals (507 after waiting) | leases asked back "
        "| revoked for keeping them | mean leased | mean leased, no block in it | wrong bytes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for side in sides:
        leased = statistics.mean(s[1] for s in side.samples) / MiB
        empty = statistics.mean(s[2] for s in side.samples) / MiB
        lines.append(
            f"| {side.side} | {side.hit_rate:.1%} | {sum(c.turns for c in side.clients)} | "
            f"{side.refusals} | {side.reclaims_asked} | {side.reclaim_revoked} | "
            f"{leased:.0f} MiB | {empty:.0f} MiB | {sum(c.wrong_bytes for c in side.clients)} |")
    lines += ["", "Per client (hit rate, static / elastic):", "",
              "| client | static | elastic | elastic: its leases asked back |", "|---|---|---|---|"]
    for a, b in zip(static.clients, elastic.clients, strict=True):
        lines.append(f"| {a.name} | {a.hit_rate:.1%} | {b.hit_rate:.1%} | "
                     f"{b.stats['leases_reclaimed']} |")
    waited = elastic.waited
    if waited:
        def row(name: str, values: list[float]) -> str:
            return (f"| {name} | {statistics.median(values) * 1000:.1f} | "
                    f"{pct(values, 0.99) * 1000:.1f} | {max(values) * 1000:.1f} |")
        lines += ["", f"Grants that waited for room (elastic side, {len(waited)} of "
                  f"{len(elastic.grant_answers)} grants), milliseconds:", "",
                  "| part | median | p99 | max |", "|---|---|---|---|",
                  row("sending to answer", [w.total_s for w in waited]),
                  row("asking (to lease.reclaim_asked)", [w.ask_s for w in waited]),
                  row("holder giving back (to lease.released)", [w.give_back_s for w in waited]),
                  row("scrub (to lease.scrubbed)", [w.scrub_s for w in waited]),
                  row("retry, grant and answer", [w.rest_s for w in waited])]
    if plot:
        lines += ["", f"![leased bytes over time]({plot})"]
    lines += ["", "Run it again with `.venv/bin/python bench/elastic_trace.py` (matplotlib draws "
              "the plot when installed)."]
    return "\n".join(lines) + "\n"


def draw(sides: list[SideResult], shape: Shape, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(len(sides), 1, figsize=(9, 5), sharex=True)
    for ax, side in zip(axes, sides, strict=True):
        t = [s[0] for s in side.samples]
        ax.plot(t, [s[1] / MiB for s in side.samples], label="leased")
        ax.plot(t, [s[2] / MiB for s in side.samples], label="leased, no block in it")
        ax.axhline(shape.pool / MiB, color="grey", linestyle="--", linewidth=0.8)
        for i in range(shape.clients):
            for start, end in schedule(shape, i):
                ax.plot([start, end], [-8 - 6 * i] * 2, linewidth=3, color=f"C{i + 2}")
        ax.set_ylabel("MiB")
        ax.set_title(f"{side.side}: hit rate {side.hit_rate:.1%}, refusals {side.refusals}")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("seconds (bars: each client's busy phases)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--short", action="store_true", help="the test tier's small shape")
    args = parser.parse_args()
    shape = SHORT if args.short else FULL
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        sides = [run_side(side, shape, Path(tmp) / side) for side in ("static", "elastic")]
    took = time.monotonic() - began
    args.out.mkdir(parents=True, exist_ok=True)
    plot = "bench-elastic.png" if draw(sides, shape, args.out / "bench-elastic.png") else None
    text = report(shape, sides, took, plot)
    (args.out / "bench-elastic.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
