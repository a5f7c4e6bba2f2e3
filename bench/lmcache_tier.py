"""LMCache's storage tier on poold beside LMCache's own DaxBackend, side by side in one run.

    ~/.cache/poold-engines/lmcache-0.5.6/bin/python bench/lmcache_tier.py [--quick]
        [--out docs/bench-lmcache.md]

(any venv with `poold[lmcache]` will do; tests/engines builds that one.) Both are LMCache storage
plugins behind the same kind of LocalCPUBackend, fed the same chunks: PooldBackend leasing from a
`poold serve` on an emulated device (its leases are memfds: shared pages of RAM), DaxBackend
mapping a file of the same size on /dev/shm (tmpfs: the same kind of memory), as LMCache's own
tests run it without a DAX device. Chunks are 256 tokens of bfloat16 with 4, 16 and 64 layers
(256 KiB, 1 MiB, 4 MiB). Each round stores `chunks` chunks one call each (per chunk), retrieves
them one call each, removes them, then stores them in one call and retrieves them in one call
(batched); the two backends alternate rounds, and which goes first alternates too (a round
finds the caches as the round before it left them: the same backend always first would hand it
the other's leftovers every time). Every retrieved chunk is compared with what was
stored. Reported: the median GB/s over the rounds, and poold / DAX round by round (its median and
quartiles: a round moves 8 to 128 MiB, milliseconds that a busy machine can shift).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import AdHocMemoryAllocator
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
from lmcache.v1.storage_backend.plugins.dax_backend import DaxBackend

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: bench/ is not a package

from bench.poold_serve import POOL, poold_serve  # noqa: E402
from poold.integrations.lmcache import PooldBackend  # noqa: E402

MiB = 1 << 20
TOKENS, HIDDEN = 256, 64  # per chunk: 2 (K, V) x layers x 256 tokens x 64, bfloat16
LAYERS = (4, 16, 64)


def chunk_bytes(layers: int) -> int:
    return 2 * layers * TOKENS * HIDDEN * 2


def metadata(layers: int) -> LMCacheMetadata:
    return LMCacheMetadata(model_name="bench", world_size=1, local_world_size=1, worker_id=0,
                           local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(layers, 2, TOKENS, 1, HIDDEN))


def config(extra: dict[str, Any]) -> LMCacheEngineConfig:
    made = LMCacheEngineConfig.from_defaults(chunk_size=TOKENS, local_cpu=True,
                                             max_local_cpu_size=0.5,
                                             lmcache_instance_id="poold-bench")
    made.extra_config = extra
    return made


def backends(layers: int, state: Path, dax_file: Path) -> dict[str, Any]:
    size = chunk_bytes(layers)
    poold_cfg = config({"poold.uds": str(state / "api.sock"),
                        "poold.fd_socket": str(state / "fd.sock"),
                        "poold.budget_bytes": POOL // 2, "poold.lease_bytes": 64 * MiB,
                        "poold.block_bytes": size, "poold.idle_release_s": 3600})
    dax_cfg = config({"dax.device_path": str(dax_file), "dax.max_dax_size": POOL / 2 / 2**30,
                      "dax.restore_workers": 1, "dax.restore_max_regions": 1,
                      "dax.retrieve_staging_slab_bytes": max(8 * MiB, size)})
    made = {}
    for name, cls, cfg in (("poold", PooldBackend, poold_cfg), ("dax", DaxBackend, dax_cfg)):
        local = LocalCPUBackend(config=cfg, metadata=metadata(layers), dst_device="cpu")
        made[name] = cls(config=cfg, metadata=metadata(layers), local_cpu_backend=local,
                         loop=None, dst_device="cpu")
    return made


def sources(layers: int, count: int) -> list[MemoryObj]:
    alloc = AdHocMemoryAllocator(device="cpu")
    shape = torch.Size([2, layers, TOKENS, HIDDEN])
    objs = []
    for i in range(count):
        obj = alloc.allocate([shape], [torch.bfloat16], fmt=MemoryFormat.KV_2LTD)
        assert obj is not None and obj.tensor is not None
        obj.tensor.view(torch.int16).copy_(torch.randint(
            -2**15, 2**15 - 1, shape, dtype=torch.int16,
            generator=torch.Generator().manual_seed(layers * 1000 + i)))
        objs.append(obj)
    return objs


def timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def wait(futures: object) -> None:
    for f in futures or []:  # type: ignore[attr-defined]
        f.result(timeout=60)


def one_round(backend: Any, keys: list[CacheEngineKey], objs: list[MemoryObj]
              ) -> dict[str, float]:
    """Seconds for each of the four ways; checks every chunk that comes back."""
    got: list[MemoryObj | None] = []

    def per_chunk_put() -> None:
        for k, o in zip(keys, objs, strict=True):
            wait(backend.batched_submit_put_task([k], [o]))

    def per_chunk_get() -> None:
        got.extend(backend.get_blocking(k) for k in keys)

    def batched_put() -> None:
        wait(backend.batched_submit_put_task(keys, objs))

    def batched_get() -> None:
        got.extend(backend.batched_get_blocking(keys))

    def check_and_free() -> None:
        for obj, src in zip(got, objs, strict=True):
            assert obj is not None, f"{backend}: a chunk did not come back"
            assert torch.equal(obj.tensor.view(torch.int16), src.tensor.view(torch.int16))
            obj.ref_count_down()
        got.clear()
        for k in keys:
            backend.remove(k)

    seconds = {"store per chunk": timed(per_chunk_put), "retrieve per chunk": timed(per_chunk_get)}
    check_and_free()
    seconds["store batched"] = timed(batched_put)
    seconds["retrieve batched"] = timed(batched_get)
    check_and_free()
    return seconds


def measure(layers: int, chunks: int, rounds: int, state: Path, work: Path
            ) -> dict[str, dict[str, list[float]]]:
    """GB/s of each round, per backend and way (round i of one backend ran beside round i of the
    other)."""
    dax_file = work / f"dax-{layers}.bin"
    with dax_file.open("wb") as f:
        f.truncate(POOL // 2)
    made = backends(layers, state, dax_file)
    objs = sources(layers, chunks)
    keys = [CacheEngineKey("bench", 1, 0, i, torch.bfloat16) for i in range(chunks)]
    moved = chunk_bytes(layers) * chunks
    results: dict[str, dict[str, list[float]]] = {n: {} for n in made}
    try:
        for backend in made.values():  # warm: first leases, first mapping, page cache
            one_round(backend, keys, objs)
        order = list(made.items())
        for i in range(rounds):
            for name, backend in (order if i % 2 == 0 else order[::-1]):
                for way, s in one_round(backend, keys, objs).items():
                    results[name].setdefault(way, []).append(moved / s / 1e9)
    finally:
        for backend in made.values():
            backend.close()
            backend.local_cpu_backend.close()
        for obj in objs:
            obj.ref_count_down()
        dax_file.unlink()
    return results


def report(out: Path, table: dict[int, dict[str, dict[str, list[float]]]], chunks: int,
           rounds: int, took_s: float) -> None:
    ways = ["store per chunk", "retrieve per chunk", "store batched", "retrieve batched"]
    lines = ["# LMCache's storage tier: poold beside LMCache's DaxBackend", "",
             f"Command: `python bench/lmcache_tier.py{' --quick' if chunks < 32 else ''}` "
             f"(LMCache's venv). Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, took "
             f"{took_s:.0f} s; {os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}, torch {torch.__version__}.", "",
             f"{chunks} chunks a round, {rounds} rounds, the two backends alternating, "
             "each first in every other pair; "
             "median GB/s over the rounds (1 GB = 1e9 bytes), and the ratio of each round of "
             "poold to the DaxBackend round beside it: its median and, in brackets, its "
             "quartiles (how much the machine moved it); every chunk retrieved was "
             "compared with what was stored. PooldBackend leases from `poold serve` (emulated "
             "device: memfd leases); DaxBackend maps a file on /dev/shm of the same size. Both "
             "copy from and into LMCache's CPU memory objects (a plugin gets no allocator of "
             "its own).", "",
             "| chunk | way | poold GB/s | DaxBackend GB/s | poold / DAX, per round |",
             "|---|---|---|---|---|"]
    for layers, result in table.items():
        for way in ways:
            p, d = result["poold"][way], result["dax"][way]
            q1, ratio, q3 = statistics.quantiles([a / b for a, b in zip(p, d, strict=True)],
                                                 n=4)
            lines.append(f"| {chunk_bytes(layers) // 1024} KiB | {way} | "
                         f"{statistics.median(p):.2f} | {statistics.median(d):.2f} | "
                         f"{ratio:.2f}x ({q1:.2f}-{q3:.2f}) |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 chunks, 4 rounds")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "docs" / "bench-lmcache.md")
    args = parser.parse_args()
    chunks, rounds = (8, 4) if args.quick else (64, 64)  # even: each backend first as often
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm, \
            tempfile.TemporaryDirectory() as tmp, poold_serve(Path(tmp)) as state:
        table = {layers: measure(layers, chunks, rounds, state, Path(shm))
                 for layers in LAYERS}
    report(args.out, table, chunks, rounds, time.monotonic() - started)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
