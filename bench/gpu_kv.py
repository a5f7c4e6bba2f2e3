"""A model's real KV cache, from the GPU through poold and back, beside torch's own copies.

    python bench/gpu_kv.py [--tokens 8192] [--out docs/bench-gpu-kv.md]

A Llama-shaped transformer with random weights built from a config (nothing downloaded; the
`transformers` and CUDA torch of the machine) prefills a prompt on the GPU. Its KV cache is cut
into blocks the way LMCache cuts it (256 tokens of every layer, K and V: 8 MiB here) and
stored in a `poold.kv` KVStore leasing from a `poold serve` on an emulated pool; a greedy decode
on a cache rebuilt from the device's own blocks is the reference. Then the GPU cache is dropped, the
blocks are loaded back from poold and the decode is run again, fed the reference's tokens: the
loaded bytes must be the device's own, bit for bit; the logits are reported beside a second decode
on the device's own blocks (the GPU's own run-to-run noise).

Measured, each the median of `--repeat` runs over the whole cache, GB/s (1e9 bytes):
- store: GPU -> pinned staging -> poold (one put_many), beside torch's GPU -> pinned copy alone;
- store in place: GPU -> the reserved slots of leases registered with CUDA (put_in_place), beside
  the same torch copy;
- load, staged: poold -> pinned staging (one get_many_into) -> GPU, beside torch's pinned -> GPU;
- load, zero-copy: poold's block views (get_many_tensors) copied straight to the GPU, beside
  torch's copy from a pageable CPU tensor (what such a view is to CUDA);
- load, zero-copy from leases registered with CUDA (cudaHostRegister: page-locked for DMA, as an
  engine would register its KV tier), beside torch's copy from its own pinned memory.
Without a GPU it runs on the CPU (a check of the script, not a measurement).
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

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, if it can be
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: bench/ is not a package

from bench.poold_serve import poold_serve  # noqa: E402
from poold.client import PooldClient  # noqa: E402
from poold.kv import KVStore  # noqa: E402

MiB = 1 << 20
CHUNK = 256  # tokens a block, as LMCache's chunks
DECODE = 32


def model_config(small: bool) -> LlamaConfig:
    if small:
        return LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                           max_position_embeddings=65536)
    return LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                       max_position_embeddings=65536)


def layer_kv(cache: DynamicCache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's K and V, [batch, kv heads, tokens, head dim] (transformers 5's cache layers)."""
    held = cache.layers[layer]
    return held.keys, held.values


