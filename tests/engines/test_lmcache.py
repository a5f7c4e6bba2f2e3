"""LMCache 0.5.6 with poold as its L2 tier, proven by LMCache's own tests against a real daemon.

- LMCache's L2 adapter contract tests (tests/v1/distributed/test_mock_l2_adapter.py from its
  sdist, unmodified), with the adapter they build swapped for poold's by the plugin
  lmcache_inner/poold_swap.py: the one fixture change the tier allows. One test is left out:
  it checks the mock's simulated bandwidth delay, which a real store does not have.
- Our checks inside LMCache (lmcache_inner/check_adapter.py): the operator's `--l2-adapter`
  flag loads the adapter, bytes round-trip through LMCache's memory objects, two tenants keep
  their own bytes for the same key, capacity one engine process gives back is leased by
  another, a revoked lease is lost chunks (misses, never the next holder's bytes); and the
  in-process storage plugin (lmcache_inner/check_backend.py) inside LMCache's StorageManager,
  the part of LMCacheEngine that stores: loaded from the documented config, chunks read back
  from poold byte for byte once LMCache's CPU copies are cleared, removes and a revoked lease
  as misses.

LMCache's tests/v1/test_storage_plugin.py is not run: it tests the plugin loader with a mock
whose internals it inspects (its call history, its dict, the identity of the object a get
returns), which no real store has; the loader path it covers is what check_backend.py drives.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.engines.conftest import HERE, run_pytest, run_swapped_suite
from tests.engines.venvs import LMCACHE, REPO, python

pytestmark = pytest.mark.slow

CONTRACT = "tests/v1/distributed/test_mock_l2_adapter.py"
NOT_APPLICABLE = {  # each with why: the mock's own simulation, not the interface's contract
    f"{CONTRACT}::TestBandwidthSimulation::test_store_completion_is_delayed_by_bandwidth":
        "the mock sleeps to simulate a slow link; a real store is as fast as memcpy",
}
CONTRACT_TESTS = 44  # in LMCache 0.5.6's file: all must run, less the ones left out above


def test_lmcaches_l2_adapter_contract_passes_on_poold(engine_env: dict[str, str]) -> None:
    run_swapped_suite(LMCACHE, CONTRACT, all_tests=CONTRACT_TESTS,
                      not_applicable=NOT_APPLICABLE, env=engine_env)


def test_poold_inside_lmcache(engine_env: dict[str, str]) -> None:
    inner = HERE / "lmcache_inner"
    run = run_pytest(LMCACHE, ["-c", str(inner / "pytest.ini"), "-q",
                                       str(inner / "check_adapter.py"),
                                       str(inner / "check_backend.py")],
                     cwd=inner, env=engine_env, plugin_dir=inner)
    run.expect(passed=9)


def test_the_lmcache_bench_runs_and_checks_its_bytes(tmp_path: Path) -> None:
    """bench/lmcache_tier.py --quick, in LMCache's venv: both backends store and retrieve every
    chunk size both ways (it compares every chunk it gets back) and the report has every row."""
    out = tmp_path / "bench.md"
    done = subprocess.run([str(python(LMCACHE)), str(REPO / "bench" / "lmcache_tier.py"),
                           "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line for line in out.read_text().splitlines()
            if line.startswith("| ") and "KiB" in line]
    assert len(rows) == 12, rows
    assert all(float(r.split("|")[3]) > 0 and float(r.split("|")[4]) > 0 for r in rows)
