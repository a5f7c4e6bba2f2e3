"""Tenants apart in the control plane, fuzzed: tenant A works (grants, renews, releases, is
revoked), tenant B, through every operation of the OpenAPI document and every filter, reaches
for A's objects, and never receives one of A's leases, labels, events or extents, nor changes
anything of A's.

A real daemon's app (emulated device, SQLite ledger, bearer tokens). The operations come from
the app's own OpenAPI document, so a new endpoint is probed without editing this file; its path
and query parameters are filled with A's identifiers (lease ids, tenant, token id, idempotency
keys) by Hypothesis. Each answer to B is searched for A's lease ids and for a marker that only
A's labels carry; after each of B's writes, A's leases, tokens and quota are compared with what
they were. Derandomised and bounded, so CI runs the same steps every time.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from poold.config import Settings
from poold.daemon import Daemon
from poold.ledger import tenants
from poold.types import MiB, Role

A, B = "team-a", "team-b"
MARKER = "a-secret-7f3c"  # in A's labels and idempotency keys only
OPERATIONS_WITHOUT_A_DATA = {"/healthz", "/readyz", "/docs", "/openapi.json"}


def _operations(app: Any) -> list[tuple[str, str, dict[str, Any]]]:
    doc = app.openapi()
    return sorted((method.upper(), path, op) for path, ops in doc["paths"].items()
                  for method, op in ops.items() if path not in OPERATIONS_WITHOUT_A_DATA)


class TenantsApart(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = Path(tempfile.mkdtemp(prefix="poold-authz-"))
        self.daemon = Daemon(Settings(
            state_dir=self.state, emulate_size=64 * MiB, watch_udev=False, host_id="authz",
            runtime_dir=self.state, rate_limit_per_s=None, fd_store="none"))
        self.http = TestClient(self.daemon.app, raise_server_exceptions=False)
        self.bearer = {"admin": self.daemon.admin_credential.read_text().strip()}  # type: ignore[union-attr]
        for tenant in (A, B):
            self.daemon.ledger.run(partial(tenants.set_tenant, name=tenant, max_bytes=32 * MiB,
                                           max_leases=8, actor="test"))
            view, made = self.daemon.ledger.run(partial(
                tenants.create_token, name=f"{tenant}-app", role=Role.TENANT, tenant=tenant,
                actor="test"))
            self.bearer[tenant] = made
            if tenant == A:
                self.a_token_id = view.id
        self.a_leases: list[str] = []
        self.a_sessions: list[str] = []
        self.a_keys: list[str] = []
        self.b_leases: list[str] = []
        self.counter = itertools.count()
        self.operations = _operations(self.daemon.app)

    def teardown(self) -> None:
        self.http.close()
        self.daemon.close()

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.bearer[who]}", **kwargs.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kwargs)

    def a_state(self) -> str:
        """Everything of A's that B must not change, as the admin reads it."""
        leases = self.call("admin", "GET", "/v1/leases", params={"tenant": A}).json()
        tokens = [t for t in self.call("admin", "GET", "/v1/tokens").json()
                  if t.get("tenant") == A]
        tenant = self.call("admin", "GET", f"/v1/tenants/{A}").json()
        sessions = self.call("admin", "GET", "/v1/sessions", params={"tenant": A}).json()
        for lease in leases:  # computed on read, moves with the clock alone
            lease.pop("ttl_left_s", None)
        return json.dumps([leases, tokens, tenant, sessions], sort_keys=True)

    def assert_nothing_of_a(self, answer: Any, what: str) -> None:
        """Nothing of A's in the answer, beyond an id B itself named (an error may echo it)."""
        text = answer.text
        leaked = [x for x in self.a_leases + self.a_sessions if x in text and x not in what]
        assert not leaked and MARKER not in text, (
            f"B got A's {'leases ' + str(leaked) if leaked else 'labels'} from {what}: "
            f"{answer.status_code} {text[:500]}")

    # --- A works ---------------------------------------------------------------------------

    @initialize()
    def a_has_a_lease(self) -> None:
        self.a_grants()

    @rule()
    def a_leases_in_a_session(self) -> None:
        opened = self.call(A, "POST", "/v1/sessions", json={"ttl_s": 600,
                                                            "labels": {"owner": MARKER}})
        if opened.status_code != 201:
            return
        session = opened.json()["id"]
        self.a_sessions.append(session)
        answer = self.call(A, "POST", "/v1/leases", json={
            "size": MiB, "labels": {"owner": MARKER}, "session_id": session})
        if answer.status_code == 201:
            self.a_leases.append(answer.json()["id"])
        else:
            assert answer.json()["error"] in ("QuotaExceeded", "LeaseTooLarge"), answer.text

    @rule()
    def a_grants(self) -> None:
        key = f"{MARKER}-{next(self.counter)}"
        answer = self.call(A, "POST", "/v1/leases", json={
            "size": MiB, "ttl_s": 600, "labels": {"owner": MARKER}, "idempotency_key": key})
        if answer.status_code == 201:
            self.a_leases.append(answer.json()["id"])
            self.a_keys.append(key)
        else:  # A's own quota: the only refusal A may meet
            assert answer.json()["error"] in ("QuotaExceeded", "LeaseTooLarge"), answer.text

    @precondition(lambda self: self.a_leases)
    @rule(data=st.data(), action=st.sampled_from(["keepalive", "release", "revoke"]))
    def a_lease_moves_on(self, data: st.DataObject, action: str) -> None:
        lease = data.draw(st.sampled_from(self.a_leases))
        if action == "keepalive":
            self.call(A, "POST", f"/v1/leases/{lease}/keepalive")
        elif action == "release":
            assert self.call(A, "DELETE", f"/v1/leases/{lease}").status_code == 200
        else:
            assert self.call("admin", "POST", f"/v1/leases/{lease}/revoke").status_code == 200

    @rule()
    def b_grants_for_itself(self) -> None:
        answer = self.call(B, "POST", "/v1/leases", json={"size": MiB, "ttl_s": 600})
        if answer.status_code == 201:
            self.b_leases.append(answer.json()["id"])

    # --- B reaches for A's objects ---------------------------------------------------------

    def _value(self, data: st.DataObject, name: str, schema: dict[str, Any]) -> Any:
        """A value for a parameter, chosen to point at A's objects where it can."""
        a_ids = self.a_leases or ["0" * 32]
        by_name: dict[str, st.SearchStrategy[Any]] = {
            "lease_id": st.sampled_from(a_ids),
            "session_id": st.sampled_from(self.a_sessions or ["0" * 32]),
            "tenant": st.sampled_from([A, B, ""]),
            "name": st.sampled_from([A, B]),
            "token_id": st.just(self.a_token_id),
            "host": st.sampled_from(["authz", "other"]),
            "host_id": st.sampled_from(["authz", "other"]),
            "devname": st.just("emu0"),
            "device_id": st.integers(1, 3),
            "pool": st.sampled_from(["default", "other"]),
            "state": st.sampled_from(["active", "released", "expired", "revoked", "scrubbing",
                                      "closed"]),
            "kind": st.sampled_from(["lease.granted", "lease.released", "lease.revoked"]),
            "limit": st.integers(1, 50),
            "after_id": st.integers(0, 5),
        }
        if name in by_name:
            return data.draw(by_name[name], label=name)
        assert schema, f"a parameter this fuzz has no values for: {name}"
        return data.draw(st.just(schema.get("default", "")), label=name)

    @rule(data=st.data())
    def b_calls_an_operation_on_a(self, data: st.DataObject) -> None:
        method, template, op = data.draw(st.sampled_from(self.operations), label="operation")
        path, params = template, {}
        for param in op.get("parameters", []):
            if param["in"] == "path":
                value = self._value(data, param["name"], param.get("schema", {}))
                path = path.replace("{" + param["name"] + "}", str(value))
            elif param["in"] == "query" and data.draw(st.booleans(), label="use " + param["name"]):
                params[param["name"]] = self._value(data, param["name"], param.get("schema", {}))
        body = None
        if method != "GET":
            body = data.draw(st.sampled_from([
                {}, {"size": MiB, "tenant": A}, {"size": MiB, "idempotency_key": self.a_keys[-1]}
                if self.a_keys else {"size": MiB}, {"ttl_s": 600},
                {"name": "stolen", "role": "tenant", "tenant": A},
                {"max_bytes": None, "max_leases": None},
                {"size": MiB, "session_id": (self.a_sessions or ["0" * 32])[-1]}]),
                label="body")
        before = self.a_state()
        answer = self.call(B, method, path, params=params, json=body)
        what = f"{method} {path} {params} {body}"
        assert answer.status_code < 500, f"{what}: {answer.status_code} {answer.text}"
        self.assert_nothing_of_a(answer, what)
        if method != "GET":
            assert self.a_state() == before, f"B changed A's objects with {what}"
            if answer.status_code < 300 and answer.headers.get("content-type", "").startswith(
                    "application/json") and path == "/v1/leases":
                self.b_leases.append(answer.json()["id"])  # B's own new lease, not A's

    @precondition(lambda self: self.a_leases)
    @rule(data=st.data())
    def b_names_a_lease_directly(self, data: st.DataObject) -> None:
        """The obvious attempts, each with the answer the API documents."""
        lease = data.draw(st.sampled_from(self.a_leases))
        before = self.a_state()
        for method, path, refused in (
                ("GET", f"/v1/leases/{lease}", {404}),
                ("POST", f"/v1/leases/{lease}/keepalive", {404}),
                ("DELETE", f"/v1/leases/{lease}", {404}),
                ("POST", f"/v1/leases/{lease}/revoke", {403}),
                ("GET", "/v1/events", {403}),
                ("GET", "/v1/devices/1/extents", {403})):
            answer = self.call(B, method, path, params={"lease_id": lease}
                               if path == "/v1/events" else None)
            assert answer.status_code in refused, f"{method} {path}: {answer.status_code}"
            self.assert_nothing_of_a(answer, f"{method} {path} {lease}")
        assert self.a_state() == before

    @invariant()
    def b_lists_only_its_own(self) -> None:
        for params in ({}, {"tenant": A}, {"tenant": ""}, {"state": "active", "tenant": A}):
            answer = self.call(B, "GET", "/v1/leases", params=params)
            assert answer.status_code == 200
            seen = {lease["id"] for lease in answer.json()}
            assert seen <= set(self.b_leases), f"B listed others' leases with {params}"
            assert all(lease["tenant"] == B for lease in answer.json())

    @invariant()
    def a_still_sees_its_own(self) -> None:
        seen = {lease["id"] for lease in self.call(A, "GET", "/v1/leases").json()}
        assert seen == set(self.a_leases)


TenantsApart.TestCase.settings = settings(
    max_examples=12, stateful_step_count=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=list(HealthCheck))
test_tenant_b_never_reaches_tenant_a = TenantsApart.TestCase
