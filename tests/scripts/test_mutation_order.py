"""tests/mutation_order.py, the plugin mutation runs load: a mutant's tests run fastest first by
mutmut's recorded durations, a file's tests together; without the stats, the order stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SLOW, QUICK = "test_slow.py", "test_quick.py"


def collected(where: Path) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "-p", "tests.mutation_order", "--collect-only", "-q", SLOW, QUICK],
                         cwd=where, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_a_mutants_tests_run_fastest_first_a_files_tests_together(tmp_path: Path) -> None:
    (tmp_path / SLOW).write_text("def test_a(): pass\ndef test_b(): pass\n")
    (tmp_path / QUICK).write_text("def test_c(): pass\ndef test_d(): pass\n")
    assert collected(tmp_path) == [f"{SLOW}::test_a", f"{SLOW}::test_b", f"{QUICK}::test_c",
                                   f"{QUICK}::test_d"]  # no stats: as given
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": {
        f"{SLOW}::test_a": 9.0, f"{SLOW}::test_b": 0.5,
        f"{QUICK}::test_c": 2.0, f"{QUICK}::test_d": 0.1}}))
    assert collected(tmp_path) == [f"{QUICK}::test_d", f"{QUICK}::test_c", f"{SLOW}::test_b",
                                   f"{SLOW}::test_a"]
