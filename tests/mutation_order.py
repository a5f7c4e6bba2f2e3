"""A pytest plugin for mutation runs only (`[tool.mutmut]` loads it with -p): run a mutant's tests
fastest first, so that the -x run stops at the cheapest test that kills it.

mutmut hands each mutant the tests that reach its function in no particular order, and most
mutants die at their first failing test: started from a slow test (a daemon, a long poll), a
mutant a 50 ms test would kill costs seconds. The durations are mutmut's own, from its stats run
(mutants/mutmut-stats.json, the run's working directory). A file's tests stay together, files
ordered by their fastest selected test, so module-scoped fixtures are still set up once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
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
