"""Where a lease's memory is mapped from (`map_path`), in every answer about the lease, on a
daemon that holds the memory of its emulated leases (the API's own `served` daemon)."""

from __future__ import annotations

from poold.types import MiB
from tests.api.admin_served import Served


def test_every_answer_about_a_held_lease_says_where_to_map_it(served: Served) -> None:
    granted = served.admin.post("/v1/leases", json={"size": 2 * MiB, "ttl_s": 30})
    assert granted.status_code == 201, granted.text
    lease = granted.json()
    path = lease["map_path"]
    assert path is not None
    renewed = served.admin.post(f"/v1/leases/{lease['id']}/keepalive", json={"ttl_s": 60})
    assert renewed.status_code == 200, renewed.text  # 200, not the grant's 201
    assert renewed.json()["map_path"] == path
    assert served.admin.get(f"/v1/leases/{lease['id']}").json()["map_path"] == path
    listed = served.admin.get("/v1/leases", params={"state": "active"}).json()
    assert [(x["id"], x["map_path"]) for x in listed] == [(lease["id"], path)]
