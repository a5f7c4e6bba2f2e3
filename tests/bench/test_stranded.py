"""The stranded-capacity bench (bench/stranded.py) on its short trace, through the same code as
the full run: real `poold serve` processes, clients over HTTP, the real PostgreSQL, judged from
the ledger's audit log. Shared, poold strands no refusal; the static partition of the same
capacity does, so the comparison is real."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import stranded
from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.slow


def test_shared_poold_strands_no_refusal_where_a_static_partition_does(
        pg_url: str, tmp_path: Path) -> None:
    shape = stranded.SHORT
    requests = stranded.trace(shape)
    shared = stranded.run_side("poold", shape, requests, pg_url, tmp_path / "poold")
    with stranded.ledger_schema(POSTGRES_URL) as url:
        static = stranded.run_side("static", shape, requests, url, tmp_path / "static")
    for result in (shared, static):
        assert result.errors == []
        assert result.requests == len(requests)
        assert result.overlaps == 0  # the reconstruction from the audit log is consistent
    assert shared.stranded == 0, shared
    assert static.stranded > 0, static
    assert shared.granted > static.granted
    # Utilisation is measured from the same holds the judgement uses.
    assert max(shared.utilisation) > max(static.utilisation)
