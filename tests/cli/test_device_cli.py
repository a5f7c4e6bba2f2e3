"""`poold device ...` against a serving daemon whose sysfs is a writable recorded tree answered
by a fake kernel: JSON with the API's keys on success, the error class on stderr and exit 1 on a
refusal; a tenant's or an agent's token is refused every operation (403) and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.daxctl import DaxControl
from poold import errors
from poold.cli.main import main
from poold.client import PooldClient
from poold.daemon import Daemon
from poold.types import MiB
from tests.daemon.test_device_ops import NO_SCRUB, unchanged
from tests.daemon_fixtures import serving_daemon
from tests.drivers.fake_kernel import FakeKernel


@pytest.fixture
def kernel(tmp_path: Path) -> FakeKernel:
    return FakeKernel("sysfs-d-hmem-subdivided", tmp_path)


@pytest.fixture
def served(tmp_path: Path, kernel: FakeKernel) -> Iterator[tuple[Daemon, str]]:
    with serving_daemon(tmp_path / "state", sysfs_root=kernel.root, emulate_size=None,
                        watch_udev=False, auth="token", **NO_SCRUB) as (daemon, base):
        daemon.app.state.device_admin.dax = DaxControl(kernel)
        yield daemon, base


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def admin_token(daemon: Daemon) -> str:
    assert daemon.admin_credential is not None
    return daemon.admin_credential.read_text().strip()


def test_device_commands(served: tuple[Daemon, str], capsys: pytest.CaptureFixture[str]) -> None:
    daemon, url = served
    api = ("--url", url, "--token", admin_token(daemon))
    code, out, _ = cli(capsys, "device", "create", "--region", "0", "--size", "128MiB", *api)
    assert code == 0
    created = json.loads(out)
    assert created["devname"] == "dax0.4" and created["device"]["size"] == 128 * MiB

    code, out, _ = cli(capsys, "device", "drain", "dax0.4", *api)
    assert code == 0 and json.loads(out)["device"]["state"] == "draining"
    with PooldClient(url, token=admin_token(daemon)) as sdk, pytest.raises(
            errors.DeviceDraining, match=r"dax0.4.*draining") as refused:
        sdk.raw("POST", "/v1/leases", json={"size": MiB, "device": "dax0.4"})
    assert getattr(refused.value, "status", None) == 409  # the SDK rebuilt the daemon's class
    code, out, _ = cli(capsys, "device", "undrain", "dax0.4", *api)
    assert code == 0 and json.loads(out)["device"]["state"] == "online"

    code, out, _ = cli(capsys, "device", "resize", "dax0.4", "64MiB", *api)
    assert code == 0 and json.loads(out)["kernel"]["size"] == 64 * MiB
    code, out, _ = cli(capsys, "device", "reconfigure", "dax0.3", "--mode", "system-ram", *api)
    assert code == 0 and json.loads(out)["device"]["kind"] == "system-ram"

    code, _, err = cli(capsys, "device", "destroy", "dax0.0", *api)
    assert code == 1 and json.loads(err)["error"] == "DeviceBusy" and "dax0.0" in err
    code, out, _ = cli(capsys, "device", "destroy", "dax0.4", *api)
    assert code == 0 and json.loads(out)["kernel"] is None


# Every `poold device` command: admins only.
COMMANDS = [
    ("create", "--region", "0", "--size", "64MiB"),
    ("destroy", "dax0.1"),
    ("resize", "dax0.1", "128MiB"),
    ("reconfigure", "dax0.1", "--mode", "system-ram"),
    ("drain", "dax0.1"),
    ("undrain", "dax0.1"),
]


def test_tenants_and_agents_are_refused_every_command(
        served: tuple[Daemon, str], kernel: FakeKernel,
        capsys: pytest.CaptureFixture[str]) -> None:
    daemon, url = served
    with PooldClient(url, token=admin_token(daemon)) as admin:
        bearers = {role: admin.raw("POST", "/v1/tokens", json={
            "name": f"cli-{role}", "role": role, "tenant": tenant})["bearer"]
            for role, tenant in (("tenant", "team-a"), ("agent", None))}
        admin.raw("POST", "/v1/devices/dax0.1/drain")  # so that undrain would change it
    before = unchanged(daemon, kernel)
    for role, bearer in bearers.items():
        for command in COMMANDS:
            code, out, err = cli(capsys, "device", *command, "--url", url, "--token", bearer)
            assert (code, out) == (1, ""), (role, command)
            assert json.loads(err)["error"] == "Forbidden", (role, command, err)
    assert unchanged(daemon, kernel) == before
