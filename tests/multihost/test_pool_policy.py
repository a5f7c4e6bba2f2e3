"""Two daemons on one PostgreSQL ledger: a pool's policy is the ledger's, one for both.

A change made through one daemon (scrubbing off, a tenant taken off the pool's list, a lower
maximum TTL) governs the very next grant on the other, with no wait: the other daemon's reaper
(which also re-reads pools) is made too slow to help, so only the catalog version every batch
checks can tell it. A host whose config file says otherwise logs it and shows it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.types import MiB
from tests.daemon_fixtures import serving_daemon


class Daemon:
    def __init__(self, url: str, state: Path) -> None:
        self.admin = httpx.Client(base_url=url, timeout=30, headers={
            "Authorization": f"Bearer {(state / 'admin.token').read_text().strip()}"})
        self.url = url

    def as_tenant(self, bearer: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {bearer}"})


@pytest.fixture
def two(tmp_path: Path, pg_url: str) -> Iterator[tuple[Daemon, Daemon]]:
    common: dict[str, Any] = {"auth": "token", "database_url": pg_url, "emulate_size": 64 * MiB}
    with ExitStack() as stack:
        _, url_a = stack.enter_context(serving_daemon(tmp_path / "a", host_id="host-a",
                                                      **common))
        # Host b's file disagrees (no scrubbing in "default"), and its reaper, which re-reads
        # pools too, ticks too rarely to matter here.
        _, url_b = stack.enter_context(serving_daemon(
            tmp_path / "b", host_id="host-b", unscrubbed_pools=["default"],
            reap_interval_s=3600, **common))
        a, b = Daemon(url_a, tmp_path / "a"), Daemon(url_b, tmp_path / "b")
        stack.callback(a.admin.close)
        stack.callback(b.admin.close)
        yield a, b


def test_a_policy_change_through_one_daemon_governs_the_next_grant_on_the_other(
        two: tuple[Daemon, Daemon], caplog: pytest.LogCaptureFixture) -> None:
    a, b = two
    made = a.admin.post("/v1/tokens", json={"name": "bee", "role": "tenant", "tenant": "team-b"})
    with b.as_tenant(made.json()["bearer"]) as tenant:
        # The ledger's policy (host a's file seeded it) wins over b's file: b scrubs.
        first = tenant.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 600}).json()
        assert tenant.delete(f"/v1/leases/{first['id']}").json()["state"] == "scrubbing"

        a.admin.patch("/v1/pools/default", json={"scrub_on_release": False}).raise_for_status()
        second = tenant.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 600}).json()
        assert tenant.delete(f"/v1/leases/{second['id']}").json()["state"] == "released"

        a.admin.patch("/v1/pools/default", json={"max_ttl_s": 300}).raise_for_status()
        refused = tenant.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 600})
        assert (refused.status_code, refused.json()["error"]) == (422, "InvalidRequest")
        assert "300" in refused.json()["detail"]

        a.admin.patch("/v1/pools/default",
                      json={"allowed_tenants": ["team-a"]}).raise_for_status()
        refused = tenant.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 60})
        assert (refused.status_code, refused.json()["error"]) == (403, "TenantNotAllowed")

        a.admin.patch("/v1/pools/default", json={"allowed_tenants": None}).raise_for_status()
        assert tenant.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 60}).status_code == 201


def test_a_host_whose_file_disagrees_logs_it_and_shows_it(
        tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    common: dict[str, Any] = {"auth": "token", "database_url": pg_url, "emulate_size": 64 * MiB}
    with serving_daemon(tmp_path / "a", host_id="host-a", **common) as (_, url_a), \
            caplog.at_level(logging.WARNING, logger="poold.daemon.app"):
        a = Daemon(url_a, tmp_path / "a")
        assert a.admin.get("/v1/pools/default").json()["config_disagrees"] == []
        with serving_daemon(tmp_path / "b", host_id="host-b", unscrubbed_pools=["default"],
                            max_ttl_s=600, **common) as (_, url_b):
            b = Daemon(url_b, tmp_path / "b")
            shown = b.admin.get("/v1/pools/default").json()
            assert shown["scrub_on_release"] is True and shown["max_ttl_s"] == 86_400
            assert sorted(shown["config_disagrees"], key=lambda d: d["setting"]) == [
                {"setting": "max_ttl_s", "file": 600, "ledger": 86_400},
                {"setting": "scrub_on_release", "file": False, "ledger": True}]
            logged = [r.getMessage() for r in caplog.records
                      if "pool.config_disagrees" in r.getMessage()]
            assert any("setting=scrub_on_release" in m and "the ledger wins" in m
                       for m in logged), logged
            # An admin brings the ledger to what b's file says: nothing disagrees any more.
            a.admin.patch("/v1/pools/default", json={
                "scrub_on_release": False, "max_ttl_s": 600}).raise_for_status()
            assert b.admin.get("/v1/pools/default").json()["config_disagrees"] == []
            assert a.admin.get("/v1/pools/default").json()["config_disagrees"] == [
                {"setting": "max_ttl_s", "file": 86_400, "ledger": 600},
                {"setting": "scrub_on_release", "file": True, "ledger": False}]
            b.admin.close()
        a.admin.close()


def test_a_pool_another_host_retired_shows_as_a_disagreement_where_a_file_names_it(
        tmp_path: Path, pg_url: str) -> None:
    """Host b's file places a device in pool "kv"; host a (whose file does not name it) drops
    the placement rule b's file seeded and retires the pool, which holds nothing. b's view of the
    pool says its file and the ledger disagree."""
    common: dict[str, Any] = {"auth": "token", "database_url": pg_url, "emulate_size": 64 * MiB}
    with serving_daemon(tmp_path / "a", host_id="host-a", **common) as (_, url_a), \
            serving_daemon(tmp_path / "b", host_id="host-b",
                           device_pools={"dax-not-here.0": "kv"}, **common) as (_, url_b):
        a, b = Daemon(url_a, tmp_path / "a"), Daemon(url_b, tmp_path / "b")
        try:
            assert b.admin.get("/v1/pools/kv").json()["config_disagrees"] == []
            a.admin.put("/v1/pool-rules", json={"rules": []}).raise_for_status()
            retired = a.admin.delete("/v1/pools/kv")
            assert retired.status_code == 200 and retired.json()["retired_at"], retired.text
            assert a.admin.get("/v1/pools/kv").json()["config_disagrees"] == []  # a's file: no kv
            assert b.admin.get("/v1/pools/kv").json()["config_disagrees"] == [
                {"setting": "retired", "file": False, "ledger": True}]
        finally:
            a.admin.close()
            b.admin.close()
