"""/v1/sessions: open, inspect, keep alive, close and revoke client sessions.

A session is a TTL many leases hang on (grant with `session_id`): one keepalive renews all of
them, and its answer lists the ones still live, so a holder of 64 leases sends one request per
period instead of 64. Closing it releases its leases; an admin revoking it revokes them. A
tenant sees and touches its own sessions only: another tenant's is unknown to it (404).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from pydantic import TypeAdapter

from api.auth import PrincipalDep, acting_tenant, admin_of, principal_of, tenant_only_of
from api.deps import LedgerDep, actor_of, ledger_of
from api.errors import ERROR_RESPONSES
from api.metrics import Metrics
from api.reclaim import ReclaimFeed
from api.schemas import ClientSession, ReclaimAsk, SessionKeepalive, SessionRequest
from poold.errors import SessionNotActive, UnknownSession
from poold.ledger import reads, sessions
from poold.ledger.reclaims import asked_bytes_of
from poold.ledger.tx import Tx
from poold.ledger.views import ReclaimAsk as ReclaimAskView
from poold.ledger.views import SessionView
from poold.types import TEXT_PATTERN, Role, SessionState, is_lease_id

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES)
SessionId = Annotated[str, Path(min_length=1, max_length=64)]
Filter = Annotated[str | None, Query(max_length=128, pattern=TEXT_PATTERN)]

if [f.name for f in fields(SessionView)] != list(ClientSession.model_fields):
    raise RuntimeError("api.schemas.ClientSession and SessionView name different fields")
_ONE = TypeAdapter(SessionView)
_MANY = TypeAdapter(list[SessionView])
_ASKS = TypeAdapter(list[ReclaimAskView])


def _json(view: SessionView, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(content=_ONE.dump_json(view), status_code=status_code,
                    media_type="application/json")


def _known(session_id: str) -> str:
    if not is_lease_id(session_id):
        raise UnknownSession(f"no session {session_id[:64]!r}")
    return session_id


async def _write(request: Request, command: Callable[[Tx], SessionView],
                 status_code: int = status.HTTP_200_OK) -> Response:
    view: SessionView = await ledger_of(request).call(command)
    return _json(view, status_code)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ClientSession)
async def open_session(request: Request, body: SessionRequest | None = None) -> Response:
    body = body or SessionRequest()
    principal = principal_of(request)
    tenant = acting_tenant(principal, body.tenant, "open sessions")
    opening = sessions.OpenRequest(actor=principal.actor, ttl_s=body.ttl_s, tenant=tenant,
                                   labels=dict(body.labels))
    return await _write(request, partial(sessions.open_session, request=opening),
                        status.HTTP_201_CREATED)


@router.get("", response_model=list[ClientSession])
def list_sessions(
    ledger: LedgerDep,
    principal: PrincipalDep,
    state: SessionState | None = None,
    tenant: Filter = None,
    host: Filter = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    """Newest first. A tenant sees its own sessions only, whatever `tenant` asks."""
    if principal.role is Role.TENANT:
        tenant = principal.tenant
    found = ledger.read(lambda s, now: reads.sessions(s, now, tenant=tenant, host=host,
                                                      state=state, limit=limit))
    return Response(content=_MANY.dump_json(found), media_type="application/json")


@router.get("/{session_id}", response_model=ClientSession)
def get_session(session_id: SessionId, ledger: LedgerDep, request: Request) -> Response:
    only, session_id = tenant_only_of(request), _known(session_id)
    return _json(ledger.read(lambda s, now: reads.client_session(s, session_id, now,
                                                                 tenant_only=only)))


@router.post("/{session_id}/keepalive", response_model=ClientSession)
async def keepalive(session_id: SessionId, request: Request,
                    body: SessionKeepalive | None = None) -> Response:
    """Renew the session and every lease in it; `leases` in the answer are those it renewed,
    `reclaim` those the daemon asked back."""
    return await _write(request, partial(sessions.keepalive, session_id=_known(session_id),
                                         actor=actor_of(request),
                                         tenant_only=tenant_only_of(request),
                                         idle_s=body.idle_s if body is not None else None))


@router.get("/{session_id}/reclaims", response_model=list[ReclaimAsk])
async def reclaims(session_id: SessionId, ledger: LedgerDep, request: Request,
                   wait_s: Annotated[float, Query(ge=0, le=60)] = 0) -> Response:
    """The session's elastic leases the daemon asked back; with `wait_s`, a long poll: answered
    as soon as there is one (at once when this daemon asks), else empty after `wait_s`. What a
    holder listens on to give back within milliseconds rather than at its next keepalive."""
    only, session_id = tenant_only_of(request), _known(session_id)
    feed: ReclaimFeed = request.app.state.reclaim_feed
    with feed.listening(actor_of(request)) as may_wait:
        deadline = time.monotonic() + (wait_s if may_wait else 0)
        while True:
            view = await asyncio.to_thread(ledger.read, lambda s, now: reads.client_session(
                s, session_id, now, tenant_only=only))
            if view.state is not SessionState.ACTIVE:
                raise SessionNotActive(f"session {session_id} is {view.state}")
            left = deadline - time.monotonic()
            if view.reclaim or left <= 0:
                return Response(content=_ASKS.dump_json(view.reclaim),
                                media_type="application/json")
            await feed.wait(left)


@router.delete("/{session_id}", response_model=ClientSession)
async def close_session(session_id: SessionId, request: Request) -> Response:
    """Release every lease of the session and end it. Idempotent."""
    command = partial(_close, session_id=_known(session_id), actor=actor_of(request),
                      tenant_only=tenant_only_of(request))
    view, given = await ledger_of(request).call(command)
    if given:
        metrics: Metrics = request.app.state.metrics
        metrics.reclaim_given_bytes.inc(given)
    return _json(view)


def _close(tx: Tx, session_id: str, actor: str, tenant_only: str | None
           ) -> tuple[SessionView, int]:
    """The close, and the bytes of leases asked back that it gave back (releases, as DELETE
    /v1/leases/{id} would: what `poold_reclaim_given_bytes_total` counts); none when the
    session had ended already or ends as expired."""
    asked = asked_bytes_of(tx, session_id)
    view = sessions.close(tx, session_id, actor, tenant_only)
    return view, asked if view.state == SessionState.CLOSED and view.ended_at == tx.now else 0


@router.post("/{session_id}/revoke", response_model=ClientSession)
async def revoke_session(session_id: SessionId, request: Request) -> Response:
    """Administrative end of a session and its leases; its holder learns at keepalive."""
    return await _write(request, partial(sessions.revoke, session_id=_known(session_id),
                                         actor=admin_of(request).actor))
