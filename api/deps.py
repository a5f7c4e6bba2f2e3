"""Request dependencies: the ledger handle and who is asking.

The dependencies are `async def` although they do no I/O: FastAPI runs a plain `def` dependency
in a worker thread, two thread hops per request for nothing. Routes on the hot path call the
plain functions directly.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.auth import principal_of
from poold.ledger.ledger import Ledger


def ledger_of(request: Request) -> Ledger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


def actor_of(request: Request) -> str:
    """Who the audit log names: the request's principal."""
    return principal_of(request).actor


async def get_ledger(request: Request) -> Ledger:
    return ledger_of(request)


LedgerDep = Annotated[Ledger, Depends(get_ledger)]
