"""tests/mutation_order.py, the plugin mutation runs load: a mutant runs its own layer's tests,
fastest first by mutmut's recorded durations, a file's tests together; without a mutant named
every test runs, and without the stats the order stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SLOW, QUICK, API = "tests/ledger/test_slow.py", "tests/ledger/test_quick.py", "tests/api/test_a.py"


def collected(where: Path, mutant: str = "") -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUTANT_UNDER_TEST": mutant}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "-p", "tests.mutation_order", "--collect-only", "-q", SLOW, QUICK, API],
                         cwd=where, capture_output=True, text=True, check=False, env=env)
    assert run.returncode in (0, 5), run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_a_mutant_runs_its_layers_tests_fastest_first_a_files_tests_together(
        tmp_path: Path) -> None:
    for name, tests in ((SLOW, "a b"), (QUICK, "c d"), (API, "e")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("".join(f"def test_{t}(): pass\n" for t in tests.split()))
    given = [f"{SLOW}::test_a", f"{SLOW}::test_b", f"{QUICK}::test_c", f"{QUICK}::test_d",
             f"{API}::test_e"]
    assert collected(tmp_path) == given  # no stats: as given
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": {
        f"{SLOW}::test_a": 9.0, f"{SLOW}::test_b": 0.5, f"{QUICK}::test_c": 2.0,
        f"{QUICK}::test_d": 0.1, f"{API}::test_e": 0.01}}))
    ledger_first = [f"{QUICK}::test_d", f"{QUICK}::test_c", f"{SLOW}::test_b", f"{SLOW}::test_a"]
    # mutmut's clean run and its forced failure name no mutant of ours: every test, fastest first
    for run in ("", "fail"):
        assert collected(tmp_path, run) == [f"{API}::test_e", *ledger_first]
    assert collected(tmp_path, "poold.ledger.leases.x_grant__mutmut_7") == ledger_first
    assert collected(tmp_path, "api.auth.x_role__mutmut_2") == [f"{API}::test_e"]
    assert collected(tmp_path, "poold.kv.leases.x_grow__mutmut_1") == []  # "no tests"
