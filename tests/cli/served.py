"""The installed `poold` command run against a real `poold serve` process, as an operator runs
it: the helpers the CLI tests share (the `daemon` fixture is in conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

# The console script pip installed beside this interpreter: what an operator types.
POOLD = Path(sys.executable).with_name("poold")


class Daemon:
    def __init__(self, port: int, state: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.state = state

    def cli(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """`poold ARGS --url URL --state-dir STATE`; with `ok`, it must exit 0."""
        out = subprocess.run([str(POOLD), *args, "--url", self.url, "--state-dir",
                              str(self.state)], capture_output=True, text=True, timeout=60)
        if ok:
            assert out.returncode == 0, (args, out.stderr)
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args).stdout)

    def grant(self, bearer: str, size: int) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/leases", json={"size": size, "ttl_s": 60},
                          headers={"Authorization": f"Bearer {bearer}"})


def refusal(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A refused command: exit 1 and the API's error object on stderr."""
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stdout == ""
    found: dict[str, Any] = json.loads(out.stderr)
    return found
