"""The engines tier: each engine in a venv of its own (tests/engines/venvs.py), run against a
real `poold serve` (auth on, two tenants) that the tests here start."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from poold.client import PooldClient
from tests.daemon_fixtures import serve_process
from tests.engines.venvs import Engine, python, sdist_tests

HERE = Path(__file__).parent
RUN_S = 900  # one engine suite, bounded
STUCK_S = 300  # a single test running this long has its threads' stacks dumped (faulthandler)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engines: runs an engine's tests in its own venv")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.engines)


@dataclass(frozen=True)
class Daemon:
    state: Path

    def env(self, tokens: dict[str, str]) -> dict[str, str]:
        """What the engine's side is told: the daemon's sockets and a token per tenant."""
        return {"POOLD_ENGINE_UDS": str(self.state / "api.sock"),
                "POOLD_ENGINE_FD": str(self.state / "fd.sock"),
                **{f"POOLD_ENGINE_TOKEN_{name.upper()}": t for name, t in tokens.items()}}


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A `poold serve` with tokens on, tenants a and b, and the admin's token."""
    work = tmp_path_factory.mktemp("engine-daemon")
    ready = lambda port: httpx.get(f"http://127.0.0.1:{port}/healthz").is_success  # noqa: E731
    with serve_process(work, ready, auth="token"):
        daemon = Daemon(work / "s")
        admin = (daemon.state / "admin.token").read_text().strip()
        tokens = {"admin": admin}
        with PooldClient(uds=str(daemon.state / "api.sock"), token=admin) as c:
            for tenant in ("a", "b"):
                made = c.raw("POST", "/v1/tokens", json={"name": f"engine-{tenant}",
                                                          "role": "tenant", "tenant": tenant})
                tokens[tenant] = str(made["bearer"])
        yield daemon.env(tokens)


def leases_granted(env: dict[str, str], tenant: str) -> int:
    """How many leases the daemon ever granted to `tenant` (any state), as the admin sees."""
    with PooldClient(uds=env["POOLD_ENGINE_UDS"], token=env["POOLD_ENGINE_TOKEN_ADMIN"]) as c:
        return len(c.raw("GET", "/v1/leases", params={"tenant": tenant, "limit": 10_000}))


@dataclass(frozen=True)
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def passed(self) -> int:
        """How many tests pytest's closing line says passed (0 where it says none)."""
        closing = [line for line in self.stdout.splitlines() if re.search(r" in [\d.]+s", line)]
        found = re.findall(r"(\d+) passed", closing[-1]) if closing else []
        return int(found[0]) if found else 0

    def expect(self, passed: int) -> None:
        """Exit 0 and exactly `passed` tests passed, or fail showing the run's output whole
        (an assertion message would be cut short)."""
        if self.rc != 0 or self.passed != passed:
            pytest.fail(f"exit {self.rc}, {self.passed} passed (expected {passed}):\n"
                        f"{self.stdout[-12000:]}\n{self.stderr[-3000:]}", pytrace=False)


def run_pytest(engine: Engine, args: list[str], *, cwd: Path, env: dict[str, str],
               plugin_dir: Path) -> Run:
    """The engine venv's pytest, bounded; a run past its bound fails with what it printed so
    far, where a test stuck for STUCK_S has dumped every thread's stack."""
    path = os.pathsep.join([str(plugin_dir), str(HERE / "inner_shared")])
    environ = {**os.environ, **dict(engine.env), **env, "PYTHONPATH": path}
    command = [str(python(engine)), "-m", "pytest", "-o", f"faulthandler_timeout={STUCK_S}",
               *args]
    try:
        done = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True,
                              timeout=RUN_S)
    except subprocess.TimeoutExpired as stuck:
        printed = [_text(stuck.stdout)[-12000:], _text(stuck.stderr)[-12000:]]
        pytest.fail(f"{engine.name}'s pytest ran past {RUN_S} s:\n" + "\n".join(printed),
                    pytrace=False)
    return Run(done.returncode, done.stdout, done.stderr)


def _text(output: str | bytes | None) -> str:
    """What a timed-out run printed (subprocess hands it over as bytes)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def run_swapped_suite(engine: Engine, test_file: str, *, all_tests: int,
                      not_applicable: dict[str, str], env: dict[str, str],
                      leased_at_least: int = 10) -> None:
    """One of the engine's own test files from its sdist, unmodified, with the `poold_swap`
    plugin of `<engine>_inner` putting poold where the file builds its own backend: every test
    but those not applicable passes, and the swap took (they leased from poold, as tenant a)."""
    deselect = [a for test in not_applicable for a in ("--deselect", test)]
    before = leases_granted(env, "a")
    run = run_pytest(engine, ["-p", "poold_swap", "-q", "-p", "no:cacheprovider",
                              "-o", "log_cli=false", test_file, *deselect],
                     cwd=sdist_tests(engine), env=env, plugin_dir=HERE / f"{engine.name}_inner")
    run.expect(passed=all_tests - len(not_applicable))
    assert leases_granted(env, "a") - before >= leased_at_least
