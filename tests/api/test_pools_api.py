"""Pools administered through the API, on both databases: create, edit, retire and per-tenant
quotas; grants obey the policy (403 for a tenant outside the pool's list, 422 past its maximum
TTL, 429 past a quota in the pool); every refusal leaves every ledger row as it was; tenants see
only the pools they may lease from and nothing of other tenants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from poold.types import MiB
from tests.api.admin_served import Served
from tests.daemon_fixtures import serving_daemon


def events(served: Served, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = served.admin.get("/v1/events", params={
        "kind": kind, "limit": 1000}).json()
    return found


def test_an_admin_creates_edits_and_retires_a_pool(served: Served) -> None:
    made = served.admin.post("/v1/pools", json={
        "name": "gpu-kv", "description": "KV offload for the GPU hosts", "max_ttl_s": 3600,
        "scrub_on_release": False, "allowed_tenants": ["team-b", "team-a", "team-a"]})
    assert made.status_code == 201, made.text
    pool = made.json()
    assert (pool["name"], pool["description"], pool["max_ttl_s"], pool["scrub_on_release"],
            pool["allowed_tenants"], pool["devices"], pool["retired_at"]) == (
        "gpu-kv", "KV offload for the GPU hosts", 3600, False, ["team-a", "team-b"], 0, None)
    assert pool["default_ttl_s"] == 60 and pool["trusted"] is False  # the config's defaults
    created = [e for e in events(served, "pool.created") if e["details"]["pool"] == "gpu-kv"]
    assert len(created) == 1 and created[0]["actor"].startswith("admin:")

    edited = served.admin.patch("/v1/pools/gpu-kv", json={"max_ttl_s": 600,
                                                          "allowed_tenants": None})
    assert edited.status_code == 200, edited.text
    assert (edited.json()["max_ttl_s"], edited.json()["allowed_tenants"]) == (600, None)
    changed = events(served, "pool.changed")[0]  # the newest
    assert changed["details"] == {"pool": "gpu-kv", "changed": {
        "max_ttl_s": [3600, 600], "allowed_tenants": [["team-a", "team-b"], None]}}
    assert served.admin.get("/v1/pools/gpu-kv").json()["max_ttl_s"] == 600
    # null clears the description; where the policy needs a value, null leaves it as it is.
    cleared = served.admin.patch("/v1/pools/gpu-kv", json={"description": None,
                                                          "max_ttl_s": None}).json()
    assert (cleared["description"], cleared["max_ttl_s"]) == ("", 600)

    retired = served.admin.delete("/v1/pools/gpu-kv")
    assert retired.status_code == 200 and retired.json()["retired_at"] is not None
    assert "gpu-kv" not in [p["name"] for p in served.admin.get("/v1/pools").json()]
    assert "gpu-kv" in [p["name"] for p in served.admin.get(
        "/v1/pools", params={"retired": "true"}).json()]
    detail = served.refused(404, "UnknownPool", "POST", "/v1/leases",
                            json={"size": 2 * MiB, "pool": "gpu-kv"})
    assert "retired" in detail
    served.refused(404, "UnknownPool", "PATCH", "/v1/pools/gpu-kv", json={"max_ttl_s": 60})
    # Created again: back, with the new policy.
    again = served.admin.post("/v1/pools", json={"name": "gpu-kv"})
    assert again.status_code == 201 and again.json()["retired_at"] is None
    assert again.json()["max_ttl_s"] == 86_400


def test_refusals_change_nothing(served: Served) -> None:
    served.admin.post("/v1/pools", json={"name": "spare"}).raise_for_status()
    served.refused(409, "Conflict", "POST", "/v1/pools", json={"name": "spare"})
    for bad in ("", "-x", "a/b", "x" * 129, "tab\there"):
        served.refused(422, "ValidationError", "POST", "/v1/pools", json={"name": bad})
    served.refused(422, "InvalidRequest", "POST", "/v1/pools",
                   json={"name": "upside-down", "default_ttl_s": 600, "max_ttl_s": 60})
    detail = served.refused(422, "InvalidRequest", "PATCH", "/v1/pools/spare",
                            json={"default_ttl_s": 100_000})
    assert "max_ttl_s" in detail
    served.refused(422, "ValidationError", "PATCH", "/v1/pools/spare", json={"name": "other"})
    served.refused(422, "ValidationError", "PATCH", "/v1/pools/spare",
                   json={"allowed_tenants": ["bad name"]})
    served.refused(422, "ValidationError", "PATCH", "/v1/pools/spare", json={"max_ttl_s": "60"})
    served.refused(404, "UnknownPool", "PATCH", "/v1/pools/nowhere", json={"max_ttl_s": 60})
    served.refused(404, "UnknownPool", "DELETE", "/v1/pools/nowhere")
    # The default pool holds the emulated device, and this daemon's config places devices there.
    detail = served.refused(409, "Conflict", "DELETE", "/v1/pools/default")
    assert "config" in detail
    detail = served.refused(404, "UnknownTenant", "DELETE", "/v1/pools/spare/quotas/nobody")
    assert detail == "tenant 'nobody' has no quota in pool 'spare'"
    served.refused(422, "ValidationError", "PUT", "/v1/pools/spare/quotas/team-a",
                   json={"max_bytes": -1})
    with served.tenant("team-a") as tenant:
        for method, path, body in (("POST", "/v1/pools", {"name": "mine"}),
                                   ("PATCH", "/v1/pools/spare", {"max_ttl_s": 60}),
                                   ("DELETE", "/v1/pools/spare", None),
                                   ("PUT", "/v1/pools/spare/quotas/team-a", {"max_bytes": 1})):
            served.refused(403, "Forbidden", method, path, client=tenant, json=body)


def device_id(served: Served, devname: str = "emu0") -> int:
    found = [d for d in served.admin.get("/v1/devices").json() if d["devname"] == devname]
    return int(found[0]["id"])


def pool_of(served: Served, devname: str = "emu0") -> str:
    found = [d for d in served.admin.get("/v1/devices").json() if d["devname"] == devname]
    return str(found[0]["pool"])


def test_a_device_moves_between_pools_only_when_nothing_holds_it(served: Served) -> None:
    served.admin.post("/v1/pools", json={"name": "holding"}).raise_for_status()
    emu = device_id(served)
    lease = served.admin.post("/v1/leases", json={"size": 2 * MiB}).json()
    detail = served.refused(409, "DeviceBusy", "POST", "/v1/pools/holding/devices",
                            json={"device_id": emu})
    assert lease["id"] in detail and "drain" in detail
    served.admin.delete(f"/v1/leases/{lease['id']}").raise_for_status()  # unscrubbed: freed

    moved = served.admin.post("/v1/pools/holding/devices", json={"device_id": emu})
    assert moved.status_code == 200, moved.text
    assert moved.json()["devices"] == 1 and pool_of(served) == "holding"
    change = events(served, "device.changed")[0]
    assert change["details"]["changed"] == {"pool": ["default", "holding"]}
    assert change["actor"].startswith("admin:")
    # Grants follow the device at once: the pool it left has nothing to grant from.
    assert served.admin.post("/v1/leases", json={"size": 2 * MiB, "pool": "holding"}
                             ).status_code == 201
    gone = served.admin.post("/v1/leases", json={"size": 2 * MiB})
    assert (gone.status_code, gone.json()["error"]) == (422, "LeaseTooLarge")
    assert "no online device in pool 'default'" in gone.json()["detail"]
    # Again: nothing to do. Unknown device, unknown or retired pool: refused, nothing changed.
    assert served.admin.post("/v1/pools/holding/devices", json={"device_id": emu}
                             ).status_code == 200
    served.refused(404, "UnknownDevice", "POST", "/v1/pools/default/devices",
                   json={"device_id": 999_999})
    served.refused(404, "UnknownPool", "POST", "/v1/pools/nowhere/devices",
                   json={"device_id": emu})
    served.refused(422, "ValidationError", "POST", "/v1/pools/default/devices",
                   json={"device_id": "1"})
    detail = served.refused(409, "Conflict", "DELETE", "/v1/pools/holding")
    assert "emu0" in detail and "move them out" in detail


def test_a_moved_device_stays_in_its_pool_across_a_restart(tmp_path: Path,
                                                            ledger_url: str) -> None:
    settings: dict[str, Any] = {"auth": "token", "database_url": ledger_url,
                                "emulate_size": 64 * MiB}
    with serving_daemon(tmp_path, **settings) as (daemon, url):
        served = Served(daemon, url, tmp_path)
        served.admin.post("/v1/pools", json={"name": "kept"}).raise_for_status()
        served.admin.post("/v1/pools/kept/devices", json={"device_id": device_id(served)}
                          ).raise_for_status()
        served.admin.close()
    with serving_daemon(tmp_path, **settings) as (daemon, url):
        served = Served(daemon, url, tmp_path)
        assert pool_of(served) == "kept"  # the config's rule (default_pool) does not undo it
        served.admin.close()


def test_grants_obey_the_pools_policy(served: Served) -> None:
    served.admin.patch("/v1/pools/default", json={
        "allowed_tenants": ["team-a"], "max_ttl_s": 120}).raise_for_status()
    with served.tenant("team-a") as a, served.tenant("team-b") as b:
        detail = served.refused(403, "TenantNotAllowed", "POST", "/v1/leases", client=b,
                                json={"size": 2 * MiB})
        assert "'default'" in detail and "team-b" in detail
        detail = served.refused(422, "InvalidRequest", "POST", "/v1/leases", client=a,
                                json={"size": 2 * MiB, "ttl_s": 121})
        assert "120" in detail and "'default'" in detail
        lease = a.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 120}).json()
        # The admin lowers the maximum: the live lease keeps its bytes, and its keepalive
        # (asking nothing) renews within the new maximum instead of failing.
        served.refused(422, "InvalidRequest", "PATCH", "/v1/pools/default",
                       json={"max_ttl_s": 30})  # under the default TTL (60)
        served.admin.patch("/v1/pools/default", json={"max_ttl_s": 30,
                                                      "default_ttl_s": 30}).raise_for_status()
        renewed = a.post(f"/v1/leases/{lease['id']}/keepalive", json={})
        assert renewed.status_code == 200 and renewed.json()["ttl_s"] == 30
        served.refused(422, "InvalidRequest", "POST", f"/v1/leases/{lease['id']}/keepalive",
                       client=a, json={"ttl_s": 60})
        # An admin's own grant (no tenant) is the operators': the list does not apply.
        assert served.admin.post("/v1/leases", json={"size": 2 * MiB}).status_code == 201
        served.admin.post("/v1/leases", json={"size": 2 * MiB, "tenant": "team-b"})
        served.refused(403, "TenantNotAllowed", "POST", "/v1/leases",
                       json={"size": 2 * MiB, "tenant": "team-b"})


def test_a_tenants_quota_in_a_pool(served: Served) -> None:
    served.admin.post("/v1/pools", json={"name": "other"}).raise_for_status()
    shown = served.admin.put("/v1/pools/default/quotas/team-a",
                             json={"max_bytes": 8 * MiB, "max_leases": 2})
    assert shown.status_code == 200, shown.text
    assert shown.json()["quotas"] == [{"tenant": "team-a", "max_bytes": 8 * MiB,
                                       "max_leases": 2, "leased_bytes": 0, "live_leases": 0}]
    with served.tenant("team-a") as a, served.tenant("team-b") as b:
        a.post("/v1/leases", json={"size": 4 * MiB}).raise_for_status()
        detail = served.refused(429, "QuotaExceeded", "POST", "/v1/leases", client=a,
                                json={"size": 6 * MiB})
        assert "in pool 'default'" in detail
        a.post("/v1/leases", json={"size": 4 * MiB}).raise_for_status()
        detail = served.refused(429, "QuotaExceeded", "POST", "/v1/leases", client=a,
                                json={"size": 2 * MiB})
        assert "2 leases" in detail and "in pool 'default'" in detail
        assert b.post("/v1/leases", json={"size": 8 * MiB}).status_code == 201  # not b's quota
        quotas = served.admin.get("/v1/pools/default").json()["quotas"]
        assert quotas[0]["leased_bytes"] == 8 * MiB and quotas[0]["live_leases"] == 2
        # A tenant sees its own quota, not the others'.
        answer = served.admin.put("/v1/pools/default/quotas/team-b", json={"max_leases": 9})
        assert [(q["tenant"], q["leased_bytes"]) for q in answer.json()["quotas"]] == [
            ("team-a", 8 * MiB), ("team-b", 8 * MiB)]  # a write's answer has the live figures
        assert [q["tenant"] for q in b.get("/v1/pools/default").json()["quotas"]] == ["team-b"]
        # Cleared: its global quotas alone hold again.
        cleared = served.admin.delete("/v1/pools/default/quotas/team-a")
        assert cleared.status_code == 200
        assert [q["tenant"] for q in cleared.json()["quotas"]] == ["team-b"]
        assert a.post("/v1/leases", json={"size": 4 * MiB}).status_code == 201
    changes = events(served, "pool.quota_changed")
    newest_first = [e["details"].get("cleared", False) for e in changes]
    assert newest_first == [True, False, False]
    assert changes[0]["host"] == "test-host"  # the daemon that cleared it
    assert (changes[0]["details"]["pool"], changes[0]["details"]["tenant"]) == ("default",
                                                                                "team-a")


def test_a_tenant_sees_only_the_pools_it_may_use(served: Served) -> None:
    served.admin.post("/v1/pools", json={"name": "private",
                                         "allowed_tenants": ["team-a", "team-c"]})
    served.admin.post("/v1/pools", json={"name": "closed", "allowed_tenants": ["team-c"]})
    with served.tenant("team-a") as a:
        seen = {p["name"]: p for p in a.get("/v1/pools").json()}
        assert set(seen) == {"default", "private"}
        assert seen["private"]["allowed_tenants"] == ["team-a"]  # not team-c
        assert seen["default"]["allowed_tenants"] is None
        gone = a.get("/v1/pools/closed")
        assert (gone.status_code, gone.json()["error"]) == (404, "UnknownPool")
        assert a.get("/v1/pools/private").json()["config_disagrees"] == []


def test_a_host_agent_sees_every_pool_as_it_is(served: Served) -> None:
    """A host agent leases for any tenant on its host: it sees restricted and retired pools
    whole, as an admin does (but manages none)."""
    served.admin.post("/v1/pools", json={"name": "closed", "allowed_tenants": ["team-c"]})
    served.admin.post("/v1/pools", json={"name": "old"})
    served.admin.delete("/v1/pools/old").raise_for_status()
    made = served.admin.post("/v1/tokens", json={"name": "agent-1", "role": "agent"})
    assert made.status_code == 201, made.text
    with httpx.Client(base_url=served.url, timeout=30, headers={
            "Authorization": f"Bearer {made.json()['bearer']}"}) as agent:
        seen = {p["name"]: p for p in agent.get("/v1/pools",
                                                params={"retired": "true"}).json()}
        assert set(seen) == {"default", "closed", "old"}
        assert seen["closed"]["allowed_tenants"] == ["team-c"]
        assert agent.get("/v1/pools/closed").json()["allowed_tenants"] == ["team-c"]
        assert agent.get("/v1/pools/old").json()["retired_at"] is not None
