"""LMCache's whole engine on a GPU, its KV tier poold or LMCache's own DaxBackend, in one run.

    python bench/lmcache_gpu.py [--tokens 8192] [--rounds 8] [--out docs/bench-lmcache-gpu.md]

What an engine's worker does, end to end: an `LMCacheEngine` with LMCache's own vLLM GPU
connector (`VLLMPagedMemGPUConnectorV2`, its CUDA kernels) gathers a paged KV cache in vLLM's
layout (32 layers of [2, blocks, 16, 8, 128] bfloat16 on the GPU, tokens scattered over random
slots, as LMCache's tests lay it out) into chunks of 256 tokens (32 MiB each) and stores them
through its local CPU backend into a storage plugin: `PooldBackend` leasing from a `poold serve`
(emulated pool: memfd leases), or `DaxBackend` mapping a file of the same size on /dev/shm. Then
the CPU copies are dropped (`clear(locations=["LocalCPUBackend"])`), so the retrieve must read
the plugin, and the chunks come back into a zeroed paged cache through the connector's kernels:
every token of every layer is compared with the original on the GPU (the run fails otherwise).

Timed per round: the store, from the call to the plugin holding every chunk (LMCache hands
chunks to plugins asynchronously); the retrieve, from the call to the GPU cache filled (CUDA
synchronised). The backends alternate rounds and which goes first alternates too. Reported: the
median GB/s of KV moved (1 GB = 1e9 bytes) and poold / DAX round by round.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from lmcache.utils import mock_up_broadcast_fn, mock_up_broadcast_object_fn
from lmcache.v1.cache_engine import LMCacheEngine, LMCacheEngineBuilder
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.gpu_connector.gpu_connectors import VLLMPagedMemGPUConnectorV2
from lmcache.v1.metadata import LMCacheMetadata

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: bench/ is not a package

from bench.poold_serve import poold_serve  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
LAYERS, HEADS, HEAD_SIZE, BLOCK, CHUNK = 32, 8, 128, 16, 256
CHUNK_BYTES = LAYERS * 2 * CHUNK * HEADS * HEAD_SIZE * 2  # K and V, bfloat16: 32 MiB
WAIT_S = 120.0


def metadata() -> LMCacheMetadata:
    return LMCacheMetadata(model_name="bench-gpu", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_SIZE))


def config(name: str, plugin: dict[str, Any], cpu_gb: float) -> LMCacheEngineConfig:
    made = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=True,
                                             max_local_cpu_size=cpu_gb,
                                             lmcache_instance_id=f"bench-gpu-{name}")
    made.storage_plugins = [name]
    made.extra_config = plugin
    return made


def engines(state: Path, dax_file: Path, tier: int, cpu_gb: float) -> dict[str, LMCacheEngine]:
    plugins = {
        "poold": {"storage_plugin.poold.module_path": "poold.integrations.lmcache",
                  "storage_plugin.poold.class_name": "PooldBackend",
                  "poold.uds": str(state / "api.sock"),
                  "poold.fd_socket": str(state / "fd.sock"), "poold.budget_bytes": tier,
                  "poold.lease_bytes": 256 * MiB, "poold.block_bytes": CHUNK_BYTES,
                  "poold.idle_release_s": 3600},
        "dax": {"storage_plugin.dax.module_path":
                "lmcache.v1.storage_backend.plugins.dax_backend",
                "storage_plugin.dax.class_name": "DaxBackend",
                "dax.device_path": str(dax_file), "dax.max_dax_size": tier / GiB,
                "dax.restore_workers": 1, "dax.restore_max_regions": 1,
                "dax.retrieve_staging_slab_bytes": CHUNK_BYTES},
    }
    made = {}
    for name, plugin in plugins.items():
        connector = VLLMPagedMemGPUConnectorV2(HEADS * HEAD_SIZE, LAYERS)
        engine = LMCacheEngineBuilder.get_or_create(
            f"bench-gpu-{name}", config(name, plugin, cpu_gb), metadata(), connector,
            mock_up_broadcast_fn, mock_up_broadcast_object_fn)
        engine.post_init()
        assert name in engine.storage_manager.storage_backends, \
            f"LMCache did not load the {name} plugin: {engine.storage_manager.storage_backends}"
        made[name] = engine
    return made


def paged(blocks: int, random: bool) -> list[torch.Tensor]:
    shape = (2, blocks, BLOCK, HEADS, HEAD_SIZE)
    if random:
        return [torch.rand(shape, dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    return [torch.zeros(shape, dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]


def same_at(left: list[torch.Tensor], right: list[torch.Tensor], slots: torch.Tensor) -> bool:
    for a, b in zip(left, right, strict=True):
        a_tokens = a.view(2, -1, HEADS, HEAD_SIZE)[:, slots].view(torch.int16)
        b_tokens = b.view(2, -1, HEADS, HEAD_SIZE)[:, slots].view(torch.int16)
        if not torch.equal(a_tokens, b_tokens):
            return False
    return True


def one_round(name: str, engine: LMCacheEngine, tokens: torch.Tensor, kv: list[torch.Tensor],
              slots: torch.Tensor, blocks: int) -> tuple[float, float]:
    """Seconds to store every chunk into the plugin and to retrieve them all from it."""
    engine.clear(tokens)  # every chunk removed from every backend: the store is a real one
    torch.cuda.synchronize()
    started = time.perf_counter()
    engine.store(tokens=tokens, kvcaches=kv, slot_mapping=slots)
    deadline = time.monotonic() + WAIT_S
    while engine.lookup(tokens, search_range=[name]) < len(tokens):
        assert time.monotonic() < deadline, f"{name} never held every chunk"
        time.sleep(0.0005)
    store_s = time.perf_counter() - started
    engine.gpu_connector.kv_cache_pointers_on_gpu = {}  # a new cache object: its pointers anew
    engine.clear(locations=["LocalCPUBackend"])
    assert engine.lookup(tokens, search_range=["LocalCPUBackend"]) == 0
    into = paged(blocks, random=False)
    torch.cuda.synchronize()
    started = time.perf_counter()
    mask = engine.retrieve(tokens, kvcaches=into, slot_mapping=slots)
    torch.cuda.synchronize()
    retrieve_s = time.perf_counter() - started
    engine.gpu_connector.kv_cache_pointers_on_gpu = {}
    assert int(mask.sum()) == len(tokens), f"{name}: {int(mask.sum())} of {len(tokens)} back"
    assert same_at(into, kv, slots), f"{name}: the KV that came back is not what was stored"
    return store_s, retrieve_s


def measure(tokens_n: int, rounds: int, work: Path, state: Path
            ) -> dict[str, dict[str, list[float]]]:
    assert tokens_n % CHUNK == 0, "whole chunks only: a partial chunk is not stored"
    tier = 2 * tokens_n // CHUNK * CHUNK_BYTES  # room for every chunk twice over
    dax_file = work / "dax.bin"
    with dax_file.open("wb") as f:
        f.truncate(tier)
    cpu_gb = (tokens_n // CHUNK * CHUNK_BYTES * 1.5) / 1e9
    made = engines(state, dax_file, tier, cpu_gb)
    blocks = 2 * tokens_n // BLOCK
    gen = torch.Generator(device="cuda").manual_seed(14)
    tokens = torch.randint(0, 32000, (tokens_n,), device="cuda", generator=gen)
    slots = torch.randperm(blocks * BLOCK, device="cuda", generator=gen)[:tokens_n]
    kv = paged(blocks, random=True)
    moved = tokens_n * CHUNK_BYTES / CHUNK
    results: dict[str, dict[str, list[float]]] = {n: {"store": [], "retrieve": []}
                                                  for n in made}
    try:
        for name, engine in made.items():  # warm: leases, mappings, the CPU backend's pool
            one_round(name, engine, tokens, kv, slots, blocks)
        order = list(made.items())
        for i in range(rounds):
            for name, engine in (order if i % 2 == 0 else order[::-1]):
                store_s, retrieve_s = one_round(name, engine, tokens, kv, slots, blocks)
                results[name]["store"].append(moved / store_s / 1e9)
                results[name]["retrieve"].append(moved / retrieve_s / 1e9)
    finally:
        for name in made:
            LMCacheEngineBuilder.destroy(f"bench-gpu-{name}")
        dax_file.unlink()
    return results


def native_kernels() -> str:
    """Whether LMCache's compiled CUDA kernels load beside this torch (it falls back to torch's
    own ops, with a warning, when they do not)."""
    try:
        import lmcache.cuda_ops  # noqa: F401
    except ImportError as e:
        return f"not loaded ({str(e).splitlines()[0][:120]}): LMCache's torch fallback"
    return "LMCache's compiled CUDA kernels (lmcache.cuda_ops)"


def report(out: Path, result: dict[str, dict[str, list[float]]], tokens_n: int, rounds: int,
           took_s: float) -> None:
    gpu = torch.cuda.get_device_name()
    lines = ["# LMCache's engine on a GPU: poold beside DaxBackend as its KV tier", "",
             f"Command: `python bench/lmcache_gpu.py --tokens {tokens_n} --rounds {rounds}`. "
             f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, took {took_s:.0f} s; {gpu}, "
             f"{os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}, torch {torch.__version__}; the connector's "
             f"kernels: {native_kernels()}.", "",
             f"{tokens_n} tokens of a 32-layer model's KV ({tokens_n // CHUNK} chunks of "
             f"{CHUNK_BYTES // MiB} MiB, {tokens_n * CHUNK_BYTES // CHUNK / GiB:.1f} GiB) "
             "in vLLM's paged layout on the GPU, stored by `LMCacheEngine.store` through "
             "LMCache's vLLM GPU connector into the plugin, the CPU copies dropped, then "
             "retrieved by `LMCacheEngine.retrieve` into a zeroed paged cache and compared "
             "with the original on every token of every layer. Store: from the call until "
             "the plugin holds every chunk; retrieve: from the call until the GPU cache is "
             f"filled. {rounds} rounds, the two alternating; median GB/s, and poold / DAX "
             "round by round (median, quartiles in brackets).", "",
             "| way | poold GB/s | DaxBackend GB/s | poold / DAX, per round |",
             "|---|---|---|---|"]
    for way in ("store", "retrieve"):
        p, d = result["poold"][way], result["dax"][way]
        q1, ratio, q3 = statistics.quantiles([a / b for a, b in zip(p, d, strict=True)], n=4)
        lines.append(f"| {way} | {statistics.median(p):.2f} | {statistics.median(d):.2f} | "
                     f"{ratio:.2f}x ({q1:.2f}-{q3:.2f}) |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-lmcache-gpu.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/lmcache_gpu.py: LMCache's GPU connector needs a CUDA device")
    started = time.monotonic()
    pool_bytes = 2 * args.tokens // CHUNK * CHUNK_BYTES + 256 * MiB
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm, \
            tempfile.TemporaryDirectory() as tmp, poold_serve(Path(tmp), pool_bytes) as state:
        result = measure(args.tokens, args.rounds, Path(shm), state)
    report(args.out, result, args.tokens, args.rounds, time.monotonic() - started)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
