"""The real PostgreSQL server restarted (pg_ctlcluster) while three hosts churn: clean 503s
meanwhile, every host granting again after, nothing acknowledged lost, fsck clean.

Runs where the test may restart the server (root, Debian's pg_ctlcluster, a local cluster);
CI requires it (POOLD_TEST_REQUIRE_POSTGRES=1). The restart takes the server away from every
connection for a second or two; the other tests run before or after, never during: in this
run, and in any other run on this machine (tests/postgres_lock.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from sqlalchemy import make_url

from tests.conftest import POSTGRES_LOCK, POSTGRES_URL
from tests.multihost.hosts import Host, run_fsck, start_hosts, wait_until_granting
from tests.multihost.test_multihost import STEADY_ENV, Churn
from tests.preconditions import unmet
from tests.timing import patience, run_seed, until

pytestmark = pytest.mark.slow

CHURN_S = 10.0


def _cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster that serves POSTGRES_URL's port, if it can be
    restarted here."""
    if os.geteuid() != 0 or shutil.which("pg_lsclusters") is None:
        return None
    port = make_url(POSTGRES_URL).port or 5432
    listed = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True,
                            timeout=30).stdout
    for line in listed.splitlines():
        version, name, cluster_port, *_ = line.split()
        if int(cluster_port) == port:
            return version, name
    return None


def test_a_real_postgresql_restart_during_churn_loses_nothing(
        tmp_path: Path, pg_url: str, cleanup: list[Host]) -> None:
    found = _cluster()
    if found is None:
        message = ("cannot restart PostgreSQL here (needs root, pg_ctlcluster and a local "
                   "cluster on the test URL's port)")
        unmet("postgres", message)
    with POSTGRES_LOCK.exclusive():  # no other test run on this machine uses the server now
        _restart_during_churn(tmp_path, pg_url, cleanup, found)


def _restart_during_churn(tmp_path: Path, pg_url: str, cleanup: list[Host],
                          cluster: tuple[str, str]) -> None:
    # A restart is seconds, far shorter than host_ttl: nobody should be fenced.
    hosts = start_hosts(tmp_path, [pg_url] * 3, "128MiB", STEADY_ENV)
    cleanup.extend(hosts)
    churn = Churn(run_seed())
    at_restart: list[int] = []  # grants acknowledged when the restart began and ended

    def restart() -> None:
        churn.wait_for_grants(20)  # during the churn, not before it
        at_restart.append(churn.grants)
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart"],
                       check=True, capture_output=True, timeout=60)
        at_restart.append(churn.grants)
        # The churn goes on until it has granted again after the restart.
        until("grants after the restart", lambda: churn.grants >= at_restart[1] + 20, patience())

    churn.run(hosts, threads_per_host=2, seconds=CHURN_S, meanwhile=threading.Thread(
        target=restart))
    assert len(at_restart) == 2, "the restart did not finish"
    assert churn.grants >= at_restart[1] + 20, f"no churn after the restart: {at_restart}"
    unexpected = [e for e in churn.errors if e != "503 LedgerUnavailable"]
    assert unexpected == []
    assert "503 LedgerUnavailable" in churn.errors, "no client saw the restart: no overlap"
    churn.check_ledger()  # every acknowledged grant is there, with its extent and pattern
    churn.release_held()  # room for the grants below (see Churn.release_held)
    for host in hosts:  # and every host grants again
        wait_until_granting(host)
    report = run_fsck(pg_url, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
