"""`poold pool ...` as an operator runs it: the installed command as a subprocess against a real
`poold serve` process, on each database; what it changes is checked with plain HTTP requests,
and what it refuses leaves the pool as it was.
"""

from __future__ import annotations

import httpx

from poold.types import GiB, MiB
from tests.cli.served import Daemon, refusal
from tests.timing import patience, until


def test_an_operator_runs_a_pool_from_the_cli(daemon: Daemon) -> None:
    made = daemon.json("pool", "create", "gpu-kv", "--description", "KV tier", "--max-ttl",
                       "3600", "--no-scrub", "--allow", "team-b", "--allow", "team-a",
                       "--max-lease-size", "1GiB")
    assert (made["name"], made["description"], made["max_ttl_s"], made["scrub_on_release"],
            made["allowed_tenants"], made["max_lease_size"]) == (
        "gpu-kv", "KV tier", 3600, False, ["team-a", "team-b"], GiB)

    changed = daemon.json("pool", "set", "gpu-kv", "--scrub", "--allow-everyone",
                          "--no-max-lease-size", "--default-ttl", "30")
    assert (changed["scrub_on_release"], changed["allowed_tenants"], changed["max_lease_size"],
            changed["default_ttl_s"], changed["max_ttl_s"]) == (True, None, None, 30, 3600)

    quota = daemon.json("pool", "quota", "gpu-kv", "team-a", "--max-bytes", "64MiB")
    assert quota["quotas"] == [{"tenant": "team-a", "max_bytes": 64 * MiB, "max_leases": None,
                                "leased_bytes": 0, "live_leases": 0}]
    assert daemon.json("pool", "quota", "gpu-kv", "team-a", "--clear")["quotas"] == []

    shown = daemon.json("pool", "show", "gpu-kv")
    assert shown == daemon.json("pool", "show", "gpu-kv")  # a read changes nothing
    # Refused: the pool stays as it was.
    upside_down = refusal(daemon.cli("pool", "set", "gpu-kv", "--default-ttl", "7200",
                                     ok=False))
    assert upside_down["error"] == "InvalidRequest" and "max_ttl_s" in upside_down["detail"]
    assert refusal(daemon.cli("pool", "create", "gpu-kv", ok=False))["error"] == "Conflict"
    assert refusal(daemon.cli("pool", "retire", "default", ok=False))["error"] == "Conflict"
    assert refusal(daemon.cli("pool", "show", "nowhere", ok=False))["error"] == "UnknownPool"
    bad = daemon.cli("pool", "set", "gpu-kv", "--scrub", "--no-scrub", ok=False)
    assert bad.returncode == 2 and "not allowed with" in bad.stderr
    assert daemon.json("pool", "show", "gpu-kv") == shown

    retired = daemon.json("pool", "retire", "gpu-kv")
    assert retired["retired_at"] is not None
    assert "gpu-kv" not in [p["name"] for p in daemon.json("pool", "list")]
    assert "gpu-kv" in [p["name"] for p in daemon.json("pool", "list", "--retired")]


def test_devices_and_rules_from_the_cli(daemon: Daemon) -> None:
    daemon.json("pool", "create", "spare")
    emu = next(d for d in daemon.json("list", "devices") if d["devname"] == "emu0")
    admin = (daemon.state / "admin.token").read_text().strip()
    lease = daemon.grant(admin, 2 * MiB).json()
    # Moving a leased device is refused; nothing changes.
    busy = refusal(daemon.cli("pool", "move", "spare", str(emu["id"]), ok=False))
    assert busy["error"] == "DeviceBusy" and lease["id"] in busy["detail"]
    assert daemon.json("pool", "show", "spare")["devices"] == 0
    httpx.delete(f"{daemon.url}/v1/leases/{lease['id']}",
                 headers={"Authorization": f"Bearer {admin}"}).raise_for_status()
    until("the released lease is scrubbed", lambda: not [
        x for x in httpx.get(f"{daemon.url}/v1/devices/{emu['id']}/extents",
                             headers={"Authorization": f"Bearer {admin}"}).json()["leases"]],
          patience())
    assert daemon.json("pool", "move", "spare", str(emu["id"]))["devices"] == 1
    moved = next(d for d in daemon.json("list", "devices") if d["devname"] == "emu0")
    assert (moved["pool"], moved["pool_assigned"]) == ("spare", True)

    rules = daemon.json("pool", "rules", "--set", "serial=0x4a*:spare", "--set",
                        "name=dax1.*:default")
    assert rules["rules"] == [{"field": "serial", "pattern": "0x4a*", "pool": "spare"},
                              {"field": "name", "pattern": "dax1.*", "pool": "default"}]
    assert daemon.json("pool", "rules")["rules"] == rules["rules"]
    unknown = refusal(daemon.cli("pool", "rules", "--set", "name=x:nowhere", ok=False))
    assert unknown["error"] == "UnknownPool"
    typo = daemon.cli("pool", "rules", "--set", "name-dax", ok=False)
    assert typo.returncode == 2 and "FIELD=GLOB:POOL" in typo.stderr
    assert daemon.json("pool", "rules")["rules"] == rules["rules"]  # unchanged
    assert daemon.json("pool", "rules", "--clear")["rules"] == []
