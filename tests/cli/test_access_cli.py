"""`poold token create|list|revoke` and `poold tenant set|list` as an operator runs them: the
installed `poold` command as a subprocess against a real `poold serve` process, on each database.
The CLI finds the admin credential in the daemon's state directory, as on a host; what the
commands change is then checked with plain HTTP requests, as an inference engine makes them.
"""

from __future__ import annotations

import json

from poold.types import MiB
from tests.cli.served import Daemon, refusal

TOKEN_KEYS = {"id", "name", "role", "tenant", "created_at", "created_by", "revoked_at"}


def test_tokens_secret_printed_once_list_without_secrets_revoke_refuses(daemon: Daemon) -> None:
    made = daemon.json("token", "create", "vllm-node-3", "--tenant", "team-a")
    bearer = made.pop("bearer")
    assert set(made) == TOKEN_KEYS
    assert (made["role"], made["tenant"], made["revoked_at"]) == ("tenant", "team-a", None)
    assert made["created_by"].startswith("admin:admin@")
    assert bearer.startswith(f"pd_{made['id']}_")
    secret = bearer.removeprefix(f"pd_{made['id']}_")

    listing = daemon.cli("token", "list").stdout
    assert secret not in listing and bearer not in listing
    tokens = json.loads(listing)
    assert all(set(t) == TOKEN_KEYS for t in tokens)
    assert {t["name"]: t["role"] for t in tokens}["vllm-node-3"] == "tenant"
    assert [t["role"] for t in tokens].count("admin") == 1

    granted = daemon.grant(bearer, 2 * MiB)
    assert granted.status_code == 201 and granted.json()["tenant"] == "team-a"
    # A tenant's token is no admin's: the CLI passes the daemon's refusal on.
    assert refusal(daemon.cli("token", "list", "--token", bearer, ok=False))["error"] == "Forbidden"

    revoked = daemon.json("token", "revoke", made["id"])
    assert revoked["revoked_at"] is not None and set(revoked) == TOKEN_KEYS
    refused = daemon.grant(bearer, 2 * MiB)
    assert refused.status_code == 401 and refused.json()["error"] == "Unauthenticated"
    assert daemon.json("token", "revoke", made["id"]) == revoked  # idempotent

    assert refusal(daemon.cli("token", "revoke", "0" * 16, ok=False))["error"] == "UnknownToken"
    bad = refusal(daemon.cli("token", "create", "x", "--role", "admin", "--tenant", "team-a",
                             ok=False))
    assert bad["error"] == "InvalidRequest"


def test_tenant_quotas_set_from_the_cli_are_enforced(daemon: Daemon) -> None:
    team = daemon.json("tenant", "set", "team-q", "--max-bytes", "8MiB", "--max-leases", "3")
    assert team == {"name": "team-q", "max_bytes": 8 * MiB, "max_leases": 3,
                    "leased_bytes": 0, "live_leases": 0}
    bearer = daemon.json("token", "create", "engine", "--tenant", "team-q")["bearer"]

    assert [daemon.grant(bearer, 4 * MiB).status_code for _ in range(2)] == [201, 201]
    over = daemon.grant(bearer, 2 * MiB)
    assert over.status_code == 429 and over.json()["error"] == "QuotaExceeded"
    assert "bytes" in over.json()["detail"]

    # Unlimited bytes now, two leases at most: the two it holds already.
    daemon.json("tenant", "set", "team-q", "--max-leases", "2")
    over = daemon.grant(bearer, 2 * MiB)
    assert over.status_code == 429 and "2 leases" in over.json()["detail"]

    listed = {t["name"]: t for t in daemon.json("tenant", "list")}
    assert listed["team-q"] == {"name": "team-q", "max_bytes": None, "max_leases": 2,
                                "leased_bytes": 8 * MiB, "live_leases": 2}
    own = json.loads(daemon.cli("tenant", "list", "--token", bearer).stdout)
    assert [t["name"] for t in own] == ["team-q"]

    # Bad input: a size that is none is the CLI's refusal (2); a negative count is the API's
    # (422, which the SDK names InvalidRequest).
    bad_size = daemon.cli("tenant", "set", "team-q", "--max-bytes", "lots", ok=False)
    assert bad_size.returncode == 2 and "--max-bytes" in bad_size.stderr
    negative = refusal(daemon.cli("tenant", "set", "team-q", "--max-leases", "-1", ok=False))
    assert negative["error"] == "InvalidRequest" and "max_leases" in str(negative["detail"])
