"""/v1/hosts: every host in the ledger with its heartbeat, claims and leases; this host's memory."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from api.auth import get_operator
from api.deps import LedgerDep
from api.errors import ERROR_RESPONSES
from api.schemas import Host, HostMemory, NumaNode
from drivers import DriverFailure
from drivers.hostmem import host_memory
from drivers.numa import scan_memory_blocks, scan_nodes
from drivers.sysfs import Sysfs
from poold.ledger import reads
from poold.ledger.views import HostView
from poold.types import TEXT_PATTERN

router = APIRouter(prefix="/v1/hosts", tags=["hosts"], responses=ERROR_RESPONSES,
                   dependencies=[Depends(get_operator)])


def _wire(view: HostView, request: Request) -> Host:
    host = Host.model_validate(asdict(view))
    if view.id == request.app.state.ledger.host_id:
        host.memory = HostMemory.model_validate(asdict(host_memory()))
        host.numa_nodes = _numa(request.app.state.sysfs_root)
    return host


def _numa(root: str) -> list[NumaNode] | None:
    try:
        sysfs = Sysfs(root)
        blocks, _size = scan_memory_blocks(sysfs)
        return [NumaNode.model_validate(asdict(n), from_attributes=False)
                for n in scan_nodes(sysfs, blocks)]
    except DriverFailure:
        return None


@router.get("")
def list_hosts(ledger: LedgerDep, request: Request) -> list[Host]:
    return [_wire(v, request) for v in ledger.read(reads.hosts)]


@router.get("/{host_id}")
def get_host(host_id: Annotated[str, Path(max_length=128, pattern=TEXT_PATTERN)],
             ledger: LedgerDep, request: Request) -> Host:
    return _wire(ledger.read(lambda s, now: reads.host(s, host_id, now)), request)
