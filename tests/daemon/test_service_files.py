"""The files an operator installs: the systemd unit and the example config.

The unit is checked by `systemd-analyze verify` where it exists (Debian's `systemd` package; CI
has it and sets POOLD_TEST_REQUIRE_SYSTEMD=1), and for the directives the service relies on.
The example config must be exactly what packaging/make_config.py makes from Settings, name every
setting, and load with every line uncommented.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from poold.config import Settings, load_settings
from tests.preconditions import unmet

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "poold.service"
EXAMPLE = ROOT / "packaging" / "poold.toml"
EXEC = "/usr/local/bin/poold"


def unit_settings() -> dict[str, list[str]]:
    """Every `Key=value` of the unit (keys may repeat), comments left out."""
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        unmet("systemd", "systemd-analyze not installed (Debian package `systemd`; CI installs it)")
    text = UNIT.read_text()
    if not os.access(EXEC, os.X_OK):
        # verify insists ExecStart's binary exists: point it at this checkout's poold instead.
        poold = Path(sys.executable).parent / "poold"
        assert poold.exists(), f"{poold} missing: install the package (pip install -e .)"
        text = text.replace(f"ExecStart={EXEC} ", f"ExecStart={poold} ")
    unit = tmp_path / "poold.service"
    unit.write_text(text)
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True,
                            text=True, timeout=120)
    # verify exits 0 on unknown keys and bad values too, only warning: any output is a finding.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), \
        result.stdout + result.stderr


def test_unit_is_a_hardened_notify_service() -> None:
    s = unit_settings()
    expected = {
        "Type": "notify", "WatchdogSec": "30s", "Restart": "on-failure",
        "ExecStart": f"{EXEC} serve --config /etc/poold/poold.toml",
        "StateDirectory": "poold", "FileDescriptorStoreMax": "16384",
        "RuntimeDirectory": "poold", "RuntimeDirectoryPreserve": "yes",
        "ProtectSystem": "strict", "ProtectHome": "true", "NoNewPrivileges": "true",
        "PrivateTmp": "true", "LockPersonality": "true", "CapabilityBoundingSet": "",
        "DevicePolicy": "closed", "DeviceAllow": "char-dax rw",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    }
    assert {k: s.get(k, [None])[-1] for k in expected} == expected
    assert "PrivateDevices" not in s  # it would hide /dev/dax*
    # Lease memory survives restarts in systemd's fd store (systemd 252 does not say so itself).
    assert s["Environment"] == ["POOLD_RUNTIME_DIR=/run/poold", "POOLD_FD_STORE=systemd"]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_config", ROOT / "packaging" /
                                                  "make_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_config_is_generated_from_settings() -> None:
    rendered = load_generator().render()
    assert EXAMPLE.read_text() == rendered, \
        "packaging/poold.toml is stale: python packaging/make_config.py > packaging/poold.toml"


def test_example_config_names_every_setting() -> None:
    named = re.findall(r"^#(\w+) = ", EXAMPLE.read_text(), flags=re.MULTILINE)
    assert sorted(named) == sorted(Settings.model_fields), \
        set(Settings.model_fields) ^ set(named)
    assert tomllib.loads(EXAMPLE.read_text()) == {}  # as shipped: every default applies


def test_example_config_loads_uncommented(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POOLD_FD_STORE")  # the test suite's own setting (tests/conftest.py)
    text = re.sub(r"^#(\w+ = )", r"\1", EXAMPLE.read_text(), flags=re.MULTILINE)
    config = tmp_path / "poold.toml"
    config.write_text(text)
    settings = load_settings(config)
    for name, field in Settings.model_fields.items():
        if field.default_factory is None and field.default is not None:
            assert getattr(settings, name) == field.default, name
