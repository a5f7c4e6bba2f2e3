"""Data path: GB/s of put and get through poold beside the memcpy ceiling and peers, in one run.

    python bench/data_path.py [--quick] [--out docs/bench-data-path.md]

Starts a daemon (`python -m poold.cli.main serve`) on an emulated device (each lease its own
sealed memfd, tmpfs pages), then, for each block size (4 KiB, 64 KiB, 1 MiB, 16 MiB) over a
working set of 256 MiB (64 MiB with --quick), runs every case side by side: one warm-up pass, then
5 rounds in which each case does one put pass and one get pass (the order rotates every round so
drift hits all cases alike). Reported: the median GB/s (1e9 bytes/s) of the 5 rounds, and ratios
taken per round between two cases of the same round (paired), then the median of those.

Cases
- memcpy ceiling: numpy.copyto per block, anonymous -> anonymous (numpy asks for transparent huge
  pages on big arrays); and, as a diagnostic, the same on 4 KiB pages and in one call.
- poold raw mapping: numpy.copyto per block into/out of a pre-faulted lease mapping.
- poold KV tier: put/get per block (get returns bytes), get_into per block, put_many /
  get_many_into / get_many in batches of 64 blocks, and zero-copy get_view / get_many_views
  (microseconds per block).
- first put into a fresh lease (its memfd's pages punched out first, so no page exists
  yet; mapped by the SDK, which pre-faults) vs the second put into the same, now warm, mapping;
  also without pre-fault, with map() counted, and a fresh KVStore's first fill (lease grants and
  mapping inside put_many).
- multiprocessing.shared_memory: one segment; one segment per block.
- Redis on 127.0.0.1:6379 (database 9; only keys this run made are deleted): redis-py, and
  `redis-benchmark -d SIZE -c 1 -n N -t set,get --csv` (Debian redis-tools).
- LMCache DaxCore (per key and 64 keys per call) and Mooncake (put_from / get_into) when
  importable (never installed by this script); else their published figures from
  shared/reference/peers.md are printed and marked as not measured here. They pull large
  wheels, so install them into a separate venv and run the bench with its interpreter:
      python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install torch==2.13.0
      /work/peers-venv/bin/pip install -e . numpy redis matplotlib lmcache==0.5.6 \
          mooncake-transfer-engine-non-cuda
      /work/peers-venv/bin/python bench/data_path.py

Slow cases are bounded: at most CAPS[case] blocks per pass (GB/s is still bytes / time). Needs
numpy; redis-py and matplotlib are optional (`pip install redis matplotlib` into the venv).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import importlib.util
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
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poold.client import Lease, PooldClient  # noqa: E402
from poold.kv import KVStore  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
PAGE = 4096
BLOCK_SIZES = [4 * KiB, 64 * KiB, MiB, 16 * MiB]
BATCH = 64  # blocks per put_many / get_many_into call
VIEW_CALLS = 4096  # zero-copy gets timed over at least this many blocks (passes repeated)
LEASE_BYTES = 64 * MiB  # the KV store's lease size
REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 9
GB = 1e9

# Published / previously measured figures at 1 MiB blocks (GB/s put, get), from
# shared/reference/peers.md; shown only for peers that cannot run here.
PUBLISHED = {
    "LMCache DaxCore": (4.8, 4.7, "LMCache 0.5.6 DaxCore on a /dev/shm file, 1 key per call; "
                        "5.1 / 5.3 with 32 keys per call"),
    "Mooncake store": (0.75, 2.7, "Mooncake 0.3.13 over TCP, put_from / get_into "
                       "(put 0.5-0.75)"),
}


def size_name(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


# --- plumbing ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def poold_daemon(emulate: int) -> Iterator[str]:
    """A daemon in a subprocess (its threads stay off this process's GIL), emulated device."""
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="poold-bench-", dir=base) as state:
        port = free_port()
        env = {**os.environ, "POOLD_HOST_ID": "bench-data-path", "POOLD_FD_STORE": "none",
               "POOLD_LOG_LEVEL": "WARNING", "POOLD_WATCH_UDEV": "false",
               "POOLD_DISCOVER_DAX": "false"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "poold.cli.main", "serve", "--state-dir", state,
             "--emulate", str(emulate), "--listen", f"127.0.0.1:{port}"], env=env, cwd=ROOT,
            preexec_fn=_die_with_parent)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"poold exited with {proc.returncode}")
                try:
                    with PooldClient(url, timeout_s=2) as probe:
                        probe.raw("GET", "/healthz")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise RuntimeError("poold did not come up") from None
                    time.sleep(0.2)
            # The SDK takes its bearer token from $POOLD_TOKEN: the daemon's admin credential.
            os.environ["POOLD_TOKEN"] = (Path(state) / "admin.token").read_text().strip()
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _die_with_parent() -> None:
    """In the daemon child: SIGTERM it if this bench dies without cleaning up."""
    PR_SET_PDEATHSIG = 1
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


def punch(path: str, offset: int, length: int) -> None:
    """Free the pages under a lease's memory (its memfd, by the map_path the API reports), as if
    never written. Only ever called on leases this run holds, from its own daemon."""
    fd = os.open(path, os.O_RDWR)
    try:
        if _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length):
            raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE)")
    finally:
        os.close(fd)


def release_fresh(lease: Lease) -> None:
    """Release; the daemon empties the lease's memfd (its pages go back to the kernel)."""
    lease.release()


def timed(fn: Callable[[], Any]) -> float:
    """Seconds fn takes with the cyclic GC off (run_all collects once per round instead)."""
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def copy_blocks(dst: np.ndarray, src: np.ndarray, bs: int, n: int) -> None:
    """The per-block loop every numpy case shares: views at block offsets, one copyto each."""
    for o in range(0, n * bs, bs):
        np.copyto(dst[o:o + bs], src[o:o + bs])


def anon(nbytes: int, huge: bool = True, skew: int = 0) -> np.ndarray:
    """A written (so populated) anonymous array starting `skew` bytes past a page boundary.

    numpy's big arrays start 16 bytes past a page (glibc's mmap chunk header). Copying between
    a page-aligned mapping and such a buffer puts source and destination 16 bytes apart modulo
    4 KiB, which this machine's memcpy (glibc 2.36, rep movsb on AMD) handles up to 4x slower;
    every case therefore uses page-aligned buffers, as engines' pinned buffers are, and one
    diagnostic row shows the skewed case. huge=False keeps numpy from madvising THP."""
    core = getattr(np, "_core", None) or np.core
    madvise = getattr(core.multiarray, "_set_madvise_hugepage", None)
    previous = madvise(huge) if madvise else None
    try:
        raw = np.empty(nbytes + 2 * PAGE, dtype=np.uint8)
    finally:
        if madvise and previous is not None:
            madvise(previous)
    start = (-raw.ctypes.data) % PAGE + skew
    arr = raw[start:start + nbytes]
    arr[:] = 1
    return arr


def kv_keys(tag: str, n: int) -> list[bytes]:
    prefix = tag.encode()[:8].ljust(8, b"-")
    return [prefix + i.to_bytes(8, "little") for i in range(n)]


