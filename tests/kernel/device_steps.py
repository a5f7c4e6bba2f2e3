"""Run in a guest (python3 -m tests.kernel.device_steps OUT.json) against the poold serving there:
the admin device operations on a dynamic (hmem) dax region, step by step, recording after each
step what `daxctl list` says and what GET /v1/devices says, plus each answer; around each refusal
also the ledger's events, leases and claims. One Python process for every step: a start costs
seconds under TCG. The test (test_device_ops.py) judges the record.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from api.schemas import GrantedLease
from poold.client import PooldClient
from poold.client.lease import Lease

URL = "http://127.0.0.1:7077"
FD_SOCKET = "/tmp/poold/fd.sock"
MiB = 1 << 20


class Steps:
    def __init__(self) -> None:
        self.http = httpx.Client(base_url=URL, timeout=120)
        self.record: list[dict[str, Any]] = []

    def wait_ready(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit("the daemon did not answer")

    def wait_final(self, lease_id: str, timeout_s: float = 60) -> str:
        """A released lease's bytes are free once it is final (pools that scrub on release zero
        them first): its state then."""
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.http.get(f"/v1/leases/{lease_id}").json()["state"]
            if state not in ("active", "scrubbing"):
                break
            time.sleep(0.3)
        return state

    def state(self, ledger: bool = False) -> dict[str, Any]:
        """What daxctl and the ledger's devices say now; `ledger`: also every event, every lease
        and every device's live claims (what a refusal must leave as they were)."""
        daxctl = subprocess.run(["daxctl", "list", "-D"], capture_output=True, text=True)
        nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
        devices = self.http.get("/v1/devices").json()
        found = {"daxctl": json.loads(daxctl.stdout or "[]"), "devices": devices,
                 "nodes": {n: _mem_total(n) for n in nodes}}
        if ledger:
            found["ledger"] = {
                "events": self.http.get("/v1/events", params={"limit": 10_000}).json(),
                "leases": self.http.get("/v1/leases", params={"limit": 10_000}).json(),
                "claims": {d["devname"]: self.http.get(f"/v1/devices/{d['id']}/extents")
                           .json()["claims"] for d in devices},
            }
        return found

    def step(self, name: str, method: str, path: str, body: Any = None,
             refusal: bool = False) -> dict[str, Any]:
        """One request; a `refusal` records the whole ledger around it."""
        before = self.state(ledger=refusal)
        response = self.http.request(method, path, json=body)
        entry = {"step": name, "status": response.status_code, "answer": response.json(),
                 "before": before, "after": self.state(ledger=refusal)}
        self.record.append(entry)
        return entry


def _mem_total(node: str) -> int | None:
    return _node_field(node, "MemTotal:")


def _node_field(node: str, name: str) -> int | None:
    """A field of the node's meminfo ("Node 1 MemTotal: 262144 kB"), in bytes."""
    for line in Path(f"/sys/devices/system/node/{node}/meminfo").read_text().splitlines():
        fields = line.split()
        if fields[2] == name:
            return int(fields[3]) * 1024
    return None


def touch(lease: dict[str, Any], pattern: bytes) -> str:
    """Map the lease as root maps it (its map_path at map_offset), write `pattern` at both ends,
    read it back."""
    fd = os.open(lease["map_path"], os.O_RDWR)
    try:
        with mmap.mmap(fd, lease["length"], mmap.MAP_SHARED,
                       offset=lease["map_offset"]) as view:
            view[: len(pattern)] = pattern
            view[-len(pattern):] = pattern
            return (bytes(view[: len(pattern)]) + bytes(view[-len(pattern):])).decode()
    finally:
        os.close(fd)


