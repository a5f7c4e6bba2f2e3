"""vLLM 0.33.0 with poold as a secondary tier of its tiered KV offloading, on a real daemon.

Our checks inside vLLM (vllm_inner/check_tier.py, in vLLM's venv, CPU torch): vLLM's
SecondaryTierFactory builds the tier from the operator's `secondary_tiers` entry; vLLM's own
TieringOffloadingManager over its CPU primary tier cascades stored chunks to poold and promotes
evicted ones back, byte for byte; two tenants' rows under one key stay their own; a load of a
key poold lacks fails naming the keys that did load; a revoked lease fails the loads and writes
nothing into the rows; an unknown parameter is refused by name.

vLLM's own tiering tests (tests/v1/kv_offload/tiering/test_tiering_offloading.py from its
sdist, unmodified), with the secondary tiers they build swapped for poold's by the plugin
vllm_inner/poold_swap.py, the one fixture change the tier allows: where they make vLLM's example
tier, a PooldSecondaryTier on the real daemon is made, with the example tier's `chunks` (read
from and written to poold) and its promise that a submitted job is finished when the call
returns. The tests of the example tier itself, and those that count on its internals beyond
that, are left out, each with why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.engines.conftest import HERE, run_pytest, run_swapped_suite
from tests.engines.venvs import REPO, VLLM, python

pytestmark = pytest.mark.slow

TIERING = "tests/v1/kv_offload/tiering/test_tiering_offloading.py"
TIERING_TESTS = 72  # in vLLM 0.33.0's file: all must run, less the ones left out below
NOT_APPLICABLE = {  # each with why: the example tier's own facts, not the tier interface
    f"{TIERING}::TestExampleSecondaryTierManager::test_config_info_keys_match_the_filled_values":
        "checks the example tier's own config fact (example_info = its custom_param)",
}


def test_vllms_tiering_tests_pass_on_poold(engine_env: dict[str, str]) -> None:
    run_swapped_suite(VLLM, TIERING, all_tests=TIERING_TESTS, not_applicable=NOT_APPLICABLE,
                      env=engine_env)


def test_poold_inside_vllm(engine_env: dict[str, str]) -> None:
    inner = HERE / "vllm_inner"
    run = run_pytest(VLLM, ["-c", str(inner / "pytest.ini"), "-q",
                            str(inner / "check_tier.py")],
                     cwd=inner, env=engine_env, plugin_dir=inner)
    run.expect(passed=6)


def test_the_vllm_bench_runs_and_checks_its_rows(tmp_path: Path) -> None:
    """bench/vllm_tier.py --quick, in vLLM's venv: every tier takes every job, poold's and the
    file-system tier's loaded rows are compared with the stored ones, every row is reported."""
    out = tmp_path / "bench.md"
    done = subprocess.run([str(python(VLLM)), str(REPO / "bench" / "vllm_tier.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**os.environ, **dict(VLLM.env)})
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line for line in out.read_text().splitlines()
            if line.startswith("| ") and "KiB" in line]
    assert len(rows) == 8, rows
    assert all(float(r.split("|")[3]) > 0 and float(r.split("|")[4]) > 0 for r in rows)
