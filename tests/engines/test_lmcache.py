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

- LMCache's tests of its DaxBackend (tests/v1/storage_backend/test_dax_backend.py, unmodified),
  with the plugin they build swapped for poold's: those that apply (DAX_NOT_APPLICABLE says why
  each other one does not).

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


DAX = "tests/v1/storage_backend/test_dax_backend.py"
_DAX_HOOK = "patches a DaxBackend internal ({}) to hold or fail a copy midway; poold's tier " \
            "has no such hook"
DAX_NOT_APPLICABLE = {  # each with why: DaxBackend's internals, or a limit poold does not have
    f"{DAX}::{name}": why for name, why in {
        "test_dax_backend_blocking_and_async_share_restore_dispatch":
            "asserts both paths reach DaxBackend's own _restore_batch",
        "test_dax_backend_rejects_tp_gt_1":
            "DaxBackend serves TP=1 only; poold's tier is one per worker (keys carry the "
            "worker id), built without a local CPU backend here, which poold refuses first",
        "test_dax_backend_rejects_multi_group_metadata_at_init":
            "DaxBackend takes a single-group KV layout only; poold keeps each chunk's layout",
        "test_dax_backend_failed_init_does_not_leak_fds":
            "opens a bad dax.device_path; poold's tier opens no device (the daemon maps "
            "leases)",
        "test_dax_backend_oversized_put_raises_error":
            "reads DaxBackend's fixed slot size (slot_bytes); poold stores any size",
        "test_dax_backend_multi_tensor_put_skips_without_indexing_or_leaking_slots":
            "DaxBackend cannot store a multi-tensor chunk and skips it; poold stores it",
        "test_dax_backend_get_blocking_releases_lock_during_read": _DAX_HOOK.format("_do_read"),
        "test_dax_backend_batched_get_blocking_releases_lock_during_restore":
            _DAX_HOOK.format("_batched_memcpy"),
        "test_dax_backend_remove_during_read_defers_slot_reclaim":
            _DAX_HOOK.format("_do_read"),
        "test_dax_backend_remove_during_batched_restore_defers_slot_reclaim":
            _DAX_HOOK.format("_batched_memcpy"),
        "test_dax_backend_get_read_failure_releases_cpu_memory_obj":
            _DAX_HOOK.format("_do_read"),
        "test_dax_backend_sync_close_waits_for_active_put": _DAX_HOOK.format("_do_write"),
        "test_dax_backend_sync_close_waits_for_active_get": _DAX_HOOK.format("_do_read"),
        "test_dax_backend_sync_close_waits_for_active_batched_restore":
            _DAX_HOOK.format("_batched_memcpy"),
        "test_dax_backend_async_close_waits_for_active_put": _DAX_HOOK.format("_do_write"),
        "test_dax_backend_allocator_exhaustion_fails_without_internal_eviction":
            "DaxBackend refuses a put when its arena is full; poold's tier is a cache that "
            "evicts its coldest unpinned chunks to make room",
        "test_dax_backend_full_arena_does_not_evict_pinned_or_unpinned_keys":
            "the same: poold evicts its coldest unpinned chunk where DaxBackend refuses",
    }.items()}
DAX_TESTS = 29  # in LMCache 0.5.6's file


def test_lmcaches_dax_backend_tests_that_apply_pass_on_poold(
        engine_env: dict[str, str]) -> None:
    """LMCache's tests of its own DAX storage plugin, with the plugin they build swapped for
    poold's (same config; the arena's size as the budget): round trips, positional misses in a
    batch, one allocation per layout, the asynchronous prefetch stopping at the first miss,
    nested pins that a non-forced remove respects, threads, and a closed backend."""
    run_swapped_suite(LMCACHE, DAX, all_tests=DAX_TESTS, not_applicable=DAX_NOT_APPLICABLE,
                      env=engine_env, leased_at_least=6)  # 8 of its tests store


def test_poold_inside_lmcache(engine_env: dict[str, str]) -> None:
    inner = HERE / "lmcache_inner"
    run = run_pytest(LMCACHE, ["-c", str(inner / "pytest.ini"), "-q",
                                       str(inner / "check_adapter.py"),
                                       str(inner / "check_backend.py")],
                     cwd=inner, env=engine_env, plugin_dir=inner)
    run.expect(passed=11)


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


def test_the_gpu_bench_still_finds_lmcaches_engine_and_connector(tmp_path: Path) -> None:
    """bench/lmcache_gpu.py needs a GPU to run (LMCache's GPU connector makes CUDA streams), so
    here it only starts: every LMCache name it imports is still there, and it says what it
    takes. On a machine without CUDA it refuses by name instead of failing somewhere inside."""
    bench = str(REPO / "bench" / "lmcache_gpu.py")
    shown = subprocess.run([str(python(LMCACHE)), bench, "--help"], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-4000:]
    assert "--tokens" in shown.stdout and "--rounds" in shown.stdout
    refused = subprocess.run([str(python(LMCACHE)), bench, "--out", str(tmp_path / "x.md")],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert refused.returncode != 0
    assert "LMCache's GPU connector needs a CUDA device" in refused.stderr
