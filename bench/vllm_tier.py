"""vLLM's secondary tiers side by side in one run: poold's beside vLLM's own file-system tier on
tmpfs and its example in-memory tier.

    ~/.cache/poold-engines/vllm-0.33.0/bin/python bench/vllm_tier.py [--quick]
        [--out docs/bench-vllm.md]

(VLLM_TARGET_DEVICE=cpu; any venv with vLLM 0.33.0 and poold will do; tests/engines builds that
one.) Every tier gets the same CPU-tier buffer of rows and the same jobs: store `chunks` rows,
then load them into other rows, as one job each (per chunk) and as one job of all (batched),
waited for with drain_jobs as vLLM's reset does. The file-system tier writes a file a chunk
under a tmpfs folder (vLLM's tier for local or shared storage); the example tier only records
keys, copying nothing: it is the floor of the tiering manager's own cost, not a store. Rows that
poold and the file-system tier load are compared with what was stored. Reported: the median
GB/s over the rounds (tiers alternating), and poold over each.
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
from unittest.mock import MagicMock

import numpy as np
from vllm.v1.kv_offload.base import OffloadingKVEventsConfig, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import SecondaryTierManager, TransferJob
from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager
from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: bench/ is not a package

from bench.poold_serve import poold_serve  # noqa: E402
from poold.integrations.vllm import PooldSecondaryTier  # noqa: E402

MiB = 1 << 20
ROWS = (256 * 1024, 2 * MiB)
# Every round stores new keys and no tier deletes: poold's budget holds them all, as the
# file-system tier's folder does, so no store is evicted mid-round and loads measure copies.
POOL = 3 << 30


def spec() -> MagicMock:
    """The offloading spec vLLM hands a tier, as its scheduler builds it for one worker."""
    made = MagicMock()
    made.config = OffloadingConfig(
        groups=(), worker_kv_bytes_per_block=0, enable_kv_cache_events=False, extra_config={},
        engine_id="bench", model=OffloadingModelConfig(name="bench-model", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False),
        replicated_layout=False)
    made.blocks_per_chunk = 1
    made.kv_events_config = OffloadingKVEventsConfig(enable_kv_cache_events=False,
                                                     self_describing_kv_events=False)
    return made


def tiers(view: memoryview, row: int, state: Path, fs_root: Path) -> dict[str, Any]:
    return {
        "poold": PooldSecondaryTier(spec(), view, "poold", uds=str(state / "api.sock"),
                                    fd_socket=str(state / "fd.sock"), budget_bytes=POOL,
                                    lease_bytes=64 * MiB, block_bytes=row,
                                    idle_release_s=3600),
        "fs (tmpfs)": FileSystemTierManager(spec(), view, "fs", root_dir=str(fs_root),
                                            n_read_threads=2, n_write_threads=2),
        "example": ExampleSecondaryTierManager(spec(), view, "example"),
    }


def run_jobs(tier: SecondaryTierManager, submit: Callable[[TransferJob], None],
             jobs: list[TransferJob]) -> float:
    started = time.perf_counter()
    for job in jobs:
        submit(job)
    tier.drain_jobs()
    took = time.perf_counter() - started
    results = list(tier.get_finished_jobs())
    assert len(results) == len(jobs) and all(r.success for r in results), results
    return took


def jobs(first_id: int, keys: list[Any], rows: range, batched: bool) -> list[TransferJob]:
    def job(i: int, ks: list[Any], chunk_ids: list[int]) -> TransferJob:
        return TransferJob(job_id=first_id + i, keys=ks, is_promotion=False, req_context=None,
                           chunk_ids=np.array(chunk_ids, dtype=np.int64))
    if batched:
        return [job(0, keys, list(rows))]
    return [job(i, [k], [r]) for i, (k, r) in enumerate(zip(keys, rows, strict=True))]


def one_round(name: str, tier: SecondaryTierManager, rows: np.ndarray, chunks: int,
              round_id: int) -> dict[str, float]:
    seconds = {}
    for batched in (False, True):
        way = "batched" if batched else "per chunk"
        keys = [make_offload_key(f"r{round_id}-{way}-{i}".encode(), 0) for i in range(chunks)]
        rows[chunks:] = 0
        seconds[f"store {way}"] = run_jobs(tier, tier.submit_store,
                                           jobs(0, keys, range(chunks), batched))
        seconds[f"load {way}"] = run_jobs(tier, tier.submit_load,
                                          jobs(1000, keys, range(chunks, 2 * chunks), batched))
        if name != "example":  # the example tier copies nothing
            assert np.array_equal(rows[chunks:], rows[:chunks]), f"{name}: rows differ"
    return seconds


def measure(row: int, chunks: int, rounds: int, state: Path, fs_root: Path
            ) -> dict[str, dict[str, float]]:
    rows = np.random.default_rng(row).integers(0, 256, (2 * chunks, row), dtype=np.uint8)
    made = tiers(memoryview(rows), row, state, fs_root)
    gb = row * chunks / 1e9
    seen: dict[str, dict[str, list[float]]] = {n: {} for n in made}
    try:
        for name, tier in made.items():  # warm: first leases, directories, page cache
            one_round(name, tier, rows, chunks, -1)
        # poold's tier grows to hold every round's chunks, then is emptied: the rounds measure
        # copies into memory it holds (an engine's tier keeps its leases), not lease grants
        for warm in range(rounds):
            one_round("poold", made["poold"], rows, chunks, -2 - warm)
        made["poold"].objects.clear()
        for r in range(rounds):
            for name, tier in made.items():
                for way, s in one_round(name, tier, rows, chunks, r).items():
                    seen[name].setdefault(way, []).append(gb / s)
    finally:
        for tier in made.values():
            tier.shutdown()
    return {n: {w: statistics.median(v) for w, v in ways.items()} for n, ways in seen.items()}


def report(out: Path, table: dict[int, dict[str, dict[str, float]]], chunks: int, rounds: int,
           took_s: float, quick: bool) -> None:
    ways = ["store per chunk", "load per chunk", "store batched", "load batched"]
    lines = ["# vLLM's secondary tiers: poold beside vLLM's file-system and example tiers", "",
             f"Command: `python bench/vllm_tier.py{' --quick' if quick else ''}` (vLLM's venv, "
             f"VLLM_TARGET_DEVICE=cpu). Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, took "
             f"{took_s:.0f} s; {os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}.", "",
             f"{chunks} chunks a job set, {rounds} rounds, tiers alternating; median GB/s "
             "(1 GB = 1e9 bytes) from submitting the jobs to drain_jobs returning. Before the "
             "rounds, poold's tier grew its leases to hold every round's chunks and was "
             "emptied, as an engine's tier holds its leases once grown: the rounds time copies, "
             "not lease grants. The file-system tier writes new files each round. poold's and "
             "the file-system tier's loaded rows were compared with the stored ones. The "
             "example tier copies nothing (it records keys): its figure is the cost of the "
             "calls alone, an upper bound no store reaches.", "",
             "| chunk | way | poold GB/s | fs (tmpfs) GB/s | example GB/s | poold / fs |",
             "|---|---|---|---|---|---|"]
    for row, result in table.items():
        for way in ways:
            p, f, e = (result[n][way] for n in ("poold", "fs (tmpfs)", "example"))
            lines.append(f"| {row // 1024} KiB | {way} | {p:.2f} | {f:.2f} | {e:.1f} | "
                         f"{p / f:.2f}x |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 chunks, 3 rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-vllm.md")
    args = parser.parse_args()
    chunks, rounds = (8, 3) if args.quick else (32, 7)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm, \
            tempfile.TemporaryDirectory() as tmp, poold_serve(Path(tmp), POOL) as state:
        table = {row: measure(row, chunks, rounds, state, Path(shm) / f"fs-{row}")
                 for row in ROWS}
    report(args.out, table, chunks, rounds, time.monotonic() - started, args.quick)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
