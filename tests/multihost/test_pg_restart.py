"""The real PostgreSQL server restarted (pg_ctlcluster) while three hosts churn: clean 503s
meanwhile, every host granting again after, nothing acknowledged lost, fsck clean.

Runs where the test may restart the server (root, Debian's pg_ctlcluster, a local cluster);
CI requires it (POOLD_TEST_REQUIRE_POSTGRES=1). The restart takes the server away from every
connection for a second or two; the other tests run before or after, never during.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from poold.types import MiB
from tests.conftest import REQUIRE_POSTGRES
from tests.multihost.hosts import Host, run_fsck, start_hosts
from tests.multihost.test_multihost import ENV, Churn

pytestmark = pytest.mark.slow


def _cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster this machine runs, if it can be restarted here."""
    if os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None:
        return None
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    return (versions[-1], "main") if versions else None


def test_a_real_postgresql_restart_during_churn_loses_nothing(
        tmp_path: Path, pg_url: str, shared_file: Path, cleanup: list[Host]) -> None:
    cluster = _cluster()
    if cluster is None:
        message = "cannot restart PostgreSQL here (needs root and pg_ctlcluster)"
        if REQUIRE_POSTGRES:
            pytest.fail(message)
        pytest.skip(message)
    env = {**ENV, "POOLD_HOST_TTL_S": "15"}  # a restart is seconds: nobody should be fenced
    hosts = start_hosts(tmp_path, [pg_url] * 3, shared_file, "128MiB", env)
    cleanup.extend(hosts)
    churn = Churn(shared_file)
    restarted: list[float] = []

    def restart() -> None:
        time.sleep(2.0)
        started = time.monotonic()
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart"],
                       check=True, capture_output=True, timeout=60)
        restarted.append(time.monotonic() - started)

    breaker = threading.Thread(target=restart)
    breaker.start()
    churn.run(hosts, threads_per_host=2, seconds=10.0)
    breaker.join(90)
    assert restarted, "the restart did not finish"
    unexpected = [e for e in churn.errors if e not in ("503 LedgerUnavailable", "507 NoCapacity")]
    assert unexpected == []
    churn.check_ledger()  # every acknowledged grant is there, with its extent and pattern
    for host in hosts:  # and every host grants again
        deadline = time.monotonic() + 20
        while host.grant(2 * MiB).status_code != 201:
            assert time.monotonic() < deadline, f"{host} never granted again"
            time.sleep(0.2)
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
