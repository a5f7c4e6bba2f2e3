"""Request dependencies: the ledger handle and who is asking."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from poold.ledger.ledger import Ledger


def get_ledger(request: Request) -> Ledger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


def get_actor(request: Request) -> str:
    """Who the audit log names. Until tokens exist (issue 8) that is the peer address."""
    client = request.client
    return f"api:{client.host}" if client else "api:unix"


LedgerDep = Annotated[Ledger, Depends(get_ledger)]
ActorDep = Annotated[str, Depends(get_actor)]
