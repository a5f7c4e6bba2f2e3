"""Quality gates as tests, so the one test command runs them: mypy --strict, ruff, import-linter
(the dependency rule of DESIGN.md), and docker-compose.yml validity where a checker exists."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # the test extra has it (schemathesis), no stubs

from poold.config import Settings
from tests.preconditions import unmet

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else name


def check(*command: str) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    check(tool("mypy"))


@pytest.mark.parametrize("selection", [
    ["tests/no_such_dir"],  # pytest: exit 4
    ["tests/test_config.py", "-k", "no_test_is_named_this"],  # pytest: exit 5, collected nothing
])
def test_a_run_that_tests_nothing_fails(selection: list[str]) -> None:
    result = subprocess.run([str(ROOT / "scripts" / "test"), "-q", "-p", "no:cacheprovider",
                             *selection], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stdout + result.stderr


def test_ruff() -> None:
    check(tool("ruff"), "check", ".")


def test_import_contracts() -> None:
    check(tool("lint-imports"))


def test_docker_compose_file_is_valid() -> None:
    """`docker compose config` needs an engine here; Debian's docker-compose validates alone.
    Beyond valid: PostgreSQL and two poold hosts that share one emulated device, each host's
    environment a valid poold configuration."""
    checker = shutil.which("docker-compose")
    if checker is None:
        unmet("compose", "docker-compose not installed (Debian package; CI installs it)")
    result = subprocess.run([checker, "-f", str(ROOT / "docker-compose.yml"), "config"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    hosts = {name: svc for name, svc in services.items() if name.startswith("poold")}
    assert "postgres" in services and len(hosts) == 2
    settings = [Settings(**{k.removeprefix("POOLD_").lower(): v
                            for k, v in svc["environment"].items()})
                for svc in hosts.values()]
    assert len({s.host_id for s in settings}) == 2
    # One shared emulated device: the same ledger identity and size on both hosts.
    assert {(s.emulate_uid, s.emulate_size) for s in settings} == {
        (settings[0].emulate_uid, settings[0].emulate_size)}
    assert settings[0].emulate_uid is not None
    urls = [s.database_url or "" for s in settings]
    assert all(u.startswith("postgresql+psycopg://") and "@postgres:5432/" in u for u in urls)
    # Each host its own state directory, on a volume of its own (entries: "src:dst:mode").
    states = {next(v.split(":")[0] for v in svc["volumes"] if v.split(":")[1] == str(s.state_dir))
              for svc, s in zip(hosts.values(), settings, strict=True)}
    assert len(states) == 2 and states <= set(yaml.safe_load(result.stdout)["volumes"])
