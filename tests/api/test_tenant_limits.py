"""What one tenant can do to the others through the control plane, on both databases:

8. idempotency keys are per tenant: B using a key first neither blocks A's use of it (once: 409
   for good) nor tells B that A used it;
9. a tenant created without a quota gets the default one (once, a new tenant took every lease a
   device could hold), and each non-admin principal's requests are rate limited (429 with
   Retry-After), both shown in /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poold.client import PooldClient
from poold.errors import QuotaExceeded
from poold.types import MiB
from tests.daemon_fixtures import serving_daemon

DEFAULT_LEASES = 5
RATE, BURST = 20.0, 30


class Served:
    def __init__(self, url: str, state: Path) -> None:
        self.url = url
        self.admin = (state / "admin.token").read_text().strip()

    def tenant(self, name: str, tenant: str | None = None) -> str:
        with PooldClient(self.url, token=self.admin) as admin:
            made = admin.raw("POST", "/v1/tokens", json={"name": name, "role": "tenant",
                                                         "tenant": tenant or name})
        return str(made["bearer"])


@pytest.fixture
def served(tmp_path: Path, ledger_url: str) -> Iterator[Served]:
    with serving_daemon(tmp_path, auth="token", database_url=ledger_url, emulate_size=256 * MiB,
                        default_tenant_max_leases=DEFAULT_LEASES, rate_limit_per_s=RATE,
                        rate_limit_burst=BURST) as (_daemon, url):
        yield Served(url, tmp_path)


def test_idempotency_keys_are_each_tenants_own(served: Served) -> None:
    with PooldClient(served.url, token=served.tenant("team-b")) as b, \
            PooldClient(served.url, token=served.tenant("team-a")) as a:
        squatted = b.grant(2 * MiB, idempotency_key="job-42")
        mine = a.grant(4 * MiB, idempotency_key="job-42")  # not 409: B's key is not A's
        assert mine.id != squatted.id and (mine.tenant, mine.length) == ("team-a", 4 * MiB)
        assert a.grant(4 * MiB, idempotency_key="job-42").id == mine.id  # A's replay
        assert b.grant(2 * MiB, idempotency_key="job-42").id == squatted.id  # B's replay
        # B learns nothing of A's keys: one B never used grants B a lease of its own.
        a.grant(2 * MiB, idempotency_key="secret-plan")
        fresh = b.grant(6 * MiB, idempotency_key="secret-plan")
        assert fresh.tenant == "team-b" and fresh.length == 6 * MiB


def test_a_new_tenant_gets_the_default_quota(served: Served) -> None:
    with PooldClient(served.url, token=served.tenant("greedy")) as greedy, \
            PooldClient(served.url, token=served.tenant("other")) as other:
        for _ in range(DEFAULT_LEASES):
            greedy.grant(2 * MiB)
        with pytest.raises(QuotaExceeded, match=f"quota is {DEFAULT_LEASES}"):
            greedy.grant(2 * MiB)
        assert other.grant(2 * MiB).tenant == "other"  # capacity left for everyone else
        assert greedy.raw("GET", "/v1/tenants/greedy")["max_leases"] == DEFAULT_LEASES
    # A tenant that first appears in a grant (an admin leasing for it) gets it too.
    with PooldClient(served.url, token=served.admin) as admin:
        for _ in range(DEFAULT_LEASES):
            admin.raw("POST", "/v1/leases", json={"size": 2 * MiB, "tenant": "implicit"})
        refused = httpx.post(f"{served.url}/v1/leases", json={"size": 2 * MiB,
                                                              "tenant": "implicit"},
                             headers={"Authorization": f"Bearer {served.admin}"})
        assert refused.status_code == 429 and refused.json()["error"] == "QuotaExceeded"


def test_each_tenant_is_rate_limited_alone(served: Served) -> None:
    a_token, b_token = served.tenant("team-a"), served.tenant("team-b")
    headers = {"Authorization": f"Bearer {a_token}"}
    answers = []
    with httpx.Client(base_url=served.url, headers=headers) as a:
        # Until refused a few times (a slow machine refills the bucket as it goes: bounded).
        while sum(r.status_code == 429 for r in answers) < 5 and len(answers) < 5000:
            answers.append(a.get("/v1/leases"))
    limited = [r for r in answers if r.status_code == 429]
    assert len(limited) == 5 and all(r.json()["error"] == "RateLimited" for r in limited)
    assert all(int(r.headers["Retry-After"]) >= 1 for r in limited)
    first = next(i for i, r in enumerate(answers) if r.status_code == 429)
    assert first >= BURST and all(r.status_code == 200 for r in answers[:first])
    # Another tenant and the admin are not slowed by A.
    with PooldClient(served.url, token=b_token) as b:
        assert b.raw("GET", "/v1/leases") == []
    with PooldClient(served.url, token=served.admin) as admin:
        for _ in range(BURST * 2):
            admin.raw("GET", "/v1/pools")
    metrics = httpx.get(f"{served.url}/metrics").text
    assert f'poold_rate_limited_requests_total{{role="tenant"}} {float(len(limited))}' in metrics
    assert f'poold_limit{{limit="rate_limit_per_s"}} {RATE}' in metrics
    assert f'poold_limit{{limit="default_tenant_max_leases"}} {float(DEFAULT_LEASES)}' in metrics


def test_a_request_counts_once_however_often_its_route_asks_who_sent_it(served: Served) -> None:
    """A keepalive's route asks for its principal twice (the actor the audit log names, the
    tenant it is confined to): still one request, one token of the bucket."""
    token = served.tenant("team-c")
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {token}"}) as c:
        lease = c.post("/v1/leases", json={"size": MiB})  # the bucket's first token
        assert lease.status_code == 201, lease.text
        answers = []
        while not any(r.status_code == 429 for r in answers) and len(answers) < 5000:
            answers.append(c.post(f"/v1/leases/{lease.json()['id']}/keepalive"))
    first = next(i for i, r in enumerate(answers) if r.status_code == 429)
    assert first >= BURST - 1 and all(r.status_code == 200 for r in answers[:first])
