"""poold's client SDK: lease memory over HTTP and map it.

    with PooldClient("http://127.0.0.1:7077") as client:
        with client.lease(64 * MiB, ttl_s=30) as lease, lease.map() as mapping:
            mapping.buffer[:5] = b"hello"

Imports only the wire schemas, types and errors (enforced by import-linter).
"""

from api.schemas import Lease as LeaseInfo
from api.schemas import ReclaimAsk
from poold.client.http import PooldClient
from poold.client.lease import Lease
from poold.client.mapping import Mapping
from poold.client.session import IdleReport, Session
from poold.errors import ClientError, LeaseLost, MisalignedExtent, PooldError, TransportError

__all__ = [
    "ClientError",
    "IdleReport",
    "Lease",
    "LeaseInfo",
    "LeaseLost",
    "Mapping",
    "MisalignedExtent",
    "PooldClient",
    "PooldError",
    "ReclaimAsk",
    "Session",
    "TransportError",
]