def blocks_of(cache: DynamicCache, layers: int, tokens: int) -> torch.Tensor:
    """The cache as blocks on its device, one a chunk of 256 tokens of every layer, K and V
    (LMCache's chunk: [layers, 2, heads, CHUNK, dim]), a prefix's first chunk first."""
    out = []
    for c in range(tokens // CHUNK):
        part = slice(c * CHUNK, (c + 1) * CHUNK)
        out.append(torch.stack([torch.stack((k[0, :, part], v[0, :, part]))
                                for k, v in (layer_kv(cache, layer) for layer in range(layers))]))
    return torch.stack(out).contiguous()


def cache_of(blocks: torch.Tensor, layers: int) -> DynamicCache:
    """The inverse of blocks_of: a cache whose layers are contiguous copies."""
    cache = DynamicCache()
    for layer in range(layers):
        k = torch.cat(list(blocks[:, layer, 0]), dim=1).unsqueeze(0)
        v = torch.cat(list(blocks[:, layer, 1]), dim=1).unsqueeze(0)
        cache.update(k.contiguous(), v.contiguous(), layer)
    return cache


@torch.inference_mode()
def decode(model: LlamaForCausalLM, cache: DynamicCache, first: torch.Tensor,
           forced: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
    """DECODE steps from `first` on: greedy, or fed `forced` (teacher forcing: a random-weight
    model's logits are near ties, so a free run amplifies the last bit into other tokens);
    returns the greedy choice of each step and every step's logits."""
    token, tokens, steps = first, [], []
    for step in range(DECODE):
        logits = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1]
        tokens.append(int(logits.argmax(-1)))
        steps.append(logits.float().cpu())
        chosen = tokens[-1] if forced is None else forced[step]
        token = torch.tensor([[chosen]], device=first.device)
    return tokens, torch.stack(steps)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_gbs(run: Callable[[], None], nbytes: int, repeat: int, device: torch.device
               ) -> float:
    return nbytes / statistics.median(timed_s(run, device) for _ in range(repeat)) / 1e9


def store_in_place(store: KVStore, keys: list[bytes], blocks: torch.Tensor) -> None:
    """The device's blocks copied straight into the slots poold reserved (no staging)."""
    def fill(positions: list[int], views: list[memoryview]) -> None:
        for position, view in zip(positions, views, strict=True):
            torch.frombuffer(view, dtype=torch.uint8).copy_(
                blocks[position].view(-1).view(torch.uint8), non_blocking=True)
        sync(blocks.device)  # written before the store indexes them

    assert all(store.put_in_place(keys, fill))


def timed_s(run: Callable[[], None], device: torch.device) -> float:
    sync(device)
    started = time.perf_counter()
    run()
    sync(device)
    return time.perf_counter() - started


def register_leases(store: KVStore, keys: list[bytes]) -> list[int]:
    """Page-lock each lease holding `keys` for the GPU's DMA (cudaHostRegister), found from a
    block's view and its place in the lease; returns the addresses registered."""
    bases: dict[str, tuple[int, int]] = {}
    for key, view in zip(keys, store.get_many_tensors(keys), strict=True):
        where = store.locate(key)
        assert view is not None and where is not None
        bases[where.lease_id] = (view.data_ptr() - where.slot_offset, where.lease_length)
    for address, length in bases.values():
        status = torch.cuda.cudart().cudaHostRegister(address, length, 0)
        if int(status) != 0:
            sys.exit(f"cudaHostRegister of a lease's {length} bytes failed: {status}")
    return [address for address, _length in bases.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--small", action="store_true", help="a tiny model (a CPU check)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-gpu-kv.md")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(0)
    config = model_config(args.small)
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    layers, tokens = config.num_hidden_layers, args.tokens - args.tokens % CHUNK
    prompt = torch.randint(0, config.vocab_size, (1, tokens), device=device)
    with torch.inference_mode():
        prefill = model(input_ids=prompt, use_cache=True)
    cache: DynamicCache = prefill.past_key_values
    first = prefill.logits[:, -1].argmax(-1, keepdim=True)
    on_gpu = blocks_of(cache, layers, tokens)
    count, block_bytes = on_gpu.shape[0], on_gpu[0].numel() * on_gpu.element_size()
    nbytes = count * block_bytes
    keys = [f"prompt-0/chunk-{i}".encode() for i in range(count)]
    pin = device.type == "cuda"
    staging = torch.empty_like(on_gpu, device="cpu", pin_memory=pin)
    pageable = torch.empty_like(on_gpu, device="cpu")
    pool = max(4 * nbytes, 512 * MiB)
    with tempfile.TemporaryDirectory() as work, poold_serve(Path(work), pool=pool) as state, \
            PooldClient(uds=str(state / "api.sock"), fd_socket=str(state / "fd.sock")) as client, \
            KVStore(client, block_bytes, max(2 * nbytes, 64 * MiB), 64 * MiB,
                    idle_release_s=3600) as store:
        flat = staging.view(count, -1).view(torch.uint8)

        def store_all() -> None:
            staging.copy_(on_gpu, non_blocking=True)
            sync(device)
            assert all(store.put_many(keys, flat.numpy()))
        store_all()
        # The reference decodes from a cache made of the device's own blocks the way the loaded
        # ones are made (contiguous layers): the prefill's own cache has other strides, for which
        # the attention kernels may sum in another order.
        del cache, prefill
        reference = decode(model, cache_of(on_gpu, layers), first)
        forced = reference[0]
        again = decode(model, cache_of(on_gpu, layers), first, forced)  # the GPU's own noise
        back = torch.empty_like(on_gpu)

        def load_staged() -> None:
            assert all(store.get_many_into(keys, flat.numpy()))
            back.copy_(staging, non_blocking=True)

        def load_views() -> None:
            for i, view in enumerate(store.get_many_tensors(keys, torch.bfloat16)):
                assert view is not None
                back[i].view(-1).copy_(view, non_blocking=True)

        def fresh_store_gbs(put: Callable[[], None]) -> float:
            """GB/s of `put` storing the whole cache afresh (discarded before each run)."""
            times = []
            for _ in range(args.repeat):
                store.discard(keys)
                times.append(timed_s(put, device))
            return nbytes / statistics.median(times) / 1e9

        rows = [("store: GPU -> pinned -> poold (put_many)", fresh_store_gbs(store_all),
                 "GPU -> pinned (torch)",
                 median_gbs(lambda: staging.copy_(on_gpu, non_blocking=True), nbytes,
                            args.repeat, device))]
        results = {}

        def check(name: str, load: Callable[[], None]) -> None:
            """Load into a zeroed buffer, compare its bytes, decode from it."""
            back.zero_()
            load()
            sync(device)
            results[name] = (torch.equal(back, on_gpu),
                             *decode(model, cache_of(back, layers), first, forced))

        check("staged", load_staged)
        check("zero-copy", load_views)

        def beside(way: str, ours: Callable[[], None], peer: str,
                   theirs: Callable[[], None]) -> None:
            rows.append((way, median_gbs(ours, nbytes, args.repeat, device), peer,
                         median_gbs(theirs, nbytes, args.repeat, device)))

        beside("load: poold -> pinned (get_many_into) -> GPU", load_staged,
               "pinned -> GPU (torch)", lambda: back.copy_(staging, non_blocking=True))
        beside("load: poold views (get_many_tensors) -> GPU", load_views,
               "pageable -> GPU (torch)", lambda: back.copy_(pageable))
        if device.type == "cuda":  # the leases' memory pinned for DMA, as an engine would
            registered = register_leases(store, keys)
            try:
                check("zero-copy, registered", load_views)
                beside("load: poold views of leases registered with CUDA -> GPU", load_views,
                       "pinned -> GPU (torch)", lambda: back.copy_(staging, non_blocking=True))
                rows.insert(1, ("store: GPU -> leases registered with CUDA (put_in_place)",
                                fresh_store_gbs(lambda: store_in_place(store, keys, on_gpu)),
                                "GPU -> pinned (torch)", rows[0][3]))
                check("stored in place, staged", load_staged)
            finally:
                for address in registered:
                    torch.cuda.cudart().cudaHostUnregister(address)
        stats = store.stats()
    noise = float((again[1] - reference[1]).abs().max())
    checks = {name: (bytes_equal, sum(a == b for a, b in zip(chosen, forced, strict=True)),
                     float((logits - reference[1]).abs().max()))
              for name, (bytes_equal, chosen, logits) in results.items()}
    report(args, device, config, tokens, count, block_bytes, rows, checks, noise, stats)
    failed = [name for name, (bytes_equal, _agree, _diff) in checks.items() if not bytes_equal]
    if failed:
        sys.exit(f"the KV bytes loaded back from poold differ: {failed}")


def report(args: argparse.Namespace, device: torch.device, config: LlamaConfig, tokens: int,
           count: int, block_bytes: int, rows: list[tuple[str, float, str, float]],
           checks: dict[str, tuple[bool, int, float]], noise: float, stats: object) -> None:
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "no GPU (CPU run)"
    nbytes = count * block_bytes
    lines = ["# A model's KV cache from the GPU through poold and back", "",
             f"Command: `python bench/gpu_kv.py --tokens {args.tokens}"
             f"{' --small' if args.small else ''}`. Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
             f"on {gpu}, {os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}, torch {torch.__version__}.", "",
             f"Model: Llama-shaped, random weights from a config ({config.num_hidden_layers} "
             f"layers, {config.num_key_value_heads} KV heads of {config.head_dim}, bfloat16); "
             f"a {tokens}-token prompt prefilled on the device: {nbytes / MiB:.0f} MiB of KV "
             f"in {count} blocks of {block_bytes / MiB:g} MiB (LMCache's chunk: 256 tokens of "
             "every layer, K and V). poold: `poold serve` on an emulated pool (memfd leases), "
             f"a KVStore of 64 MiB leases. Median of {args.repeat} runs over the whole cache; "
             "1 GB = 1e9 bytes.", "",
             "| way | poold GB/s | torch alone | torch GB/s | poold / torch |",
             "|---|---|---|---|---|"]
    for way, ours, theirs_name, theirs in rows:
        lines.append(f"| {way} | {ours:.2f} | {theirs_name} | {theirs:.2f} | "
                     f"{ours / theirs:.2f}x |")
    lines += ["", f"Checked: the {count} blocks loaded back equal the device's own bytes, bit for "
              "bit (the run fails otherwise). A decode of "
              f"{DECODE} steps on a cache rebuilt from them, fed the reference's greedy tokens, "
              "is the model reading those bytes: its logits differ from the reference's by about "
              "what a second decode on the device's own blocks does (largest difference "
              f"{noise:g}): the GPU's kernels do not sum in the same order every run, "
              "deterministic algorithms asked for or not.", "",
              "| loaded | KV bytes equal | greedy choices as the reference's | logits' largest "
              "difference |", "|---|---|---|---|"]
    lines += [f"| {name} | {'yes' if bytes_equal else 'NO'} | {agree} of {DECODE} | {diff:g} |"
              for name, (bytes_equal, agree, diff) in checks.items()]
    lines += ["", f"Store's counters at the end: {stats}."]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
