"""Client steps run inside a guest against the poold running there (python3 -m
tests.kernel.guest_client STEP ...). Every wait is bounded; results go to stdout as JSON."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from poold.client import PooldClient

# The daemon's UNIX socket (its state dir in the guest): the guest runs as root, whom the daemon
# knows by SO_PEERCRED as an admin, so no token is needed; a real peer-credential check.
API_SOCKET = "/tmp/poold/api.sock"


def wait(what: str, check: Any, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main(step: str, *args: str) -> None:
    client = PooldClient(uds=API_SOCKET)
    if step == "health":
        wait("the daemon", lambda: client.raw("GET", "/healthz"))
    elif step == "lease":
        # Wait for the device to appear (hotplug), then lease, map, write and read back.
        name, size, pattern = args[0], int(args[1]), args[2].encode()
        started = time.monotonic()
        device = wait(f"device {name}", lambda: next(
            (d for d in client.devices() if d.devname == name and d.state == "online"), None))
        seen_after_s = time.monotonic() - started
        lease = client.lease(size, ttl_s=600, keepalive=False)
        with lease.map() as mapping:
            mapping.buffer[: len(pattern)] = pattern
            mapping.buffer[-len(pattern):] = pattern
            readback = bytes(mapping.buffer[: len(pattern)])
        print(json.dumps({"device": {**device.model_dump(), "seen_after_s": seen_after_s},
                          "lease": lease.info.model_dump(mode="json"),
                          "readback": readback.decode()}))
    elif step == "gone":
        # The device was taken away under a live lease: it must turn missing, the lease lost.
        name, lease_id = args
        device = wait(f"{name} missing", lambda: next(
            (d for d in client.devices() if d.devname == name and d.state == "missing"), None))
        info = wait("the lease lost", lambda: (i := client.get_lease(lease_id)).state == "lost"
                    and i)
        print(json.dumps({"device": device.model_dump(), "lease": info.model_dump(mode="json")}))
    else:
        raise SystemExit(f"unknown step {step}")


if __name__ == "__main__":
    main(*sys.argv[1:])
