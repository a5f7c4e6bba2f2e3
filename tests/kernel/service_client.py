"""Run in a guest booted with systemd, by the poold that `pip install .` put in /opt/poold (its
python, not the checkout's), against the poold.service serving there; for test_service.py.

Owns the unprivileged user's side of that test: leases granted over /run/poold/api.sock with a
tenant token ($POOLD_TOKEN) and mapped through /run/poold/fd.sock; some mapped, checked and
released at once, then one kept with its mapping across daemon restarts while the SDK renews it.
One process for all (a Python start costs seconds under TCG); it prints JSON lines that the test
judges. Imports only the installed poold and the standard library, so it runs from any path.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from api.schemas import GrantedLease
from poold.client import PooldClient
from poold.client.lease import Lease

API_SOCKET = "/run/poold/api.sock"
FD_SOCKET = "/run/poold/fd.sock"
MiB = 1 << 20
SIZE = 8 * MiB


def say(**record: Any) -> None:
    print(json.dumps({"t": time.time(), **record}), flush=True)


def numa_pages(marker: str) -> dict[str, int]:
    """Pages per node ("N1": count) of this process's mappings whose line names `marker`."""
    pages: dict[str, int] = {}
    for line in Path("/proc/self/numa_maps").read_text().splitlines():
        if marker in line:
            for field in line.split():
                if field[0] == "N" and "=" in field:
                    node, count = field.split("=")
                    pages[node] = pages.get(node, 0) + int(count)
    return pages


def grant(client: PooldClient, device: str, ttl_s: int, keepalive: bool) -> Lease:
    answer = client.raw("POST", "/v1/leases", json={"size": SIZE, "ttl_s": ttl_s,
                                                    "device": device})
    return Lease(client, GrantedLease.model_validate(answer), keepalive=keepalive,
                 token=answer["token"])


def once(client: PooldClient, device: str, pattern: str) -> None:
    """Lease SIZE on `device`, map it through fd.sock, write `pattern` at both ends, read it
    back, say where its pages are, release and wait until the lease is final."""
    data = pattern.encode()
    lease = grant(client, device, 60, keepalive=False)
    with lease.map() as mapping:
        mapping.buffer[: len(data)] = data
        mapping.buffer[-len(data):] = data
        readback = bytes(mapping.buffer[: len(data)]) + bytes(mapping.buffer[-len(data):])
        pages = numa_pages("memfd:poold-")
    lease.release()
    say(event="once", lease=lease.info.model_dump(mode="json"), via=mapping.via,
        readback=readback.decode(), numa_pages=pages, final=wait_final(client, lease.id))


def wait_final(client: PooldClient, lease_id: str, timeout_s: float = 60) -> str:
    """A released lease's state once its bytes are scrubbed: the device is then free for the
    next operation."""
    deadline = time.monotonic() + timeout_s
    state = client.get_lease(lease_id).state
    while state in ("active", "scrubbing") and time.monotonic() < deadline:
        time.sleep(0.2)
        state = client.get_lease(lease_id).state
    return str(state)


def hold(device: str, ttl_s: str, stop_file: str, *before: str) -> None:
    """`once` for each DEVICE:PATTERN in `before`; then lease on `device` with the SDK's
    keepalive, map it through fd.sock, write a pattern, and say each renewal (seen as a new
    expires_at) until the lease is lost or, once `stop_file` exists, until a renewal after the
    time it holds (at most a TTL later). Then read the bytes back through that mapping and
    through a second descriptor from the daemon serving now, and release."""
    data = b"held-across-restarts"
    ttl = int(ttl_s)
    with PooldClient(uds=API_SOCKET, fd_socket=FD_SOCKET) as client:
        for step in before:
            once(client, *step.split(":", 1))
        lease = grant(client, device, ttl, keepalive=True)
        mapping = lease.map()
        mapping.buffer[: len(data)] = data
        mapping.buffer[-len(data):] = data
        say(event="mapped", lease=lease.info.model_dump(mode="json"), via=mapping.via)
        seen, renewed_at, after = lease.info.expires_at, 0.0, None
        stop = Path(stop_file)
        while after is None or renewed_at <= after:
            if lease.lost:
                say(event="lost", reason=lease.lost_reason)
                sys.exit(1)
            if lease.info.expires_at != seen:
                seen, renewed_at = lease.info.expires_at, time.time()
                say(event="renewed", expires_at=seen.isoformat())
            if after is None and stop.exists():
                after = float(stop.read_text())
            if after is not None and time.time() > after + ttl:
                say(event="no renewal", after=after)
                sys.exit(1)
            time.sleep(0.2)
        state = client.get_lease(lease.id).state
        with lease.map() as second:
            again = bytes(second.buffer[: len(data)]) + bytes(second.buffer[-len(data):])
        kept = bytes(mapping.buffer[: len(data)]) + bytes(mapping.buffer[-len(data):])
        lease.release()
        say(event="done", state_before_release=state, first_mapping=kept.decode(),
            second_mapping=again.decode(), via=second.via, released=lease.info.state)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    hold(*sys.argv[1:])
