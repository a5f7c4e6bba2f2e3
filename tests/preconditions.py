"""What a test cannot run without, handled one way everywhere.

A machine that lacks a precondition (PostgreSQL, the QEMU tier, Chromium, systemd-analyze,
docker-compose, root, the engines' venvs) skips the tests that need it, with the reason and the
variable that would make it required. Where that variable is 1 (CI sets them all in `.ci/run`)
a missing precondition is a failure, so a tier cannot vanish from a run without anyone noticing.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

VARIABLES = {
    "postgres": "POOLD_TEST_REQUIRE_POSTGRES",
    "kernel": "POOLD_TEST_REQUIRE_KERNEL",
    "browser": "POOLD_TEST_REQUIRE_BROWSER",
    "systemd": "POOLD_TEST_REQUIRE_SYSTEMD",
    "compose": "POOLD_TEST_REQUIRE_COMPOSE",
    "root": "POOLD_TEST_REQUIRE_ROOT",
    "engines": "POOLD_TEST_REQUIRE_ENGINES",
}


def required(need: str) -> bool:
    return os.environ.get(VARIABLES[need]) == "1"


def unmet(need: str, reason: str) -> NoReturn:
    """Skip, or fail where `need` is required, saying why."""
    variable = VARIABLES[need]
    if required(need):
        pytest.fail(f"{reason} ({variable}=1 requires it)")
    pytest.skip(f"{reason} ({variable}=1 makes this a failure)")


def need_root(why: str) -> None:
    """For tests that act as a second local user or size kernel pools: root or skip/fail."""
    if os.geteuid() != 0:
        unmet("root", f"needs root to {why}")
