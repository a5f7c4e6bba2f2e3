"""A devdax device that cannot be carved per lease (here a legacy pmem namespace, a static
region) is handed to its holders whole: a descriptor of it reaches every byte of it. So, outside
a trusted pool, it serves one tenant at a time: its first lease binds it, another tenant's grant
goes elsewhere or is refused 409 naming why, and an admin frees it once that tenant's leases are
over. Both databases; the recorded kernel tree; the scrubber's zeroing seam stubbed (there is no
/dev/dax0.0 here)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from poold.client import PooldClient
from poold.daemon import Daemon
from poold.errors import DeviceBound, DeviceBusy
from poold.ledger.fsck import fsck
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon
from tests.sysfs_trees import extract

TREE = "sysfs-c-legacy-pmem-devdax"  # dax0.0: a static (pmem-backed) region's device


@contextmanager
def served(tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch,
           **settings: Any) -> Iterator[tuple[Daemon, str, dict[str, str]]]:
    """A daemon with auth on: its URL and a token per tenant (a, b) and the admin's."""
    root = extract(TREE, tmp_path / "tree") / "sys"
    defaults: dict[str, Any] = {"auth": "token", "database_url": ledger_url, "sysfs_root": root,
                                "watch_udev": False, "emulate_size": None}
    with serving_daemon(tmp_path / "state", **{**defaults, **settings}) as (daemon, url):
        monkeypatch.setattr(daemon.scrubber, "_zero", lambda job, maps: None)
        admin = (tmp_path / "state" / "admin.token").read_text().strip()
        tokens = {"admin": admin}
        with PooldClient(url, token=admin) as client:
            for name in ("a", "b"):
                tokens[name] = client.raw("POST", "/v1/tokens", json={
                    "name": name, "role": "tenant", "tenant": f"team-{name}"})["bearer"]
        yield daemon, url, tokens


def device(client: PooldClient, devname: str = "dax0.0") -> dict[str, Any]:
    found: dict[str, Any] = next(d for d in client.raw("GET", "/v1/devices")
                                 if d["devname"] == devname)
    return found


def test_a_device_handed_out_whole_serves_one_tenant_at_a_time(
        tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with served(tmp_path, ledger_url, monkeypatch) as (daemon, url, tokens), \
            PooldClient(url, token=tokens["a"]) as a, PooldClient(url, token=tokens["b"]) as b, \
            PooldClient(url, token=tokens["admin"]) as admin:
        first = a.grant(8 * MiB)
        assert first.device == "dax0.0" and first.map_path == "/dev/dax0.0"
        assert device(admin)["tenant_scope"] == "team-a"
        assert a.grant(8 * MiB).device == "dax0.0"  # its own tenant's next lease: the same
        with pytest.raises(DeviceBound, match=r"dax0\.0 in pool") as refused:
            b.grant(8 * MiB)
        # What b learns: the device is someone else's, never whose, and how it gets free.
        assert str(refused.value) == (
            "dax0.0 in pool 'default' serve(s) another tenant's leases: a device handed out "
            "whole serves one tenant at a time (a trusted pool shares it); an admin frees one "
            "with `poold device unbind-tenant` once that tenant's leases ended")
        assert device(b)["tenant_scope"] is None and device(a)["tenant_scope"] == "team-a"
        # Freed only once none of team-a's leases holds bytes there.
        with pytest.raises(DeviceBusy):
            admin.raw("DELETE", "/v1/devices/dax0.0/tenant")
        for lease in a.leases():
            a.release(lease.id)
        daemon.scrubber.run_once()
        assert admin.raw("DELETE", "/v1/devices/dax0.0/tenant")["tenant_scope"] is None
        assert b.grant(8 * MiB).device == "dax0.0"
        assert device(admin)["tenant_scope"] == "team-b"
        changes = [e.details["changed"] for e in admin.events(kind="device.changed")]
        assert changes == [{"tenant_scope": "team-b"}, {"tenant_scope": None},
                           {"tenant_scope": "team-a"}]
        assert daemon.ledger.read(fsck).clean


def test_another_tenant_is_placed_on_memory_of_its_own_instead(
        tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with served(tmp_path, ledger_url, monkeypatch, emulate_size=64 * MiB,
                device_pools={}) as (_daemon, url, tokens), \
            PooldClient(url, token=tokens["a"]) as a, PooldClient(url, token=tokens["b"]) as b:
        # The emulated device (a memfd per lease) first: nothing bound for that.
        assert a.grant(8 * MiB).device == "emu0"
        big = a.grant(128 * MiB)  # only the static device holds this much
        assert big.device == "dax0.0"
        assert b.grant(8 * MiB).device == "emu0"  # not refused: placed where it is alone
        with pytest.raises(DeviceBound):
            b.grant(128 * MiB)


def test_a_trusted_pool_shares_its_devices(tmp_path: Path, ledger_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with served(tmp_path, ledger_url, monkeypatch,
                trusted_pools=["default"]) as (daemon, url, tokens), \
            PooldClient(url, token=tokens["a"]) as a, PooldClient(url, token=tokens["b"]) as b, \
            PooldClient(url, token=tokens["admin"]) as admin:
        assert a.grant(8 * MiB).device == b.grant(8 * MiB).device == "dax0.0"
        assert device(admin)["tenant_scope"] is None
        assert next(p for p in admin.pools() if p.name == "default").trusted
        assert daemon.ledger.read(fsck).clean


def test_fsck_sees_two_tenants_on_a_device_handed_out_whole(
        tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with served(tmp_path, ledger_url, monkeypatch) as (daemon, url, tokens), \
            PooldClient(url, token=tokens["a"]) as a:
        lease = a.grant(8 * MiB)
        a.grant(8 * MiB)
        with daemon.ledger._write_engine.begin() as conn:  # a bug's doing, by hand
            conn.execute(text("UPDATE leases SET tenant = 'team-b' WHERE id = :id"),
                         {"id": lease.id})
        report = daemon.ledger.read(fsck)
        assert any("one tenant's bytes reachable by another" in v for v in report.violations)
