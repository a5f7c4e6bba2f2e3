"""Schemathesis over the whole OpenAPI document of a real daemon's app (emulated device, real
SQLite ledger, bearer-token auth): no generated request may get a 500 or a response outside the
schema, whether an admin or a tenant (with quotas, so refusals of every kind are met) sends it.
Both valid and invalid requests are generated. Bounded: a fixed number of examples per operation,
derandomised so CI is repeatable."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.failures import FailureGroup

from poold.config import Settings
from poold.daemon import Daemon
from poold.ledger import tenants
from poold.types import MiB, Role
from tests.sysfs_trees import extract

EXAMPLES_PER_OPERATION = 40  # per operation and mode (valid, invalid): about 20 s a role here


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    # A recorded hmem tree (dax devices, a dynamic region) so the device operations run too;
    # their sysfs writes land in this copy.
    tree = extract("sysfs-d-hmem-subdivided", tmp_path / "tree") / "sys"
    daemon = Daemon(Settings(
        state_dir=tmp_path, emulate_size=64 * MiB, sysfs_root=tree,
        watch_udev=False, host_id="fuzz-host", runtime_dir=tmp_path))
    try:
        yield daemon
    finally:
        daemon.close()


def bearer(daemon: Daemon, role: str) -> str:
    """The admin credential the daemon wrote, or a new tenant's token (two leases, 8 MiB)."""
    if role == "admin":
        assert daemon.admin_credential is not None
        return daemon.admin_credential.read_text().strip()
    daemon.ledger.run(partial(tenants.set_tenant, name="team-fuzz", max_bytes=8 * MiB,
                              max_leases=2, actor="test"))
    _view, made = daemon.ledger.run(partial(tenants.create_token, name="fuzzer",
                                            role=Role.TENANT, tenant="team-fuzz", actor="test"))
    return made


async def whoami(daemon: Daemon, headers: dict[str, str]) -> Any:
    transport = httpx.ASGITransport(app=daemon.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://poold") as client:
        return (await client.get("/v1/auth/whoami", headers=headers)).json()


@pytest.mark.parametrize("role", ["admin", "tenant"])
def test_no_operation_answers_500_or_off_schema(daemon: Daemon, role: str) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", daemon.app)
    headers = {"Authorization": f"Bearer {bearer(daemon, role)}"}
    # The credential works: the fuzz is answered as this role, not refused at the door.
    assert asyncio.run(whoami(daemon, headers))["role"] == role
    failures: dict[str, str] = {}
    operations = 0
    for result, mode in itertools.product(schema.get_all_operations(), GenerationMode):
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                  database=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case[Any]) -> None:
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

        try:
            fuzz()
        except Unsatisfiable:  # no invalid request exists for an operation without inputs
            assert mode is GenerationMode.NEGATIVE, operation.label
        except (Exception, FailureGroup) as exc:  # one report naming every failing operation
            failures[f"{operation.label} ({mode.value})"] = f"{type(exc).__name__}: {exc}"[:2000]
    assert operations >= 2 * 30, "the OpenAPI document lost operations"
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in failures.items())
