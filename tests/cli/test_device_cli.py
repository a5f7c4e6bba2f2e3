"""`poold device ...` against a serving daemon whose sysfs is a writable recorded tree answered
by a fake kernel: JSON with the API's keys on success, the error class on stderr and exit 1 on a
refusal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.daxctl import DaxControl
from poold.cli.main import main
from poold.types import MiB
from tests.daemon.test_device_ops import NO_SCRUB
from tests.daemon_fixtures import serving_daemon
from tests.drivers.fake_kernel import FakeKernel


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    kernel = FakeKernel("sysfs-d-hmem-subdivided", tmp_path)
    with serving_daemon(tmp_path / "state", sysfs_root=kernel.root, emulate_size=None,
                        watch_udev=False, **NO_SCRUB) as (daemon, base):
        daemon.app.state.device_admin.dax = DaxControl(kernel)
        daemon.app.state.auth = None  # no credential needed for this test
        yield base


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_device_commands(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "device", "create", "--region", "0", "--size", "128MiB",
                       "--url", url)
    assert code == 0
    created = json.loads(out)
    assert created["devname"] == "dax0.4" and created["device"]["size"] == 128 * MiB

    code, out, _ = cli(capsys, "device", "drain", "dax0.4", "--url", url)
    assert code == 0 and json.loads(out)["device"]["state"] == "draining"
    code, out, _ = cli(capsys, "device", "undrain", "dax0.4", "--url", url)
    assert code == 0 and json.loads(out)["device"]["state"] == "online"

    code, out, _ = cli(capsys, "device", "resize", "dax0.4", "64MiB", "--url", url)
    assert code == 0 and json.loads(out)["kernel"]["size"] == 64 * MiB
    code, out, _ = cli(capsys, "device", "reconfigure", "dax0.3", "--mode", "system-ram",
                       "--url", url)
    assert code == 0 and json.loads(out)["device"]["kind"] == "system-ram"

    code, _, err = cli(capsys, "device", "destroy", "dax0.0", "--url", url)
    assert code == 1 and json.loads(err)["error"] == "DeviceBusy" and "dax0.0" in err
    code, out, _ = cli(capsys, "device", "destroy", "dax0.4", "--url", url)
    assert code == 0 and json.loads(out)["kernel"] is None