def daemon_memfds() -> int:
    """How many memfds the daemon (`poold serve`) holds open now."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if b"serve" not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        return sum(link.startswith("/memfd:poold-") for link in links)
    raise SystemExit("no poold serve process")


def on_node(answer: dict[str, Any], pattern: bytes) -> dict[str, Any]:
    """Map a system-ram lease with the SDK (the daemon passes a node-bound memfd), write
    `pattern` at both ends, read it back, and say which NUMA nodes its pages are on, from
    this process's numa_maps."""
    with PooldClient(URL, fd_socket=FD_SOCKET) as client:
        lease = Lease(client, GrantedLease.model_validate(answer), keepalive=False,
                      token=answer["token"])
        with lease.map() as mapping:
            mapping.buffer[: len(pattern)] = pattern
            mapping.buffer[-len(pattern):] = pattern
            readback = bytes(mapping.buffer[: len(pattern)]) + bytes(mapping.buffer[-len(pattern):])
            lines = [line for line in Path("/proc/self/numa_maps").read_text().splitlines()
                     if "memfd:poold-" in line]
            held = daemon_memfds()
    pages: dict[str, int] = {}
    for line in lines:
        for field in line.split():
            if field[0] == "N" and "=" in field:
                node, count = field.split("=")
                pages[node] = pages.get(node, 0) + int(count)
    return {"readback": readback.decode(), "via": mapping.via, "numa_pages": pages,
            "daemon_memfds": held}


def wait_gone(devname: str, timeout_s: float = 90) -> bool:
    """Until `daxctl list` no longer shows the device (a lease's own, after its end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = json.loads(subprocess.run(["daxctl", "list", "-D"], capture_output=True,
                                           text=True).stdout or "[]")
        listed = [listed] if isinstance(listed, dict) else listed
        if devname not in {d["chardev"] for d in listed}:
            return True
        time.sleep(0.5)
    return False


def static(out: str) -> None:
    """A pmem-backed (static) dax region: devices cannot be created or resized there."""
    s = Steps()
    s.wait_ready()
    s.step("create in static region", "POST", "/v1/devices", {"region": 0, "size": 64 * MiB},
           refusal=True)
    s.step("resize in static region", "POST", "/v1/devices/dax0.0/resize", {"size": 64 * MiB},
           refusal=True)
    s.step("destroy in static region", "DELETE", "/v1/devices/dax0.0", refusal=True)
    Path(out).write_text(json.dumps(s.record))


def main(out: str, scenario: str = "hmem") -> None:
    if scenario == "static":
        return static(out)
    if scenario == "per-lease":
        return per_lease(out)
    s = Steps()
    s.wait_ready()
    lease_body = {"size": 8 * MiB, "ttl_s": 600, "device": "dax0.1"}
    s.step("empty dax0.0", "POST", "/v1/devices/dax0.0/resize", {"size": 0})
    for _ in range(3):
        s.step("create", "POST", "/v1/devices", {"region": 0, "size": 256 * MiB})
    lease = s.step("lease on dax0.1", "POST", "/v1/leases", lease_body)["answer"]
    s.record[-1]["readback"] = touch(lease, b"poold-device-ops")
    s.step("destroy dax0.2", "DELETE", "/v1/devices/dax0.2")
    # Refusals: each must leave daxctl's view and the ledger's as they were.
    s.step("destroy leased dax0.1", "DELETE", "/v1/devices/dax0.1", refusal=True)
    s.step("create too large", "POST", "/v1/devices", {"region": 0, "size": 768 * MiB},
           refusal=True)
    s.step("destroy first device", "DELETE", "/v1/devices/dax0.0", refusal=True)
    s.step("resize misaligned", "POST", "/v1/devices/dax0.3/resize", {"size": 3 * MiB},
           refusal=True)
    s.step("reconfigure leased dax0.1", "POST", "/v1/devices/dax0.1/reconfigure",
           {"mode": "system-ram"}, refusal=True)
    # Drain: no new lease there (a grant elsewhere skips it though it has room), the live one
    # renews and goes on to its release; then it can go.
    s.step("drain dax0.1", "POST", "/v1/devices/dax0.1/drain")
    s.step("lease on drained dax0.1", "POST", "/v1/leases", lease_body, refusal=True)
    other = s.step("unpinned lease while drained", "POST", "/v1/leases",
                   {"size": 8 * MiB, "ttl_s": 600})["answer"]
    s.step("release unpinned", "DELETE", f"/v1/leases/{other['id']}")
    s.record[-1]["final"] = s.wait_final(other["id"])
    s.step("keepalive while drained", "POST", f"/v1/leases/{lease['id']}/keepalive",
           {"ttl_s": 900})
    s.record[-1]["granted"] = lease
    s.step("release", "DELETE", f"/v1/leases/{lease['id']}")
    s.record[-1]["final"] = s.wait_final(lease["id"])
    s.step("destroy drained dax0.1", "DELETE", "/v1/devices/dax0.1")
    # system-ram and back.
    s.step("to system-ram", "POST", "/v1/devices/dax0.3/reconfigure", {"mode": "system-ram"})
    # A lease on the new NUMA node: a memfd bound to it, passed by the daemon, mapped by the SDK.
    node_lease = s.step("lease on system-ram dax0.3", "POST", "/v1/leases",
                        {**lease_body, "device": "dax0.3"})["answer"]
    s.record[-1]["memory"] = on_node(node_lease, b"numa-node-lease")
    s.step("release node lease", "DELETE", f"/v1/leases/{node_lease['id']}")
    s.record[-1]["final"] = s.wait_final(node_lease["id"])
    s.record[-1]["daemon_memfds"] = daemon_memfds()
    s.step("back to devdax", "POST", "/v1/devices/dax0.3/reconfigure", {"mode": "devdax"})
    again = s.step("lease after", "POST", "/v1/leases",
                   {**lease_body, "device": "dax0.3"})["answer"]
    s.record[-1]["readback"] = touch(again, b"back-from-kmem")
    kernel_ebusy(s)
    Path(out).write_text(json.dumps(s.record))


# A holder of a lease on a region carved per lease, in a process of its own: maps the lease
# through fd.sock, writes its pattern, tries to map past the lease, says so, then (on a line
# from stdin) reads its mapping again: after the lease's device was destroyed, that faults.
HOLDER = """
import json, mmap, os, signal, sys
from poold.client.fdsocket import receive_fd
passed = receive_fd(sys.argv[1], sys.argv[2], sys.argv[3])
view = mmap.mmap(passed.fd, passed.length, mmap.MAP_SHARED, offset=passed.map_offset)
view[:12] = b"holder-bytes"
# Past the lease: a dax device's mmap takes any length, the fault past its end is SIGBUS.
try:
    bigger = mmap.mmap(passed.fd, passed.length + (2 << 20), mmap.MAP_SHARED)
