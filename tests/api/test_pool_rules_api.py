"""Placement rules through the API, on both databases: set and read in order, refused (bad
field, unknown or retired pool) leaving every row as it was; a pool a rule names cannot be
retired; a host's device_pools seed the rules once and the ledger's win after that (logged);
a device that first appears on another host of the ledger is placed by the ledger's rules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from poold.types import MiB
from tests.api.admin_served import Served
from tests.daemon_fixtures import serving_daemon

EMU_RULE = {"field": "name", "pattern": "emu*", "pool": "spare"}


def test_rules_are_set_in_order_and_refusals_change_nothing(served: Served) -> None:
    assert served.admin.get("/v1/pool-rules").json() == {"rules": [], "config_rules": []}
    served.admin.post("/v1/pools", json={"name": "spare"}).raise_for_status()
    rules = [EMU_RULE, {"field": "serial", "pattern": "0x4a*", "pool": "default"}]
    put = served.admin.put("/v1/pool-rules", json={"rules": rules})
    assert put.status_code == 200, put.text
    assert put.json()["rules"] == rules
    assert served.admin.get("/v1/pool-rules").json()["rules"] == rules
    event = served.admin.get("/v1/events", params={"kind": "pool.rules_changed"}).json()[0]
    assert event["actor"].startswith("admin:") and event["details"]["rules"] == rules

    bad_field = {"rules": [{"field": "colour", "pattern": "*", "pool": "spare"}]}
    served.refused(422, "ValidationError", "PUT", "/v1/pool-rules", json=bad_field)
    nowhere = {"rules": [{"field": "name", "pattern": "*", "pool": "nowhere"}]}
    served.refused(404, "UnknownPool", "PUT", "/v1/pool-rules", json=nowhere)
    served.refused(422, "ValidationError", "PUT", "/v1/pool-rules",
                   json={"rules": [EMU_RULE] * 257})
    detail = served.refused(409, "Conflict", "DELETE", "/v1/pools/spare")
    assert "placement rules" in detail
    with served.tenant("team-r") as tenant:
        assert served.refused(403, "Forbidden", "PUT", "/v1/pool-rules", client=tenant,
                              json={"rules": []}) == "tenant:team-r is not an admin"
        assert served.refused(403, "Forbidden", "GET", "/v1/pool-rules", client=tenant) == (
            "tenant:team-r is a tenant; this needs an admin or a host agent")
    assert served.admin.put("/v1/pool-rules", json={"rules": []}).json()["rules"] == []
    assert served.admin.delete("/v1/pools/spare").status_code == 200


def test_a_device_new_to_the_ledger_is_placed_by_its_rules(served: Served,
                                                            tmp_path: Path,
                                                            ledger_url: str) -> None:
    served.admin.post("/v1/pools", json={"name": "spare"}).raise_for_status()
    served.admin.put("/v1/pool-rules", json={"rules": [EMU_RULE]}).raise_for_status()
    # Already placed: the rules do not move it.
    mine = [d for d in served.admin.get("/v1/devices").json() if d["host"] == "test-host"]
    assert [d["pool"] for d in mine] == ["default"]
    with serving_daemon(tmp_path / "two", host_id="host-two", auth="token",
                        database_url=ledger_url, emulate_size=32 * MiB):
        theirs = [d for d in served.admin.get("/v1/devices").json() if d["host"] == "host-two"]
        assert [(d["devname"], d["pool"], d["pool_assigned"]) for d in theirs] == [
            ("emu0", "spare", False)]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_device_pools_seed_the_rules_once(tmp_path: Path, ledger_url: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    settings: dict[str, Any] = {"database_url": ledger_url, "emulate_size": 32 * MiB,
                                "device_pools": {"emu*": "seeded"}}
    seeded = [{"field": "device", "pattern": "emu*", "pool": "seeded"}]
    with serving_daemon(tmp_path, **settings) as (_daemon, url):
        assert httpx.get(f"{url}/v1/pool-rules").json() == {"rules": seeded,
                                                            "config_rules": seeded}
        assert httpx.put(f"{url}/v1/pool-rules", json={"rules": []}).status_code == 200
    with caplog.at_level(logging.WARNING, logger="poold.daemon.app"), \
            serving_daemon(tmp_path, **settings) as (_daemon, url):
        # The admin's "no rules" stands; the file that says otherwise is logged.
        assert httpx.get(f"{url}/v1/pool-rules").json() == {"rules": [],
                                                            "config_rules": seeded}
    assert any("pool.config_rules_disagree" in r.getMessage() for r in caplog.records)
