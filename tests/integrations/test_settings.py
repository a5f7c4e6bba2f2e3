"""TierSettings: what an engine's config says about poold is checked at start, and a mistake is
refused by name instead of surfacing as a wrong lease later."""

from __future__ import annotations

import pytest

from poold.integrations.settings import TierSettings
from poold.types import MiB


def test_defaults_and_what_an_operator_sets() -> None:
    s = TierSettings.from_dict({"budget_bytes": 64 * MiB, "uds": "/run/poold/api.sock",
                                "pool": "cxl"})
    assert (s.lease_bytes, s.block_bytes, s.ttl_s, s.idle_release_s) == (64 * MiB, MiB // 4,
                                                                        30, 30.0)
    assert (s.uds, s.url, s.pool) == ("/run/poold/api.sock", None, "cxl")


@pytest.mark.parametrize(("given", "refusal"), [
    ({}, "budget_bytes is required"),
    ({"budget_bytes": MiB, "budget": 1}, r"unknown poold parameters: \['budget'\]"),
    ({"budget_bytes": 0}, "budget_bytes must be a positive whole number"),
    ({"budget_bytes": 1.5}, "budget_bytes must be a positive whole number"),
    ({"budget_bytes": True}, "budget_bytes must be a positive whole number"),
    ({"budget_bytes": "1"}, "budget_bytes must be a positive whole number"),
    ({"budget_bytes": MiB, "lease_bytes": 2 * MiB}, r"lease_bytes \(2097152\) is more than"),
    ({"budget_bytes": 4 * MiB, "lease_bytes": MiB, "block_bytes": 2 * MiB},
     r"block_bytes \(2097152\) is more than lease_bytes"),
    ({"budget_bytes": 64 * MiB, "ttl_s": -1}, "ttl_s must be a positive whole number"),
    ({"budget_bytes": 64 * MiB, "idle_release_s": -1}, "idle_release_s must be seconds"),
    ({"budget_bytes": 64 * MiB, "idle_release_s": "soon"}, "idle_release_s must be seconds"),
    ({"budget_bytes": 64 * MiB, "grow_wait_s": -1}, "grow_wait_s must be seconds"),
    ({"budget_bytes": 64 * MiB, "grow_wait_s": 61}, "grow_wait_s is at most 60"),
    ({"budget_bytes": 64 * MiB, "elastic": "yes"}, "elastic must be true or false"),
    ({"budget_bytes": 64 * MiB, "pool": 3}, "pool must be a string"),
    ({"budget_bytes": 64 * MiB, "url": "http://x", "uds": "/s"}, "url or uds, not both"),
])
def test_a_mistake_is_refused_by_name(given: dict[str, object], refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        TierSettings.from_dict(given)


def test_the_client_goes_where_the_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLD_TOKEN", "from-env")
    by_url = TierSettings(budget_bytes=64 * MiB).client()
    assert str(by_url._http.base_url) == "http://127.0.0.1:7077"
    assert by_url._http.headers["Authorization"] == "Bearer from-env"
    by_url.close()
    given = TierSettings(budget_bytes=64 * MiB, url="http://poold.example:7077", token="t").client()
    assert str(given._http.base_url) == "http://poold.example:7077"
    assert given._http.headers["Authorization"] == "Bearer t"
    given.close()
