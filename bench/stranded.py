"""Stranded capacity: one demand trace replayed against poold's shared ledger and against a
static per-host partition of the same capacity.

The trace: HOSTS hosts share one device of CAPACITY bytes. Each host's demand rises and falls
on its own phase, so demand moves between hosts over time while the total stays near the
capacity; requests have mixed sizes and lifetimes. Both sides see the very same requests, in
the same order, with the same lifetimes.

- poold: the real ledger code in process, one `Ledger` (its own single writer, space and claims)
  per host id, all on one ledger database (PostgreSQL when POOLD_BENCH_URL names one, else a
  SQLite file), a ManualClock stepping one second per trace step, each host ticking (idle claims
  given back after CLAIM_IDLE_S) as its daemon would.
- static: each host owns CAPACITY / HOSTS bytes and places leases in them best-fit; it never
  lends anything.

A refusal is *stranded* when, at that moment, some run of bytes no live lease holds (anywhere on
the device, whoever claims or owns it) was large enough: idle capacity could have served it.

Run: python bench/stranded.py [--out docs] — writes docs/bench-stranded.md and .png.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from poold import db, errors
from poold.inventory import DeviceSpec
from poold.ledger import leases, registry, sharing
from poold.ledger.clock import ManualClock
from poold.ledger.leases import GrantRequest, Tx
from poold.ledger.ledger import Ledger
from poold.pool import ExtentAllocator
from poold.types import DeviceKind, Extent, MiB

HOSTS = 4
CAPACITY = 1024 * MiB
ALIGN = 2 * MiB
STEPS = 400
CLAIM_SLICE = 64 * MiB
CLAIM_IDLE_S = 5.0
SIZES = [2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB]
SEED = 7


@dataclass(frozen=True)
class Request:
    step: int
    host: int
    size: int
    lifetime: int


def trace(seed: int = SEED) -> list[Request]:
    """Each host's load follows a raised sine of period STEPS/2 on its own phase, so the busiest
    host changes four times per run; arrivals are sized to keep the total near 90% of CAPACITY."""
    import math
    rng = random.Random(seed)
    mean_size = sum(SIZES) / len(SIZES)
    mean_life = 20
    requests = []
    for step in range(STEPS):
        for host in range(HOSTS):
            phase = 2 * math.pi * (step / (STEPS / 2) + host / HOSTS)
            weight = max(0.0, math.sin(phase)) ** 2 * 2  # mean 0.5 per host, up to 2
            rate = 0.9 * CAPACITY / mean_size / mean_life / HOSTS * weight * 2
            for _ in range(_poisson(rng, rate)):
                requests.append(Request(step, host, rng.choice(SIZES),
                                        max(1, int(rng.expovariate(1 / mean_life)))))
    return requests


def _poisson(rng: random.Random, lam: float) -> int:
    import math
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


@dataclass
class Result:
    name: str
    requests: int = 0
    refusals: int = 0
    stranded: int = 0
    utilisation: list[float] = field(default_factory=list)
    demand: list[float] = field(default_factory=list)


def _gap_fits(live: list[Extent], size: int) -> bool:
    """Is there a run of `size` bytes no live lease holds?"""
    end = 0
    for e in sorted(live, key=lambda e: e.offset):
        if e.offset - end >= size:
            return True
        end = max(end, e.end)
    return CAPACITY - end >= size


class Side:
    name = ""

    def grant(self, host: int, size: int) -> Extent | None: ...
    def release(self, host: int, handle: object) -> None: ...
    def tick(self) -> None: ...
    def close(self) -> None: ...


class Static(Side):
    name = "static partition"

    def __init__(self) -> None:
        part = CAPACITY // HOSTS
        self.parts = [ExtentAllocator(part, ALIGN, base=h * part) for h in range(HOSTS)]

    def grant(self, host: int, size: int) -> tuple[Extent, object] | None:  # type: ignore[override]
        extent = self.parts[host].allocate(size)
        return None if extent is None else (extent, extent)

    def release(self, host: int, handle: object) -> None:
        assert isinstance(handle, Extent)
        self.parts[host].free(handle)


class Poold(Side):
    name = "poold"

    def __init__(self, url: str) -> None:
        db.upgrade(url)
        self.clock = ManualClock()
        spec = DeviceSpec(uid="bench:shared", kind=DeviceKind.EMULATED, devname="emu0",
                          chardev="/nonexistent", size=CAPACITY, align=ALIGN, shared=True)
        self.ledgers = []
        for h in range(HOSTS):
            ledger = Ledger(url, host_id=f"host-{h}", default_pool="default", clock=self.clock,
                            synchronous="NORMAL")
            ledger.start()
            ledger.run(partial(_bootstrap, spec=spec))
            self.ledgers.append(ledger)

    def grant(self, host: int, size: int) -> tuple[Extent, object] | None:  # type: ignore[override]
        try:
            view = self.ledgers[host].run(partial(
                leases.grant, request=GrantRequest(size=size, actor="bench", ttl_s=3600)))
        except errors.NoCapacity:
            return None
        return Extent(view.offset, view.length), view.id

    def release(self, host: int, handle: object) -> None:
        self.ledgers[host].run(partial(leases.release, lease_id=str(handle), actor="bench"))

    def tick(self) -> None:
        self.clock.advance(1)
        for ledger in self.ledgers:
            ledger.run(_tick)

    def close(self) -> None:
        for ledger in self.ledgers:
            ledger.close()


def _bootstrap(tx: Tx, spec: DeviceSpec) -> None:
    registry.register_host(tx, tx.host_id)
    pool = registry.ensure_pool(tx, registry.PoolPolicy(
        name="default", claim_slice=CLAIM_SLICE, default_ttl_s=3600, max_ttl_s=3600,
        scrub_on_release=False))
    registry.reconcile_devices(tx, [spec], pool)


def _tick(tx: Tx) -> None:
    registry.register_host(tx, tx.host_id)
    sharing.resync_space(tx)
    leases.reap(tx)
    sharing.release_idle_claims(tx, CLAIM_IDLE_S)


def replay(side: Side, requests: list[Request]) -> Result:
    result = Result(side.name)
    live: dict[int, tuple[int, Extent, object, int]] = {}  # request index -> (host, extent, ...)
    by_step: dict[int, list[int]] = {}
    for i, r in enumerate(requests):
        by_step.setdefault(r.step, []).append(i)
    wanted = 0
    for step in range(STEPS):
        for i in [i for i, (_, _, _, end) in live.items() if end <= step]:
            host, _, handle, _ = live.pop(i)
            side.release(host, handle)
        for i in by_step.get(step, []):
            r = requests[i]
            result.requests += 1
            wanted += r.size
            placed = side.grant(r.host, r.size)  # type: ignore[func-returns-value]
            if placed is None:
                result.refusals += 1
                if _gap_fits([e for _, e, _, _ in live.values()], r.size):
                    result.stranded += 1
                continue
            live[i] = (r.host, placed[0], placed[1], step + r.lifetime)
        side.tick()
        result.utilisation.append(sum(e.length for _, e, _, _ in live.values()) / CAPACITY)
        result.demand.append(sum(requests[i].size for i in live) / CAPACITY)
    side.close()
    return result


def demand_curve(requests: list[Request]) -> list[float]:
    """Bytes the trace asks to hold at each step if nothing were refused, over CAPACITY."""
    held = [0] * (STEPS + 1)
    for r in requests:
        held[r.step] += r.size
        held[min(STEPS, r.step + r.lifetime)] -= r.size
    out, total = [], 0
    for step in range(STEPS):
        total += held[step]
        out.append(total / CAPACITY)
    return out


def report(results: list[Result], requests: list[Request], out: Path, backend: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    demand = demand_curve(requests)
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(demand, color="0.6", linestyle="--", label="demand (nothing refused)")
    for r in results:
        ax.plot(r.utilisation, label=f"{r.name}: leased")
    ax.set_xlabel("trace step (s)")
    ax.set_ylabel("fraction of capacity")
    ax.set_title(f"{HOSTS} hosts, {CAPACITY // MiB} MiB shared, demand moving between hosts")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "bench-stranded.png", dpi=110)
    rows = "\n".join(
        f"| {r.name} | {r.requests} | {r.refusals} | {r.stranded} | "
        f"{100 * sum(r.utilisation) / len(r.utilisation):.1f}% | "
        f"{100 * max(r.utilisation):.1f}% |" for r in results)
    sizes = ", ".join(f"{s // MiB}" for s in SIZES)
    (out / "bench-stranded.md").write_text(f"""# Stranded capacity: poold vs a static partition

