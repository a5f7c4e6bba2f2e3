"""Tokens in the ledger: a revocation is recorded once with its host and the token's name, and
revoking a token that does not exist says which; on both databases."""

from __future__ import annotations

from functools import partial

import pytest

from poold.errors import UnknownToken
from poold.ledger import reads, tenants
from poold.types import Role
from tests.conftest import HOST, LedgerFactory


def test_a_revocation_is_recorded_once_with_its_host_and_the_tokens_name(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    token, _bearer = ledger.run(partial(tenants.create_token, name="ci-runner",
                                        role=Role.TENANT, tenant="team-a", actor="admin:a"))
    for _ in range(2):  # idempotent: the second one records nothing
        ledger.run(partial(tenants.revoke_token, token_id=token.id, actor="admin:a"))
    (event,) = ledger.read(lambda s, now: reads.events(s, kind="token.revoked"))
    assert (event.actor, event.host) == ("admin:a", HOST)
    assert event.details == {"token": token.id, "name": "ci-runner"}


def test_revoking_an_unknown_token_says_which(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    with pytest.raises(UnknownToken) as refused:
        ledger.run(partial(tenants.revoke_token, token_id="0123456789abcdef", actor="a"))
    assert str(refused.value) == "no token '0123456789abcdef'"