except (OSError, ValueError) as exc:
    beyond = type(exc).__name__
else:
    child = os.fork()
    if child == 0:
        bigger[passed.length]  # one byte past the lease
        os._exit(0)
    _pid, status = os.waitpid(child, 0)
    beyond = "read" if os.WIFEXITED(status) else signal.Signals(os.WTERMSIG(status)).name
print(json.dumps({"map_offset": passed.map_offset, "beyond": beyond}), flush=True)
sys.stdin.readline()
print(json.dumps({"read": bytes(view[:12]).decode()}), flush=True)
"""


def per_lease(out: str) -> None:
    """The default for a dynamic region: carved per lease. Grant latency beside the emulated
    device's; a holder's descriptor reaches its lease only; revoking the lease destroys its
    device and the holder's next access faults; the next lease there reads zeros."""
    s = Steps()
    s.wait_ready()
    s.record.append({"step": "start", "after": s.state()})
    timings: dict[str, list[float]] = {}
    for device in ("dax0", "emu0"):
        for _ in range(8):
            started = time.perf_counter()
            answer = s.http.post("/v1/leases", json={"size": 2 * MiB, "device": device})
            timings.setdefault(device, []).append(time.perf_counter() - started)
            assert answer.status_code == 201, answer.text
            s.http.delete(f"/v1/leases/{answer.json()['id']}")
            s.wait_final(answer.json()["id"])
    s.record.append({"step": "grant latency", "seconds": timings})
    lease = s.step("lease", "POST", "/v1/leases",
                   {"size": 64 * MiB, "ttl_s": 600, "device": "dax0"})["answer"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, FD_SOCKET, lease["id"],
                               lease["token"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdin is not None and holder.stdout is not None
    s.record[-1]["holder"] = json.loads(holder.stdout.readline())
    mapped = subprocess.run(["daxctl", "list", "-D", "-M"], capture_output=True, text=True)
    s.record[-1]["kernel"] = json.loads(mapped.stdout or "[]")
    s.step("revoke", "POST", f"/v1/leases/{lease['id']}/revoke")
    s.record[-1]["final"] = s.wait_final(lease["id"])
    s.record[-1]["gone"] = wait_gone(lease["map_path"].removeprefix("/dev/"))
    holder.stdin.write("read\n")
    holder.stdin.flush()
    s.record[-1]["holder_read"] = holder.stdout.readline()
    s.record[-1]["holder_status"] = holder.wait(60)
    again = s.step("next lease", "POST", "/v1/leases",
                   {"size": 64 * MiB, "ttl_s": 600, "device": "dax0"})["answer"]
    fd = os.open(again["map_path"], os.O_RDWR)
    try:
        with mmap.mmap(fd, again["length"], mmap.MAP_SHARED) as view:
            s.record[-1]["zeros"] = view[:] == bytes(again["length"])
    finally:
        os.close(fd)
    s.step("events", "GET", "/v1/events?limit=1000")
    Path(out).write_text(json.dumps(s.record))


# A process bound to one node, whose page tables (unmovable kernel memory) land on that node:
# it maps a sparse GiB and touches one byte per 2 MiB, each touch a page table page of its own.
# The node's memory was onlined a moment ago: until the kernel's cpuset work allows the node to
# tasks, MPOL_BIND to it is EINVAL, so that is retried for a while (as poold.daemon.nodemem does).
PAGE_TABLES = """
import ctypes, errno, mmap, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mask = ctypes.c_ulong(1 << int(sys.argv[1]))
deadline, refused = time.monotonic() + 10, 0
while libc.syscall(238, 2, ctypes.byref(mask), 65):  # set_mempolicy(MPOL_BIND, {node})
    if ctypes.get_errno() != errno.EINVAL or time.monotonic() > deadline:
        raise OSError(ctypes.get_errno(), "set_mempolicy")
    refused += 1
    time.sleep(0.05)
view = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)  # NORESERVE
view.madvise(mmap.MADV_NOHUGEPAGE)
for offset in range(0, 1 << 30, 2 << 20):
    view[offset] = 1
print("ready", refused, flush=True)
sys.stdin.read()
"""


def kernel_ebusy(s: Steps) -> None:
    """The kernel's own EBUSY: memory blocks onlined as kernel memory (an operator's
    `daxctl online-memory --no-movable`) that hold page tables cannot be offlined, so going
    back to devdax is refused by the kernel, not by poold's checks."""
    made = s.step("create for kernel memory", "POST", "/v1/devices",
                  {"region": 0, "size": 128 * MiB})["answer"]
    devname = made["devname"]
    ram = s.step("kernel memory to system-ram", "POST", f"/v1/devices/{devname}/reconfigure",
                 {"mode": "system-ram"})["answer"]
    node = made["kernel"]["target_node"]
    blocks = Path("/sys/devices/system/memory")
    for block in ram["online_blocks"]:  # as kernel memory instead of movable
        for state in ("offline", "online_kernel"):
            (blocks / f"memory{block}" / "state").write_text(state)
    zones = {b: (blocks / f"memory{b}" / "valid_zones").read_text().strip()
             for b in ram["online_blocks"]}
    holder = subprocess.Popen([sys.executable, "-c", PAGE_TABLES, str(node)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        ready, refused = holder.stdout.readline().split()
        assert ready == "ready"
        s.step("back to devdax under kernel memory", "POST",
               f"/v1/devices/{devname}/reconfigure", {"mode": "devdax"}, refusal=True)
        s.record[-1].update(devname=devname, blocks=ram["online_blocks"], zones=zones,
                            page_tables=_node_field(f"node{node}", "PageTables:"),
                            bind_refused=int(refused))  # EINVALs before the node was allowed
    finally:
        holder.kill()
        holder.wait()


if __name__ == "__main__":
    main(*sys.argv[1:])
