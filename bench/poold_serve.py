"""A `poold serve` for the engine benchmarks: an emulated pool, auth off, its sockets in a
folder of the caller's; the engines' venvs have poold installed, so it runs there too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

MiB = 1 << 20
POOL = 512 * MiB


@contextmanager
def poold_serve(work: Path, pool: int = POOL) -> Iterator[Path]:
    """A `poold serve` on an emulated pool of `pool` bytes, auth off; yields its state dir
    (api.sock, fd.sock)."""
    state = work / "poold"
    env = {**os.environ, "POOLD_AUTH": "off", "POOLD_FD_STORE": "none",
           "POOLD_WATCH_UDEV": "false", "POOLD_DISCOVER_DAX": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "poold.cli.main", "serve", "--state-dir",
                             str(state), "--emulate", f"{pool // MiB}MiB", "--listen",
                             "127.0.0.1:0"], env=env, stderr=(work / "serve.log").open("w"))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (work / "serve.log").read_text()
            assert time.monotonic() < deadline, "poold serve did not come up"
            try:
                transport = httpx.HTTPTransport(uds=str(state / "api.sock"))
                with httpx.Client(transport=transport) as http:
                    if http.get("http://poold/healthz").is_success:
                        break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield state
    finally:
        proc.terminate()
        proc.wait(30)
