"""The daemon's long-lived threads carry their names into the kernel (poold.osthread), so
top -H, ps -L, perf and /proc/<pid>/task/*/comm tell the ledger writer from the HTTP thread."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.daemon_fixtures import serving_daemon

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kernel thread names: Linux")


def _kernel_name(thread: threading.Thread) -> str:
    return Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip()


def test_the_daemons_threads_have_their_names_in_the_kernel(tmp_path: Path) -> None:
    with serving_daemon(tmp_path):
        named = {t.name: _kernel_name(t) for t in threading.enumerate()
                 if t.name in {"ledger-writer", "fdpass", "hotplug", "revocations"}}
    assert named.get("ledger-writer") == "ledger-writer", named
    assert named.get("fdpass") == "fdpass", named  # the lease descriptor socket's server
    assert all(kernel == name for name, kernel in named.items()), named