class Ctx:
    """What every case shares for one block size."""

    def __init__(self, client: PooldClient, src: np.ndarray, dst: np.ndarray, bs: int,
                 n: int) -> None:
        self.client, self.src, self.dst, self.bs, self.n = client, src, dst, bs, n
        self.nbytes = bs * n


# --- cases -------------------------------------------------------------------------------------
# A case sets up once per block size, then run() does one timed round and returns
# {op: value}: GB/s for put/get-like ops, microseconds per block for "us/..." ops.

class Case:
    name = ""
    cap: int | None = None  # most blocks per pass
    ops: tuple[str, ...] = ("put", "get")

    def setup(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.n = min(ctx.n, self.cap) if self.cap else ctx.n
        self.nbytes = self.n * ctx.bs

    def reset(self) -> None:
        """Untimed, before each put pass."""

    def put(self) -> None:
        raise NotImplementedError

    def get(self) -> None:
        raise NotImplementedError

    def run(self) -> dict[str, float]:
        self.reset()
        return {op: self.nbytes / timed(getattr(self, op)) / GB for op in self.ops}

    def teardown(self) -> None:
        pass


class Memcpy(Case):
    name = "memcpy ceiling (numpy copyto, anon -> anon, per block)"
    NO_THP = "memcpy, 4 KiB pages (no THP), per block [diagnostic]"

    def __init__(self, huge: bool = True) -> None:
        self.huge = huge
        if not huge:
            self.name = self.NO_THP

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.a = anon(ctx.nbytes, self.huge) if not self.huge else ctx.src
        self.b = anon(ctx.nbytes, self.huge) if not self.huge else ctx.dst

    def put(self) -> None:
        copy_blocks(self.b, self.a, self.ctx.bs, self.n)

    def get(self) -> None:
        copy_blocks(self.a, self.b, self.ctx.bs, self.n)

    def teardown(self) -> None:
        del self.a, self.b


class MemcpyOneCall(Case):
    name = "memcpy, one call over the working set [diagnostic]"

    def put(self) -> None:
        np.copyto(self.ctx.dst, self.ctx.src)

    def get(self) -> None:
        np.copyto(self.ctx.src, self.ctx.dst)


class ArrayCase(Case):
    """A case whose store is one byte array `arr`: blocks are copied in and out at offsets."""

    arr: np.ndarray

    def put(self) -> None:
        copy_blocks(self.arr, self.ctx.src, self.ctx.bs, self.n)

    def get(self) -> None:
        copy_blocks(self.ctx.dst, self.arr, self.ctx.bs, self.n)


class RawLease(ArrayCase):
    name = "poold raw mapping (pre-faulted lease, numpy copyto per block)"

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.lease = ctx.client.lease(ctx.nbytes, ttl_s=60)
        self.mapping = self.lease.map()
        self.arr = self.mapping.numpy()

    def teardown(self) -> None:
        del self.arr
        release_fresh(self.lease)


class RawLeaseSkewed(RawLease):
    name = "poold raw mapping, caller buffer at page + 16 (numpy's default) [diagnostic]"

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.buf = anon(ctx.nbytes, skew=16)

    def put(self) -> None:
        copy_blocks(self.arr, self.buf, self.ctx.bs, self.n)

    def get(self) -> None:
        copy_blocks(self.buf, self.arr, self.ctx.bs, self.n)

    def teardown(self) -> None:
        del self.buf
        super().teardown()


NT_CHILD = """
import mmap, os, sys, time
import numpy as np
path, offset, length, bs, n = sys.argv[1], *map(int, sys.argv[2:])
fd = os.open(path, os.O_RDWR)
mm = mmap.mmap(fd, length, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, offset=offset)
os.close(fd)
arr = np.frombuffer(mm, dtype=np.uint8)
raw = np.empty(n * bs + 8192, dtype=np.uint8)
start = (-raw.ctypes.data) % 4096
buf = raw[start:start + n * bs]
buf[:] = 1
def copy(dst, src):
    for o in range(0, n * bs, bs):
        np.copyto(dst[o:o + bs], src[o:o + bs])
copy(arr, buf); copy(buf, arr)
t0 = time.perf_counter(); copy(arr, buf); t1 = time.perf_counter(); copy(buf, arr)
t2 = time.perf_counter()
print(n * bs / (t1 - t0) / 1e9, n * bs / (t2 - t1) / 1e9)
"""


class RawLeaseNT(Case):
    """The raw-mapping loop in a child process whose glibc copies with non-temporal stores
    from NT_THRESHOLD bytes on (GLIBC_TUNABLES). Per round: one warm-up pass, one timed pass."""

    name = ("poold raw mapping, glibc non-temporal copies from 1 MiB (GLIBC_TUNABLES, "
            "child process) [diagnostic]")
    NT_THRESHOLD = MiB

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.lease = ctx.client.lease(ctx.nbytes, ttl_s=60)
        self.mapping = self.lease.map()  # keeps the extent's pages while children come and go

    def run(self) -> dict[str, float]:
        info = self.lease.info
        env = {**os.environ,
               "GLIBC_TUNABLES": f"glibc.cpu.x86_non_temporal_threshold={self.NT_THRESHOLD:#x}"}
        out = subprocess.run(
            [sys.executable, "-c", NT_CHILD, str(info.map_path), str(info.map_offset),
             str(info.length),
             str(self.ctx.bs), str(self.n)], env=env, capture_output=True, text=True,
            timeout=120, check=True).stdout.split()
        return {"put": float(out[0]), "get": float(out[1])}

    def teardown(self) -> None:
        self.mapping.close()
        release_fresh(self.lease)


class KVCase(Case):
    """A KVStore holding the whole working set; every put pass starts from discarded keys."""

    tag = "kv"

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.store = KVStore(ctx.client, ctx.bs, budget_bytes=ctx.nbytes + LEASE_BYTES,
                             lease_bytes=max(LEASE_BYTES, ctx.bs), ttl_s=60,
                             idle_release_s=3600)
        self.keys = kv_keys(self.tag, self.n)
        self.src = memoryview(ctx.src)[:self.nbytes]
        self.dst = memoryview(ctx.dst)[:self.nbytes]

        self.view_passes = -(-VIEW_CALLS // self.n)

    def reset(self) -> None:
        self.store.discard(self.keys)

    def teardown(self) -> None:
        self.store.close()  # releases its leases: the daemon empties their memory


class KVPerBlock(KVCase):
    name = "poold KV, per block: put() / get() -> bytes"
    tag = "kv1"
    ops = ("put", "get", "get_into", "us/get_view")

    def put(self) -> None:
        put, keys, src, bs = self.store.put, self.keys, self.src, self.ctx.bs
        for i in range(self.n):
            if not put(keys[i], src[i * bs:(i + 1) * bs]):
                raise RuntimeError("put refused")

    def get(self) -> None:
        get = self.store.get
        for key in self.keys:
            if get(key) is None:
                raise RuntimeError("get missed")

    def get_into(self) -> None:
        get_into, keys, dst, bs = self.store.get_into, self.keys, self.dst, self.ctx.bs
        for i in range(self.n):
            get_into(keys[i], dst[i * bs:(i + 1) * bs])

    def get_view(self) -> None:
        get_view = self.store.get_view
        for _ in range(self.view_passes):
            for key in self.keys:
                get_view(key)

    def run(self) -> dict[str, float]:
        self.reset()
        out = {op: self.nbytes / timed(getattr(self, op)) / GB
               for op in ("put", "get", "get_into")}
        out["us/get_view"] = timed(self.get_view) / (self.n * self.view_passes) * 1e6
        return out


class KVBatched(KVCase):
    name = f"poold KV, batched ({BATCH} blocks per call): put_many / get_many_into"
    tag = "kvb"
    ops = ("put", "get", "get_many", "us/get_many_views")

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.batch = min(BATCH, self.n)
        self.chunks = [(i, min(i + self.batch, self.n)) for i in range(0, self.n, self.batch)]

    def put(self) -> None:
        put_many, keys, src, bs = self.store.put_many, self.keys, self.src, self.ctx.bs
        for a, b in self.chunks:
            if not all(put_many(keys[a:b], src[a * bs:b * bs])):
                raise RuntimeError("put refused")

    def get(self) -> None:
        get_many_into, keys, dst, bs = self.store.get_many_into, self.keys, self.dst, self.ctx.bs
        for a, b in self.chunks:
            get_many_into(keys[a:b], dst[a * bs:b * bs])

    def get_many(self) -> None:
        get_many, keys = self.store.get_many, self.keys
        for a, b in self.chunks:
            get_many(keys[a:b])

    def get_many_views(self) -> None:
        views, keys = self.store.get_many_views, self.keys
        for _ in range(self.view_passes):
            for a, b in self.chunks:
                views(keys[a:b])

    def run(self) -> dict[str, float]:
        self.reset()
        out = {op: self.nbytes / timed(getattr(self, op)) / GB
               for op in ("put", "get", "get_many")}
        out["us/get_many_views"] = (timed(self.get_many_views)
                                    / (self.n * self.view_passes) * 1e6)
        return out

    def check(self) -> None:
        """The bytes that come back are the bytes that went in."""
        self.put()
        self.ctx.dst[:self.nbytes] = 0
        self.get()
        if not np.array_equal(self.ctx.dst[:self.nbytes], self.ctx.src[:self.nbytes]):
            raise AssertionError("get_many_into returned other bytes than put_many stored")
        self.reset()


class FirstPut(Case):
    """A fresh lease per round: its pages punched out, mapped the SDK's way."""

    name = "first put into a fresh lease (SDK map, pre-faulted) vs warm"
    ops = ("fresh", "warm", "warm2", "fresh+map", "no-prefault")

    def pass_into(self, mapping: Any) -> float:
        """One timed put pass; the numpy view is gone when this returns (so close() can unmap)."""
        arr = mapping.numpy()
        return timed(lambda: copy_blocks(arr, self.ctx.src, self.ctx.bs, self.n))

    def run(self) -> dict[str, float]:
        ctx = self.ctx
        lease = ctx.client.lease(ctx.nbytes, ttl_s=60, keepalive=False)
        info = lease.info
        try:
            punch(str(info.map_path), info.map_offset, info.length)
            t0 = time.perf_counter()
            mapping = lease.map()
            t_map = time.perf_counter() - t0
            t_first = self.pass_into(mapping)
            t_warm = self.pass_into(mapping)
            t_warm2 = self.pass_into(mapping)
            mapping.close()
            punch(str(info.map_path), info.map_offset, info.length)
            t_nopf = self.pass_into(lease.map(prefault=False))
        finally:
            release_fresh(lease)
        return {"fresh": self.nbytes / t_first / GB, "warm": self.nbytes / t_warm / GB,
                "warm2": self.nbytes / t_warm2 / GB,
                "fresh+map": self.nbytes / (t_first + t_map) / GB,
                "no-prefault": self.nbytes / t_nopf / GB}


class KVFirstFill(Case):
    name = "first put_many into a fresh KVStore (grants + maps inside) vs warm"
    ops = ("fresh", "warm")

    def run(self) -> dict[str, float]:
        ctx = self.ctx
        store = KVStore(ctx.client, ctx.bs, budget_bytes=ctx.nbytes + LEASE_BYTES,
                        lease_bytes=max(LEASE_BYTES, ctx.bs), ttl_s=60, idle_release_s=3600)
        keys = kv_keys("kvfresh", self.n)
        src, bs, batch = memoryview(ctx.src), ctx.bs, min(BATCH, self.n)

        def fill() -> None:
            for a in range(0, self.n, batch):
                b = min(a + batch, self.n)
                store.put_many(keys[a:b], src[a * bs:b * bs])

        try:
            t_first = timed(fill)
            store.discard(keys)
            t_warm = timed(fill)
        finally:
            store.close()  # releases its leases: the daemon empties their memory
        return {"fresh": self.nbytes / t_first / GB, "warm": self.nbytes / t_warm / GB}


class ShmOne(ArrayCase):
    name = "shared_memory, one segment (numpy copyto per block)"

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.shm = shared_memory.SharedMemory(create=True, size=ctx.nbytes)
        self.arr = np.ndarray((ctx.nbytes,), dtype=np.uint8, buffer=self.shm.buf)

    def teardown(self) -> None:
        del self.arr
        self.shm.close()
        self.shm.unlink()


class ShmPerBlock(Case):
    name = "shared_memory, one segment per block (create+copy / attach+copy)"

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.names = [f"pdb{os.getpid()}_{i}" for i in range(self.n)]
        self.src = memoryview(ctx.src)
        self.dst = memoryview(ctx.dst)
        self.made = False

    def reset(self) -> None:
        if self.made:
            for name in self.names:
                with contextlib.suppress(FileNotFoundError):
                    seg = shared_memory.SharedMemory(name=name)
                    seg.close()
                    seg.unlink()
            self.made = False

    def put(self) -> None:
        bs, src = self.ctx.bs, self.src
        self.made = True
        for i, name in enumerate(self.names):
            seg = shared_memory.SharedMemory(name=name, create=True, size=bs)
            seg.buf[:bs] = src[i * bs:(i + 1) * bs]
            seg.close()

    def get(self) -> None:
        bs, dst = self.ctx.bs, self.dst
        for i, name in enumerate(self.names):
            seg = shared_memory.SharedMemory(name=name)
            dst[i * bs:(i + 1) * bs] = seg.buf[:bs]
            seg.close()

    def teardown(self) -> None:
        self.reset()


def redis_reachable() -> bool:
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisPy(Case):
    name = "Redis via redis-py (SET / GET per block)"

    def __init__(self, cap: int) -> None:
        import redis

        self.cap = cap
        self.r = redis.Redis(REDIS_HOST, REDIS_PORT, db=REDIS_DB)

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        self.keys = [f"poold-bench:{os.getpid()}:{ctx.bs}:{i}" for i in range(self.n)]
        self.src = memoryview(ctx.src)

    def put(self) -> None:
        bs, src, r = self.ctx.bs, self.src, self.r
        for i, key in enumerate(self.keys):
            r.set(key, src[i * bs:(i + 1) * bs])

    def get(self) -> None:
        r, bs = self.r, self.ctx.bs
        for key in self.keys:
            value = r.get(key)
            if value is None or len(value) != bs:
                raise RuntimeError("redis GET missed")

    def teardown(self) -> None:
        for a in range(0, len(self.keys), 1000):
            self.r.delete(*self.keys[a:a + 1000])


class RedisBenchmark(Case):
    name = "Redis via its C client (redis-benchmark -c 1)"

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def run(self) -> dict[str, float]:
        cmd = ["redis-benchmark", "-h", REDIS_HOST, "-p", str(REDIS_PORT), "--dbnum",
               str(REDIS_DB), "-d", str(self.ctx.bs), "-c", "1", "-n", str(self.n),
               "-t", "set,get", "--csv"]
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              check=True).stdout
        rps = {}
        for line in text.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if len(cells) > 1 and cells[0] in ("SET", "GET"):
                rps[cells[0]] = float(cells[1])
        return {"put": rps["SET"] * self.ctx.bs / GB, "get": rps["GET"] * self.ctx.bs / GB}

    def teardown(self) -> None:
        # redis-benchmark's one key; it lives in the database this bench uses alone.
        subprocess.run(["redis-cli", "-h", REDIS_HOST, "-p", str(REDIS_PORT), "-n",
                        str(REDIS_DB), "del", "key:__rand_int__"], capture_output=True,
                       timeout=30, check=False)


class LMCacheDax(Case):
    """Only when lmcache is importable (it is never installed by this bench).

    Drives `lmcache.v1.storage_backend.dax.core.DaxCore` directly (LMCache 0.5.6's DAX/CXL
    backend: a MAP_SHARED mapping of a device or file, fixed slots, ctypes.memmove per object) on
    a file in /dev/shm, with the bench's page-aligned buffers wrapped as TensorMemoryObj views
    (no copy). put_many treats an existing key as a no-op success, so every put pass starts from
    force-deleted keys (checked)."""

    name = "LMCache DaxCore (put_many / load_many_into, 1 key per call)"
    per_call = 1

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        import torch
        from lmcache.v1.memory_management import (
            MemoryFormat,
            MemoryObjMetadata,
            TensorMemoryObj,
        )
        from lmcache.v1.storage_backend.dax.core import DaxCore

        self.path = f"/dev/shm/poold-bench-lmcache-{os.getpid()}-{self.per_call}"
        with open(self.path, "wb") as f:
            f.truncate(self.nbytes)
        self.core = DaxCore(device_path=self.path, max_dax_size_bytes=self.nbytes,
                            slot_bytes=ctx.bs)

        def objs(arr: np.ndarray) -> list[Any]:
            out = []
            for i in range(self.n):
                t = torch.from_numpy(arr[i * ctx.bs:(i + 1) * ctx.bs])
                # 0.5.6 sizes an object from shapes/dtypes (get_shapes asserts they are set).
                meta = MemoryObjMetadata(shape=t.shape, dtype=torch.uint8,
                                         address=t.data_ptr(), phy_size=ctx.bs, ref_count=1,
                                         fmt=MemoryFormat.BINARY, shapes=[t.shape],
                                         dtypes=[torch.uint8])
                out.append(TensorMemoryObj(t, meta, None))
            return out

        self.src_objs, self.dst_objs = objs(ctx.src), objs(ctx.dst)
        self.keys = [f"k{i}" for i in range(self.n)]
        k = self.per_call
        self.batches = [(self.keys[a:a + k], self.src_objs[a:a + k], self.dst_objs[a:a + k])
                        for a in range(0, self.n, k)]

    def reset(self) -> None:
        self.core.delete_many(self.keys, force=True)
        if any(self.core.exists_many(self.keys)):
            raise RuntimeError("DaxCore keys survived delete_many(force=True)")

    def put(self) -> None:
        put_many = self.core.put_many
        for keys, srcs, _ in self.batches:
            if not all(put_many(keys, srcs)):
                raise RuntimeError("DaxCore put failed")

    def get(self) -> None:
        load = self.core.load_many_into
        for keys, _, dsts in self.batches:
            if not all(load(keys, dsts)):
                raise RuntimeError("DaxCore load failed")

    def check(self) -> None:
        """Untimed, after the warm-up round: what get wrote equals what put read."""
        check_round_trip(self)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.core.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class LMCacheDaxBatched(LMCacheDax):
    name = f"LMCache DaxCore (put_many / load_many_into, {BATCH} keys per call)"
    per_call = BATCH


def check_round_trip(case: Case) -> None:
    """Scribble over the destination, get every block once more, compare with the source."""
    n = case.nbytes
    dst, src = case.ctx.dst, case.ctx.src
    dst[:n] = 0xEE
    case.get()
    if not np.array_equal(dst[:n], src[:n]):
        raise RuntimeError(f"{case.name}: data read back differs from data put")


def mooncake_master_path() -> str | None:
    """mooncake_master on PATH, or beside this interpreter (a venv that is not activated)."""
    beside = Path(sys.executable).parent / "mooncake_master"
    return shutil.which("mooncake_master") or (str(beside) if beside.exists() else None)


class Mooncake(Case):
    """Only when mooncake is importable and mooncake_master is found (never installed here).

    Mooncake 0.3.13 (mooncake-transfer-engine-non-cuda): its master on loopback, one client
    (P2PHANDSHAKE metadata, TCP protocol) that also mounts the segment the objects live in, so
    client and segment share this process, as in shared/reference/peers.md. The master keeps a
    10 s lease on an object after each get and put_from on an existing key returns 0 without
    copying: every put pass starts from keys removed with force=True (checked)."""

    name = "Mooncake store over TCP (put_from / get_into)"

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def setup(self, ctx: Ctx) -> None:
        super().setup(ctx)
        from mooncake.store import MooncakeDistributedStore

        port = free_port()
        self.master = subprocess.Popen(
            [str(mooncake_master_path()), f"--rpc_port={port}", "--rpc_address=127.0.0.1",
             # its metrics server defaults to 0.0.0.0:9003: off, and on a free port regardless
             "--enable_metric_reporting=false", f"--metrics_port={free_port()}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 30
        while True:
            if self.master.poll() is not None:
                raise RuntimeError(f"mooncake_master exited with {self.master.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("mooncake_master did not come up")
            time.sleep(0.1)
        self.store = MooncakeDistributedStore()
        segment = 4 * self.nbytes  # well above the working set
        rc = self.store.setup("127.0.0.1", "P2PHANDSHAKE", segment, segment, "tcp", "",
                              f"127.0.0.1:{port}")
        if rc:
            raise RuntimeError(f"mooncake setup returned {rc}")
        for arr in (ctx.src, ctx.dst):
            if self.store.register_buffer(arr.ctypes.data, arr.nbytes):
                raise RuntimeError("mooncake register_buffer failed")
        self.keys = [f"k{i}" for i in range(self.n)]

    def reset(self) -> None:
        OBJECT_NOT_FOUND = -704
        codes = {self.store.remove(key, True) for key in self.keys} - {0, OBJECT_NOT_FOUND}
        if codes:
            raise RuntimeError(f"mooncake remove(force=True) returned {sorted(codes)}")

    def put(self) -> None:
        base, bs = self.ctx.src.ctypes.data, self.ctx.bs
        for i, key in enumerate(self.keys):
            if self.store.put_from(key, base + i * bs, bs) != 0:
                raise RuntimeError("mooncake put_from failed")

    def get(self) -> None:
        base, bs = self.ctx.dst.ctypes.data, self.ctx.bs
        for i, key in enumerate(self.keys):
            if self.store.get_into(key, base + i * bs, bs) != bs:
                raise RuntimeError("mooncake get_into failed")

    def check(self) -> None:
        check_round_trip(self)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.store.close()
        with contextlib.suppress(Exception):
            self.master.terminate()
            self.master.wait(30)


# --- the run -----------------------------------------------------------------------------------

Results = dict[int, dict[str, dict[str, list[float]]]]  # bs -> case -> op -> per-round values


def run_all(url: str, working_set: int, rounds: int, quick: bool,
            notes: dict[str, str]) -> tuple[Results, list[str]]:
    scale = 4 if quick else 1
    cases: list[Case] = [Memcpy(), RawLease(), KVPerBlock(), KVBatched(), FirstPut(),
                         KVFirstFill(), ShmOne(), ShmPerBlock(cap=8192 // scale),
                         Memcpy(huge=False), MemcpyOneCall(), RawLeaseSkewed(), RawLeaseNT()]
    if redis_reachable():
        try:
            cases.append(RedisPy(cap=8192 // scale))
        except ImportError:
            notes["Redis via redis-py"] = "redis-py not installed (`pip install redis`)"
        if shutil.which("redis-benchmark"):
            cases.append(RedisBenchmark(cap=16384 // scale))
        else:
            notes["Redis via its C client"] = "redis-benchmark absent (Debian redis-tools)"
    else:
        notes["Redis"] = f"nothing answers on {REDIS_HOST}:{REDIS_PORT}"
    if importlib.util.find_spec("lmcache") is not None:
        cases += [LMCacheDax(), LMCacheDaxBatched()]
        notes["LMCache DaxCore"] = (
            "measured here: DaxCore driven directly (LMCache's own `lmcache bench l2 "
            "--l2-adapter dax` fails on every store in 0.5.6) on a file in /dev/shm sized to "
            "the working set, one slot per block; its mapping is not pre-faulted, the warm-up "
            "round faults it in; this bench's buffers wrapped as TensorMemoryObj without a copy; "
            "keys force-deleted before each put pass; data read back checked after warm-up")
    else:
        notes["LMCache DaxCore"] = "not installed"
    if importlib.util.find_spec("mooncake") is not None and mooncake_master_path():
        cases.append(Mooncake(cap=8192 // scale))
        notes["Mooncake store"] = (
            "measured here: mooncake_master on loopback, one client over TCP with P2PHANDSHAKE "
            "metadata that also holds the segment (4x the working set), buffers registered, "
            "put_from / get_into per block; keys removed with force=True before each put pass "
            "(without force the 10 s lease blocks removal and put_from on an existing key "
            f"returns 0 without copying); at most {8192 // scale} blocks per pass; data read "
            "back checked after warm-up")
    else:
        notes["Mooncake store"] = "not installed"

    results: Results = {}
    spent: dict[str, float] = {}  # seconds in timed rounds per case, over all block sizes
    order = [c.name for c in cases]
    with PooldClient(url, timeout_s=30) as client:
        src = anon(working_set)
        pages = src.reshape(-1, PAGE)  # distinct bytes per page, so a misplaced block shows
        pages[:] = (np.arange(PAGE) % 251).astype(np.uint8)
        pages[:, :8] = np.arange(len(pages), dtype=np.uint64).view(np.uint8).reshape(-1, 8)
        dst = anon(working_set)
        for bs in BLOCK_SIZES:
            started = time.monotonic()
            ctx = Ctx(client, src, dst, bs, working_set // bs)
            live: list[Case] = []
            for case in cases:
                try:
                    case.setup(ctx)
                    case.run()  # warm-up round, discarded
                    if isinstance(case, KVBatched | LMCacheDax | Mooncake):
                        case.check()
                    live.append(case)
                except Exception as exc:  # an optional peer that would not run
                    notes[case.name] = f"failed at {size_name(bs)}: {type(exc).__name__}: {exc}"
                    print(f"  {case.name}: {notes[case.name]}", flush=True)
                    with contextlib.suppress(Exception):
                        case.teardown()
            per: dict[str, dict[str, list[float]]] = {c.name: {} for c in live}
            for r in range(rounds):
                gc.collect()
                rotated = live[r % len(live):] + live[:r % len(live)]
                for case in rotated:
                    t0 = time.monotonic()
                    for op, value in case.run().items():
                        per[case.name].setdefault(op, []).append(value)
                    spent[case.name] = spent.get(case.name, 0.0) + time.monotonic() - t0
            for case in live:
                case.teardown()
            results[bs] = per
            print(f"{size_name(bs)}: {time.monotonic() - started:.0f} s, load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            for name in order:
                if name in per:
                    cells = ", ".join(f"{op} {statistics.median(v):.3g}"
                                      for op, v in per[name].items())
                    print(f"  {name}: {cells} [{spent.get(name, 0):.1f} s so far]", flush=True)
    return results, order


# --- report ------------------------------------------------------------------------------------

MEMCPY = Memcpy.name
RAW = RawLease.name
KV1 = KVPerBlock.name
KVB = KVBatched.name
FIRST = FirstPut.name
KVFIRST = KVFirstFill.name
REDIS_C = RedisBenchmark.name


COST_ROWS = [
    ("memcpy ceiling, per block (put)", MEMCPY, "put"),
    ("raw mapping, put", RAW, "put"),
    ("raw mapping, get", RAW, "get"),
    ("KV put()", KV1, "put"),
    ("KV get() -> bytes", KV1, "get"),
    ("KV get_into()", KV1, "get_into"),
    (f"KV put_many ({BATCH} per call)", KVB, "put"),
    (f"KV get_many_into ({BATCH} per call)", KVB, "get"),
    (f"KV get_many -> bytes ({BATCH} per call)", KVB, "get_many"),
]


SHORT = {
    MEMCPY: "memcpy ceiling (per block)",
    RAW: "poold raw mapping",
    KV1: "poold KV put() / get()",
    KVB: f"poold KV put_many / get_many_into ({BATCH}/call)",
    ShmOne.name: "shared_memory, one segment",
    ShmPerBlock.name: "shared_memory, segment per block",
    Memcpy.NO_THP: "memcpy, 4 KiB pages (diagnostic)",
    MemcpyOneCall.name: "memcpy, one call (diagnostic)",
    RawLeaseSkewed.name: "poold raw, buffer at page+16 (diagnostic)",
    RawLeaseNT.name: "poold raw, non-temporal copies (diagnostic)",
    RedisPy.name: "Redis, redis-py",
    REDIS_C: "Redis, C client (redis-benchmark)",
    LMCacheDax.name: "LMCache DaxCore (1 key/call)",
    LMCacheDaxBatched.name: f"LMCache DaxCore ({BATCH} keys/call)",
    Mooncake.name: "Mooncake store",
}


def med(results: Results, bs: int, case: str, op: str) -> float | None:
    values = results.get(bs, {}).get(case, {}).get(op)
    return statistics.median(values) if values else None


def paired(results: Results, bs: int, a: tuple[str, str], b: tuple[str, str]) -> float | None:
    """Median over rounds of a/b, both measured in the same round."""
    xs = results.get(bs, {}).get(a[0], {}).get(a[1])
    ys = results.get(bs, {}).get(b[0], {}).get(b[1])
    if not xs or not ys:
        return None
    return statistics.median(x / y for x, y in zip(xs, ys, strict=False))


def paired_range(results: Results, bs: int, a: tuple[str, str],
                 b: tuple[str, str]) -> tuple[float, float] | None:
    xs = results.get(bs, {}).get(a[0], {}).get(a[1])
    ys = results.get(bs, {}).get(b[0], {}).get(b[1])
    if not xs or not ys:
        return None
    ratios = [x / y for x, y in zip(xs, ys, strict=False)]
    return min(ratios), max(ratios)


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def evaluate(results: Results) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for every target of the brief."""
    m = MiB
    rows: list[tuple[str, str, str]] = []

    def check(label: str, value: float | None, goal: float, *, below: bool = False,
              unit: str = "x", note: str = "",
              pair: tuple[int, tuple[str, str], tuple[str, str]] | None = None) -> None:
        """`pair` (block size, case a, case b): value is their paired ratio, and the rounds'
        lowest and highest ratios are shown so noise can be told from a miss."""
        if pair is not None:
            value = paired(results, *pair)
            span = paired_range(results, *pair)
            if span:
                note = f"rounds {span[0]:.2f}-{span[1]:.2f}" + (f"; {note}" if note else "")
        if value is None:
            rows.append((label, "not measured", "n/a" + (f" ({note})" if note else "")))
            return
        ok = value < goal if below else value >= goal
        shown = f"{value:.2f} {unit}".strip() if unit != "x" else f"{value:.2f}x"
        rows.append((label, shown + (f" ({note})" if note else ""), "met" if ok else "NOT met"))

    def of_raw(case: str, op: str, raw_op: str | None = None) -> str:
        """The KV path against the raw mapping of the same memory (same pages, same copy):
        what the store's bookkeeping costs, apart from the lease's memory being slower to copy
        into than the ceiling's (anonymous, transparent huge pages)."""
        return f"{fmt(paired(results, m, (case, op), (RAW, raw_op or op)))} of the raw mapping"

    for case, short in ((RAW, "raw mapping"), (KV1, "KV put()/get()")):
        check(f"1 MiB put >= 0.90 of memcpy, {short}", None, 0.90,
              pair=(m, (case, "put"), (MEMCPY, "put")),
              note="" if case == RAW else of_raw(case, "put"))
        check(f"1 MiB get >= 0.85 of memcpy, {short}", None, 0.85,
              pair=(m, (case, "get"), (MEMCPY, "get")),
              note="" if case == RAW else of_raw(case, "get"))
    check("1 MiB get >= 0.85 of memcpy, KV get_into() per block", None, 0.85,
          pair=(m, (KV1, "get_into"), (MEMCPY, "get")), note=of_raw(KV1, "get_into", "get"))
    check("1 MiB put >= 0.90 of memcpy, KV put_many (batched)", None, 0.90,
          pair=(m, (KVB, "put"), (MEMCPY, "put")), note=of_raw(KVB, "put"))
    check("1 MiB batched get >= 0.95 of memcpy, KV get_many_into", None, 0.95,
          pair=(m, (KVB, "get"), (MEMCPY, "get")), note=of_raw(KVB, "get"))

    if LMCacheDax.name in results.get(m, {}):
        for kv, dax, what in ((KV1, LMCacheDax.name, "KV per block vs DaxCore 1 key/call"),
                              (KVB, LMCacheDaxBatched.name,
                               f"KV batched vs DaxCore {BATCH} keys/call")):
            for op in ("put", "get"):
                check(f"1 MiB {op} >= 1.0x LMCache DaxCore (measured here), {what}", None, 1.0,
                      pair=(m, (kv, op), (dax, op)),
                      note=f"{fmt(med(results, m, kv, op))} vs "
                           f"{fmt(med(results, m, dax, op))} GB/s")
    else:
        pub = PUBLISHED["LMCache DaxCore"]
        for op, ref in (("put", pub[0]), ("get", pub[1])):
            ours = med(results, m, KV1, op)
            rows.append((f"1 MiB {op} >= 1.0x LMCache DaxCore, KV per block",
                         "not measured here (not installed); indicative vs published "
                         f"{ref} GB/s: {fmt(ours and ours / ref)}x", "n/a"))

    for case, short in ((KV1, "KV per block"), (KVB, "KV batched")):
        for op, goal, verb in (("put", 2.5, "SET"), ("get", 3.0, "GET")):
            check(f"1 MiB {op} >= {goal:g}x Redis C client ({verb}), {short}", None, goal,
                  pair=(m, (case, op), (REDIS_C, op)),
                  note=f"{fmt(med(results, m, case, op))} vs "
                       f"{fmt(med(results, m, REDIS_C, op))} GB/s")

    for bs in BLOCK_SIZES:
        with_map = paired(results, bs, (FIRST, "fresh+map"), (FIRST, "warm"))
        kv_fill = paired(results, bs, (KVFIRST, "fresh"), (KVFIRST, "warm"))
        check(f"{size_name(bs)}: first put into a fresh lease >= 0.9 of pre-faulted", None, 0.9,
              pair=(bs, (FIRST, "fresh"), (FIRST, "warm")),
              note=f"copy only; counting map(): {fmt(with_map)}x; "
                   f"fresh KVStore first fill: {fmt(kv_fill)}x")
    for bs in BLOCK_SIZES:
        check(f"{size_name(bs)}: zero-copy get_view < 5 us per block",
              med(results, bs, KV1, "us/get_view"), 5.0, below=True, unit="us")
        check(f"{size_name(bs)}: zero-copy get_many_views < 5 us per block",
              med(results, bs, KVB, "us/get_many_views"), 5.0, below=True, unit="us")
    put4k = med(results, 4 * KiB, KVB, "put")
    check("4 KiB batched put (put_many) >= 3 GB/s", put4k, 3.0, unit="GB/s",
          note=f"{fmt(put4k and 4096 / put4k / 1e3)} us per block; 3 GB/s needs 1.37")
    return rows


def dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def peers_line(results: Results) -> str:
    """Which peers this run measured, with their versions, and which it only cites."""
    ran = {name for bs in results for name in results[bs]}
    measured, cited = [], []
    for label, names, dist, shown in (
            ("LMCache DaxCore", (LMCacheDax.name, LMCacheDaxBatched.name), "lmcache",
             "lmcache"),
            ("Mooncake store", (Mooncake.name,), "mooncake-transfer-engine-non-cuda",
             "mooncake-transfer-engine-non-cuda"),
            ("Redis", (RedisPy.name, REDIS_C), "redis", "client redis-py")):
        if ran & set(names):
            version = dist_version(dist)
            measured.append(f"{label} ({shown} {version})" if version else label)
        else:
            cited.append(label)
    torch_version = dist_version("torch")
    return ("Peers measured in this run, side by side with poold: "
            + (", ".join(measured) or "none")
            + (f" (torch {torch_version} for LMCache's memory objects)"
               if torch_version and "lmcache" in " ".join(measured) else "")
            + ". Not measured here (published figures only, if any): "
            + (", ".join(cited) or "none") + f". Interpreter: `{sys.executable}`.")


def machine() -> dict[str, str]:
    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        except OSError:
            return ""

    model = next((line.split(":", 1)[1].strip() for line in sh(["lscpu"]).splitlines()
                  if line.startswith("Model name")), platform.processor() or "?")
    return {"uname": sh(["uname", "-a"]).strip(), "cpus": str(os.cpu_count()), "model": model,
            "thp": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
            "shmem_thp": _read("/sys/kernel/mm/transparent_hugepage/shmem_enabled")}


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def table(results: Results, order: list[str]) -> list[str]:
    """One row per case and op family: GB/s put/get per block size, ratios to memcpy."""
    header = ("| case | " + " | ".join(f"{size_name(bs)} put / get" for bs in BLOCK_SIZES)
              + " | 1 MiB / memcpy put, get |")
    lines = [header, "|" + "---|" * (len(BLOCK_SIZES) + 2)]
    rows: list[tuple[str, str, str, str]] = []  # label, case, put-op, get-op
    for name in order:
        if name in (FIRST, KVFIRST):
            continue
        rows.append((name, name, "put", "get"))
        if name == KV1:
            rows.append(("poold KV, per block: get_into() (get only)", name, "", "get_into"))
        if name == KVB:
            rows.append(("poold KV, batched: get_many -> bytes (get only)", name, "",
                         "get_many"))
    for label, name, put_op, get_op in rows:
        if not any(name in results[bs] for bs in results):
            continue
        cells = []
        for bs in BLOCK_SIZES:
            p = med(results, bs, name, put_op) if put_op else None
            g = med(results, bs, name, get_op)
            cells.append(f"{fmt(p) if put_op else ''} / {fmt(g)}")
        rp = paired(results, MiB, (name, put_op), (MEMCPY, "put")) if put_op else None
        rg = paired(results, MiB, (name, get_op), (MEMCPY, "get"))
        lines.append(f"| {label} | " + " | ".join(cells)
                     + f" | {fmt(rp) if put_op else ''}, {fmt(rg)} |")
    return lines


def write_report(out: Path, results: Results, order: list[str], notes: dict[str, str],
                 info: dict[str, Any], verdicts: list[tuple[str, str, str]],
                 plot_note: str) -> None:
    m = machine()
    lines = [
        "# Data path: put / get GB/s through poold, beside memcpy and peers", "",
        f"Command: `{info['command']}`. Run {info['date']}, took {info['took']:.0f} s.", "",
        f"Machine: `{m['uname']}`; {m['cpus']} CPUs, {m['model']}; load average at start "
        f"{info['load_start']}, at end {info['load_end']}. THP: `{m['thp']}`, shmem THP: "
        f"`{m['shmem_thp']}`. Python {platform.python_version()}, numpy {np.__version__}.", "",
        peers_line(results), "",
        f"Working set {info['working_set'] // MiB} MiB per block size, {info['rounds']} rounds "
        "after one warm-up round; every case runs once per round, side by side, in an order "
        "that rotates each round. GB/s = 1e9 bytes/s, the median of the rounds. Ratios are "
        "paired: the ratio of two cases within one round, median over rounds (so they need "
        "not equal the quotient of the medians shown). The daemon runs in a subprocess; its "
        "emulated device gives each lease its own sealed memfd (tmpfs, 4 KiB pages: "
        "shmem THP is off on this machine). Slow cases are capped per pass: shared_memory "
        f"per block and redis-py at {info['caps']['shm']} blocks, redis-benchmark at "
        f"{info['caps']['redis_c']} requests.", "",
        "## GB/s, put / get", "",
        *table(results, order), "",
        "## Zero-copy gets (microseconds per block)", "",
        "| call | " + " | ".join(size_name(bs) for bs in BLOCK_SIZES) + " |",
        "|" + "---|" * (len(BLOCK_SIZES) + 1),
        "| get_view (one call per block) | " + " | ".join(
            fmt(med(results, bs, KV1, "us/get_view")) for bs in BLOCK_SIZES) + " |",
        f"| get_many_views ({BATCH} per call) | " + " | ".join(
            fmt(med(results, bs, KVB, "us/get_many_views")) for bs in BLOCK_SIZES) + " |",
        "",
        "## Cost per block (microseconds, from the medians: block size / GB/s)", "",
        "What a call costs beyond the copy shows at 4 KiB, where copying takes about 1 us.", "",
        "| path | " + " | ".join(size_name(bs) for bs in BLOCK_SIZES) + " |",
        "|" + "---|" * (len(BLOCK_SIZES) + 1),
        *[f"| {label} | " + " | ".join(
            fmt(bs / g / 1e3 if (g := med(results, bs, case, op)) else None)
            for bs in BLOCK_SIZES) + " |" for label, case, op in COST_ROWS], "",
        "## First put into a fresh lease (GB/s; ratio to the warm second put, paired)", "",
        "The fresh lease's memfd is punched out first, so none of its pages "
        "exist, like a never-used region of the device. `fresh` is the first put pass after "
        "`lease.map()` (which pre-faults: MAP_POPULATE + MADV_POPULATE_WRITE); `+map` counts "
        "the map() call too; `no pre-fault` maps with prefault=False. The KVStore row is a "
        "fresh store's first fill with put_many, lease grants (HTTP) and maps included.", "",
        "| block | fresh | warm | fresh / warm | warm / next warm pass (noise) "
        "| fresh+map / warm | no pre-fault / warm | KVStore first fill / warm |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for bs in BLOCK_SIZES:
        lines.append(
            f"| {size_name(bs)} | {fmt(med(results, bs, FIRST, 'fresh'))} | "
            f"{fmt(med(results, bs, FIRST, 'warm'))} | "
            f"{fmt(paired(results, bs, (FIRST, 'fresh'), (FIRST, 'warm')))} | "
            f"{fmt(paired(results, bs, (FIRST, 'warm'), (FIRST, 'warm2')))} | "
            f"{fmt(paired(results, bs, (FIRST, 'fresh+map'), (FIRST, 'warm')))} | "
            f"{fmt(paired(results, bs, (FIRST, 'no-prefault'), (FIRST, 'warm')))} | "
            f"{fmt(paired(results, bs, (KVFIRST, 'fresh'), (KVFIRST, 'warm')))} |")
    lines += ["", "## Peers at 1 MiB: ratios of poold to each (paired, same round)", "",
              "| peer | put GB/s | get GB/s | KV per block / peer (put, get) "
              "| KV batched / peer (put, get) | source |", "|---|---|---|---|---|---|"]
    peers = [ShmOne.name, ShmPerBlock.name, RedisPy.name, REDIS_C, LMCacheDax.name,
             LMCacheDaxBatched.name, Mooncake.name]
    for peer in peers:
        if peer in results.get(MiB, {}):
            r1 = [paired(results, MiB, (KV1, op), (peer, op)) for op in ("put", "get")]
            rb = [paired(results, MiB, (KVB, op), (peer, op)) for op in ("put", "get")]
            lines.append(f"| {peer} | {fmt(med(results, MiB, peer, 'put'))} | "
                         f"{fmt(med(results, MiB, peer, 'get'))} | {fmt(r1[0])}, {fmt(r1[1])} "
                         f"| {fmt(rb[0])}, {fmt(rb[1])} | measured here |")
    for peer, (put, get, what) in PUBLISHED.items():
        if not any(peer in name for bs in results for name in results[bs]):
            r1 = [(med(results, MiB, KV1, op) or 0) / ref for op, ref in (("put", put),
                                                                          ("get", get))]
            rb = [(med(results, MiB, KVB, op) or 0) / ref for op, ref in (("put", put),
                                                                          ("get", get))]
            lines.append(f"| {peer}: {notes.get(peer, 'not run')} | {put} | {get} | "
                         f"{r1[0]:.2f}, {r1[1]:.2f} | {rb[0]:.2f}, {rb[1]:.2f} | published, NOT "
                         f"measured here ({what}); ratios only indicative |")
    lines += ["", "## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {v} | {ok} |" for t, v, ok in verdicts]
    lines += [
        "", "## Notes", "",
        "- `get()` / `get_many()` return new `bytes`: one block at a time, glibc hands the same "
        "freed chunk back on the next call, so up to 1 MiB the destination stays in cache and "
        "can beat memcpy into a 256 MiB buffer; at 16 MiB each is a fresh mmap (page faults). "
        "`get_into()` / `get_many_into()` are the like-for-like rows.",
        "- All buffers are page aligned. The diagnostic row with the caller's buffer at page + 16 "
        "(where numpy puts big arrays) shows what 4 KiB aliasing between source and destination "
        "costs this machine's memcpy.",
        "- The one-call memcpy row crosses glibc's non-temporal threshold (192 MiB here: "
        "`ld.so --list-tunables`), so it streams past the cache; per-block copies of 16 MiB "
        "or less do not. The non-temporal diagnostic row runs the raw-mapping loop in a child "
        "started with `GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000`: what "
        "1 MiB and larger blocks gain from non-temporal stores.",
        "- Non-temporal copies are not in poold.kv: it copies with memoryview assignment "
        "(glibc's memmove), which streams past the cache only above glibc's threshold, and "
        "glibc reads that threshold from GLIBC_TUNABLES once, at process start; poold ships no "
        "compiled code, so no in-process switch exists. An engine can start its own process "
        "with `GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000` (every copy of "
        "1 MiB or more in that process then streams), which is what the diagnostic row shows.",
        "- The Redis put target (2.5x its C client's SET) needs more than the memcpy ceiling "
        "whenever redis-benchmark's SET runs above 0.4 of it: then only non-temporal copies "
        "(previous note) could meet it, not a cheaper call.",
        "- Ratios between poold and the published (not measured) peer figures compare two "
        "different runs and machines: indicative only.",
    ]
    lines += [f"- {k}: {v}" for k, v in notes.items()]
    lines += [
        "- redis-py " + info["redis_py"] + " was pip-installed into the venv for this bench "
        "only (not a project dependency); Redis keys live in database 9 and are deleted "
        "after each block size (redis-benchmark's own key `key:__rand_int__` too).",
        f"- {plot_note}",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def plot(results: Results, order: list[str], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "No plot: matplotlib is not installed (`pip install matplotlib`)."
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    xs = BLOCK_SIZES
    series = [(SHORT.get(n, n), n, "put", "get") for n in order if n not in (FIRST, KVFIRST)]
    series.insert(4, ("poold KV get_into() per block", KV1, None, "get_into"))
    main_colors = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # no grey
    grey = ["0.55", "0.7", "0.4"]
    color = {}
    for label, name, _p, _g in series:
        pool = grey if "diagnostic" in name else main_colors
        color[label] = pool[len([c for c in color.values() if c in pool]) % len(pool)]
    for ax, side in zip(axes, (0, 1), strict=True):
        for label, name, put_op, get_op in series:
            op = (put_op, get_op)[side]
            ys = [med(results, bs, name, op) if op else None for bs in xs]
            if all(y is None for y in ys):
                continue
            diagnostic = "diagnostic" in name
            ax.plot([x for x, y in zip(xs, ys, strict=True) if y is not None],
                    [y for y in ys if y is not None],
                    ":" if diagnostic else "-" if label.startswith(("poold", "memcpy")) else "--",
                    marker="o", markersize=3 if diagnostic else 5, color=color[label],
                    label=label, linewidth=3 if name == MEMCPY else 1 if diagnostic else 1.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs, [size_name(x) for x in xs])
        ax.set_xlabel("block size")
        ax.set_title(("put", "get")[side])
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GB/s (median of rounds)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=4, frameon=False)
    fig.suptitle("poold data path vs memcpy and peers (higher is better)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return f"Plot: {path.name} (matplotlib {matplotlib.__version__}, pip-installed into the venv)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="64 MiB working set and capped slow cases (about 2 minutes)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-data-path.md")
    args = parser.parse_args()
    # SIGTERM unwinds like ^C, so the daemon, the /dev/shm files and Redis keys are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    working_set = (64 if args.quick else 256) * MiB

    load_start = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"load average {load_start}; working set {working_set // MiB} MiB", flush=True)
    started = time.monotonic()
    notes: dict[str, str] = {}
    # Room for: raw lease, two KV stores, a fresh lease and a fresh KV store at once.
    with poold_daemon(8 * working_set + 8 * LEASE_BYTES) as url:
        results, order = run_all(url, working_set, args.rounds, args.quick, notes)
    verdicts = evaluate(results)
    for target, value, verdict in verdicts:
        print(f"{verdict:>8}  {target}: {value}")
    scale = 4 if args.quick else 1
    try:
        import redis

        redis_py = redis.__version__
    except ImportError:
        redis_py = "(absent)"
    info = {"command": "python bench/data_path.py" + (" --quick" if args.quick else ""),
            "date": date, "took": time.monotonic() - started, "load_start": load_start,
            "load_end": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
            "working_set": working_set, "rounds": args.rounds, "redis_py": redis_py,
            "caps": {"shm": 8192 // scale, "redis_c": 16384 // scale}}
    try:
        plot_note = plot(results, order, args.out.with_suffix(".png"))
    except Exception as exc:  # never lose a run's table to a plotting problem
        plot_note = f"No plot: {type(exc).__name__}: {exc}"
    write_report(args.out, results, order, notes, info, verdicts, plot_note)


if __name__ == "__main__":
    main()
