"""Who is asking, in-process: bearer tokens against a real ledger, the UNIX-socket peer's uid
by policy, and what the token cache may and may not remember. The daemon-level tests
(tests/api/test_auth.py) show the same over real sockets; these pin each rule on its own."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

from api import auth as auth_module
from api.auth import PEER_SCOPE_KEY, PeerPolicy, TokenAuthenticator
from poold.errors import Unauthenticated
from poold.ledger import tenants
from poold.ledger.ledger import Ledger
from poold.types import Principal, Role
from tests.conftest import LedgerFactory

ROOT_UID, TENANT_UID, STRANGER_UID = 0, 1000, 1001
POLICY = PeerPolicy(admins=frozenset({ROOT_UID}), tenants={TENANT_UID: "team-a"})
# Every peer's group: a number the policy knows as no uid, so a gid read for the uid shows.
USERS_GID = 100


def request(token: str | None = None, uid: int | None = None) -> Request:
    scope: dict[str, Any] = {"type": "http", "headers": []}
    if token is not None:
        scope["headers"].append((b"authorization", token.encode()))
    if uid is not None:
        scope[PEER_SCOPE_KEY] = (4242, uid, USERS_GID)  # (pid, uid, gid)
    return Request(scope)


def refused(authenticator: TokenAuthenticator, req: Request) -> str:
    with pytest.raises(Unauthenticated) as caught:
        authenticator.authenticate(req)
    return str(caught.value.detail)


@pytest.fixture
def ledger(make_ledger: LedgerFactory) -> Ledger:
    return make_ledger()


def token(ledger: Ledger, role: Role = Role.TENANT, tenant: str | None = "team-a",
          name: str = "t") -> tuple[str, str]:
    """(token id, bearer string) of a new token."""
    view, bearer = ledger.run(partial(tenants.create_token, name=name, role=role, tenant=tenant,
                                      actor="test"))
    return view.id, bearer


def test_peers_are_known_by_uid_admins_first() -> None:
    assert POLICY.principal(ROOT_UID) == Principal(name="uid0", role=Role.ADMIN)
    assert POLICY.principal(TENANT_UID) == Principal(name="uid1000", role=Role.TENANT,
                                                     tenant="team-a")
    assert POLICY.principal(STRANGER_UID) is None
    both = PeerPolicy(admins=frozenset({7}), tenants={7: "team-b"})
    assert both.principal(7) == Principal(name="uid7", role=Role.ADMIN)
    assert PeerPolicy().principal(ROOT_UID) is None  # no policy: nobody by uid alone


def test_a_peer_without_a_token_is_its_uid_or_nobody(ledger: Ledger) -> None:
    authenticator = TokenAuthenticator(ledger, POLICY)
    assert authenticator.authenticate(request(uid=ROOT_UID)).role is Role.ADMIN
    assert authenticator.authenticate(request(uid=TENANT_UID)).tenant == "team-a"
    assert refused(authenticator, request(uid=STRANGER_UID)) == (
        "uid 1001 on the UNIX socket maps to no tenant; send Authorization: Bearer <token>")
    assert refused(authenticator, request()) == "send Authorization: Bearer <token>"


def test_a_token_speaks_for_the_request_even_from_an_admin_peer(ledger: Ledger) -> None:
    """A credential sent is the one judged: root sending a tenant's token is that tenant, and
    a bad token from root is refused, never rescued by the uid."""
    authenticator = TokenAuthenticator(ledger, POLICY)
    _id, bearer = token(ledger, name="worker")
    me = authenticator.authenticate(request(f"Bearer {bearer}", uid=ROOT_UID))
    assert me == Principal(name="worker", role=Role.TENANT, tenant="team-a")
    assert refused(authenticator, request("Bearer pd_nonsense", uid=ROOT_UID)).startswith(
        "malformed credential")


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer pd_x", "pd_x_y", ""])
def test_a_malformed_credential_is_refused_as_such(ledger: Ledger, header: str) -> None:
    assert refused(TokenAuthenticator(ledger), request(header)) == (
        "malformed credential: expected Authorization: Bearer pd_...")


def test_the_scheme_is_case_blind_and_the_secret_must_match(ledger: Ledger) -> None:
    authenticator = TokenAuthenticator(ledger)
    token_id, bearer = token(ledger, role=Role.ADMIN, tenant=None, name="ops")
    assert authenticator.authenticate(request(f"bearer {bearer}")).name == "ops"
    assert authenticator.authenticate(request(f"BEARER  {bearer} ")).name == "ops"
    forged = bearer[:-4] + ("AAAA" if not bearer.endswith("AAAA") else "BBBB")
    assert forged.split("_")[1] == token_id  # a known id, the wrong secret
    assert refused(authenticator, request(f"Bearer {forged}")) == "unknown credential"


def test_a_revoked_token_is_refused_from_the_next_request(ledger: Ledger) -> None:
    authenticator = TokenAuthenticator(ledger, cache_s=3600.0)
    token_id, bearer = token(ledger)
    assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
    ledger.run(partial(tenants.revoke_token, token_id=token_id, actor="test"))
    authenticator.revoked(token_id)  # what the revoking route does
    assert refused(authenticator, request(f"Bearer {bearer}")) == f"token {token_id} was revoked"


def test_cached_answers_last_only_cache_s(ledger: Ledger, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """Without a revocation feed (SQLite), a token is trusted for cache_s after its lookup and
    an unknown id stays unknown as long; then the ledger is asked again, so a revocation made
    through another daemon takes effect, and a token created meanwhile is known."""
    now = [1000.0]
    monkeypatch.setattr(auth_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    authenticator = TokenAuthenticator(ledger, cache_s=10.0)
    token_id, bearer = token(ledger)
    assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
    ledger.run(partial(tenants.revoke_token, token_id=token_id, actor="elsewhere"))
    now[0] += 9.9
    assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
    now[0] += 0.1
    assert refused(authenticator, request(f"Bearer {bearer}")) == f"token {token_id} was revoked"
    # forget_all drops what is cached, known and unknown alike.
    # forget_all (revocations may have gone unheard) drops every cached token at once.
    other_id, other = token(ledger, name="other")
    assert authenticator.authenticate(request(f"Bearer {other}")).name == "other"
    ledger.run(partial(tenants.revoke_token, token_id=other_id, actor="elsewhere"))
    assert authenticator.authenticate(request(f"Bearer {other}")).name == "other"  # cached
    authenticator.forget_all()
    assert refused(authenticator, request(f"Bearer {other}")) == f"token {other_id} was revoked"


@pytest.mark.parametrize("forget_all", [False, True], ids=["forget", "forget_all"])
def test_a_lookup_that_raced_a_revocation_is_not_cached(ledger: Ledger, forget_all: bool) -> None:
    """The ledger read a token just before a revocation through this daemon was forgotten (or
    before the revocation feed, having missed notifications, dropped every cached token): what
    that read found must not be cached, or the revoked token would live for cache_s. Twice:
    every revocation counts, not only the first."""
    authenticator = TokenAuthenticator(ledger, cache_s=3600.0)
    real_read = ledger.read
    for round_ in range(2):
        token_id, bearer = token(ledger, name=f"raced-{round_}")

        def read_then_revoke(query: Any, token_id: str = token_id) -> Any:
            found = real_read(query)
            ledger.run(partial(tenants.revoke_token, token_id=token_id, actor="test"))
            if forget_all:  # the revocation lands while this lookup is out
                authenticator.forget_all()
            else:
                authenticator.forget(token_id)
            return found

        ledger.read = read_then_revoke  # type: ignore[method-assign]
        try:
            assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
        finally:
            ledger.read = real_read  # type: ignore[method-assign]
        assert refused(authenticator, request(f"Bearer {bearer}")) == (
            f"token {token_id} was revoked")


class HeardEverything:
    """A revocation feed (the PostgreSQL LISTEN seam) that is listening and has nothing to say:
    what the authenticator sees of a daemon that has heard every revocation so far."""

    def subscribe(self, on_revoked: Any, on_reset: Any) -> None:
        pass

    def drain(self) -> bool:
        return True


def test_with_a_revocation_feed_a_token_is_trusted_for_the_longer_heard_period(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon that hears revocations as they commit re-reads a cached token only every
    HEARD_TOKEN_CACHE_S (for a change made to the tokens table by hand), whatever cache_s says."""
    now = [1000.0]
    monkeypatch.setattr(auth_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    authenticator = TokenAuthenticator(ledger, cache_s=1.0,
                                       feed=HeardEverything())  # type: ignore[arg-type]
    token_id, bearer = token(ledger)
    assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
    ledger.run(partial(tenants.revoke_token, token_id=token_id, actor="by hand"))  # unheard
    now[0] += auth_module.HEARD_TOKEN_CACHE_S - 0.1
    assert authenticator.authenticate(request(f"Bearer {bearer}")).tenant == "team-a"
    now[0] += 0.1
    assert refused(authenticator, request(f"Bearer {bearer}")) == f"token {token_id} was revoked"
