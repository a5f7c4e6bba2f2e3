"""SGLang 0.5.23 with poold as its HiCache storage (`--hicache-storage-backend dynamic`), on a
real daemon.

Our checks inside SGLang (sglang_inner/check_storage.py, in SGLang's venv, CPU torch): SGLang's
StorageBackendFactory builds the backend from the operator's extra config; pages round-trip
through the tensor calls and zero-copy between host pool page buffers and poold; batch_exists
counts a prefix; two ranks' shards and two tenants' pages under one key stay apart; a revoked
lease is lost pages; an unknown parameter is refused by name. SGLang publishes wheels only (no
sdist), so there are no SGLang tests of its own to run here; its host KV pool needs a GPU's
device pool, so the host pool is a stand-in laid out as SGLang's page_first pools are.
"""

from __future__ import annotations

import pytest

from tests.engines.conftest import HERE, run_pytest
from tests.engines.venvs import SGLANG

pytestmark = pytest.mark.slow


def test_poold_inside_sglang(engine_env: dict[str, str]) -> None:
    inner = HERE / "sglang_inner"
    run = run_pytest(SGLANG, ["-c", str(inner / "pytest.ini"), "-q",
                              str(inner / "check_storage.py")],
                     cwd=inner, env=engine_env, plugin_dir=inner)
    run.expect(passed=6)