`python bench/stranded.py` (seed {SEED}). {HOSTS} hosts share one device of {CAPACITY // MiB} MiB
(align {ALIGN // MiB} MiB). Each host's demand rises and falls on its own phase, so the busiest
host changes over time while the total hovers near the capacity. Requests: {len(requests)},
sizes {{{sizes}}} MiB uniformly, lifetimes exponential (mean 20 s), over {STEPS} one-second steps.

- **poold**: the real ledger code in process: one `Ledger` (single writer, in-memory space,
  claims) per host id, all on one {backend} ledger, claim slice {CLAIM_SLICE // MiB} MiB, idle
  claims given back after {CLAIM_IDLE_S:.0f} s, a host short of room trims other hosts' claims
  to what they lease (`poold.ledger.sharing.make_room`).
- **static partition**: each host owns {CAPACITY // HOSTS // MiB} MiB and never lends it.

A refusal is **stranded** when at that moment a run of bytes held by no live lease, anywhere on
the device, was large enough to serve it.

| side | requests | refusals | stranded refusals | mean utilisation | peak utilisation |
|---|---|---|---|---|---|
{rows}

![utilisation over time](bench-stranded.png)

Refusals that are not stranded are the trace asking for more than the device holds at that
moment (or no single free run being large enough anywhere).
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "docs")
    args = parser.parse_args()
    requests = trace()
    url = os.environ.get("POOLD_BENCH_URL")
    with tempfile.TemporaryDirectory() as tmp:
        backend = "PostgreSQL" if url else "SQLite"
        url = url or f"sqlite:///{tmp}/ledger.sqlite3"
        results = [replay(Poold(url), requests), replay(Static(), requests)]
    for r in results:
        print(f"{r.name:18} requests={r.requests} refusals={r.refusals} "
              f"stranded={r.stranded} mean_util={sum(r.utilisation) / len(r.utilisation):.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    report(results, requests, args.out, backend)


if __name__ == "__main__":
    main()

