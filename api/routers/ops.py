"""/readyz and /metrics: what an operator's probes and Prometheus ask.

Owns the readiness probe, shared with the systemd watchdog (poold.daemon): the ledger answers a
trivial read, and the writer answers a no-op command, both within `probe_timeout_s`. /healthz
(liveness: the process serves HTTP) stays in api.app.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.exposition import choose_encoder

from api.deps import ledger_of
from api.errors import ERROR_RESPONSES
from api.metrics import Metrics
from api.schemas import Health
from poold import __version__
from poold.errors import LedgerUnavailable, PooldError
from poold.ledger import reads
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx

router = APIRouter(tags=["ops"])


def _noop(_tx: Tx) -> None:
    """A writer command that changes nothing: its answer proves the writer thread is serving."""


async def ledger_problem(ledger: Ledger, timeout_s: float, metrics: Metrics | None = None
                         ) -> str | None:
    """None when the ledger answers a read and its writer a no-op, else what went wrong.

    A timed-out read keeps its worker thread until the database answers; a timed-out no-op is
    cancelled and skipped by the writer.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.to_thread(ledger.read, lambda s, _now: reads.events(s, limit=1))
            await ledger.call(_noop)
    except TimeoutError:
        problem = f"the ledger did not answer within {timeout_s:g} s"
    except PooldError as exc:
        problem = exc.detail
    else:
        return None
    if metrics is not None:
        metrics.ledger_error("probe")
    return problem


@router.get("/readyz", responses={503: ERROR_RESPONSES[503]})
async def readyz(request: Request) -> Health:
    """200 when the ledger answers a trivial read and the writer is running; else 503
    LedgerUnavailable."""
    ledger = ledger_of(request)
    state = request.app.state
    problem = await ledger_problem(ledger, state.probe_timeout_s, state.metrics)
    if problem is not None:
        raise LedgerUnavailable(problem)
    return Health(status="ready", host=ledger.host_id, version=__version__)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_PLAIN_0_0_4: {}},
                             "description": "Prometheus text format (OpenMetrics if asked)"}})
def metrics(request: Request) -> Response:
    """Capacity (read from the ledger now), lease operations, expiries, reclaims, ledger errors
    and rescans. A plain `def`: the capacity read blocks, so it runs in a worker thread."""
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(request.app.state.metrics.registry), media_type=content_type)
