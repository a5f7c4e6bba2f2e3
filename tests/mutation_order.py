"""A pytest plugin for mutation runs only (`[tool.mutmut]` loads it with -p): a mutant runs
against its own layer's tests, fastest first, so that the -x run stops at the cheapest test
that kills it.

mutmut hands each mutant every test that reaches its function, in no particular order. The
ledger's grant is reached by nearly every test that starts a daemon, so a mutant of it that no
test kills would run for half an hour; and started from a slow test (a daemon, a long poll), a
mutant that a 50 ms test kills costs seconds. So:

- a mutant of a module runs the tests of that module's layer (LAYER_TESTS): the ledger's
  guarantees are shown by the ledger's tests (in process, on both databases), the API's by the
  API's, the SDK's by the SDK's. A mutant only a test of another layer would kill counts as a
  survivor: a test of its own layer is missing.
- fastest first, by mutmut's own durations from its stats run (mutants/mutmut-stats.json, the
  run's working directory); a file's tests stay together, files ordered by their fastest
  selected test, so module-scoped fixtures are still set up once.

The stats run, the clean run and the forced-failure check (mutmut names no mutant, or not one
of ours) keep every test in its order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")

# Module prefix (of mutmut's mutant names) -> the tests that judge its mutants.
_LEDGER = ("tests/ledger/", "tests/pool/", "tests/daemon/test_retention.py",
           "tests/daemon/test_tenant_binding.py", "tests/multihost/test_pool_policy.py")
LAYER_TESTS: dict[str, tuple[str, ...]] = {
    "poold.ledger.": _LEDGER,
    "poold.pool.": _LEDGER,
    # test_regions: a grant through the API makes a region's lease its own dax device
    # (api.routers.leases._make), which only a daemon on a (fake) kernel with regions shows.
    "api.": ("tests/api/", "tests/daemon/test_tenant_binding.py",
             "tests/multihost/test_pool_policy.py", "tests/daemon/test_regions.py"),
    "poold.client.": ("tests/client/",),
    "poold.kv.": ("tests/kv/",),
}


def layer_tests(mutant: str) -> tuple[str, ...] | None:
    """The test paths that judge this mutant; None: not a mutant (every test stays)."""
    if "__mutmut_" not in mutant:
        return None
    return next((paths for prefix, paths in LAYER_TESTS.items() if mutant.startswith(prefix)),
                None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    paths = layer_tests(os.environ.get("MUTANT_UNDER_TEST", ""))
    if paths is not None:
        other = [item for item in items if not item.nodeid.startswith(paths)]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item.nodeid.startswith(paths)]
    try:
        duration = json.loads(STATS.read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return  # the stats run itself, or a run outside mutmut: the order stays

    def took(item: pytest.Item) -> float:
        return float(duration.get(item.nodeid, 0.0))

    fastest_in_file: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        fastest_in_file[file] = min(fastest_in_file.get(file, took(item)), took(item))
    items.sort(key=lambda item: (fastest_in_file[item.nodeid.split("::", 1)[0]],
                                 item.nodeid.split("::", 1)[0], took(item)))
