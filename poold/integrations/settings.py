"""TierSettings: what every engine integration is told about poold, checked once, the same way.

Where the daemon is and how much to lease. `url` (TCP) or `uds` (its api.sock; with `fd_socket`
the leases are mapped from descriptors the daemon passes, no device permission needed); `token`
defaults to $POOLD_TOKEN. Sizes in bytes: `budget_bytes` is the most the tier leases, in leases
of `lease_bytes`, cut into blocks of `block_bytes` (an object takes whole blocks). `ttl_s` is
each lease's TTL (renewed every third of it); `idle_release_s`, how long an empty lease is kept
before it is given back. `elastic`: the tier's leases are a cache the daemon may ask back for
another engine's grant (the asked lease's objects become misses); `grow_wait_s`: how long the
tier's own growth may wait for such room in a full pool before it evicts its own objects.
Engines pass these as a dict (LMCache's `adapter_params`, its `extra_config`, a vLLM tier's
kwargs): a key this does not know is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from poold.client import PooldClient
from poold.integrations.objects import ObjectStore
from poold.kv import KVStore

MiB = 1 << 20
DEFAULT_URL = "http://127.0.0.1:7077"


# Where an engine's request names the session (an agent's conversation) it belongs to: vLLM's
# kv_transfer_params, LMCache's request tags (`lmcache.tag.poold_session`), SGLang's extra_info.
# Blocks a live session stored or hit are evicted last (ObjectStore.hold).
SESSION_FIELD = "poold_session"


@dataclass(frozen=True)
class TierSettings:
    budget_bytes: int
    url: str | None = None
    uds: str | None = None
    fd_socket: str | None = None
    token: str | None = None
    pool: str | None = None
    lease_bytes: int = 64 * MiB
    block_bytes: int = MiB // 4
    ttl_s: int = 30
    idle_release_s: float = 30.0
    elastic: bool = False
    grow_wait_s: float = 0.0
    # How long an engine's session (an agent conversation) holds its objects after its last
    # store or hit: a tool call or a user's answer may take minutes.
    session_ttl_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("budget_bytes", "lease_bytes", "block_bytes", "ttl_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        for name in ("idle_release_s", "grow_wait_s", "session_ttl_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be seconds, not {value!r}")
        if self.grow_wait_s > 60:
            raise ValueError(f"grow_wait_s is at most 60 (the daemon's longest wait), not "
                             f"{self.grow_wait_s!r}")
        if not isinstance(self.elastic, bool):
            raise ValueError(f"elastic must be true or false, not {self.elastic!r}")
        if self.lease_bytes > self.budget_bytes:
            raise ValueError(f"lease_bytes ({self.lease_bytes}) is more than budget_bytes "
                             f"({self.budget_bytes})")
        if self.block_bytes > self.lease_bytes:
            raise ValueError(f"block_bytes ({self.block_bytes}) is more than lease_bytes "
                             f"({self.lease_bytes})")
        for name in ("url", "uds", "fd_socket", "token", "pool"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string, not {value!r}")
        if self.url is not None and self.uds is not None:
            raise ValueError("give url or uds, not both")

    @classmethod
    def known(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TierSettings:
        unknown = set(d) - set(cls.known())
        if unknown:
            raise ValueError(f"unknown poold parameters: {sorted(unknown)}; known: "
                             f"{', '.join(cls.known())}")
        if "budget_bytes" not in d:
            raise ValueError("budget_bytes is required: the most this tier may lease")
        return cls(**d)

    def client(self) -> PooldClient:
        if self.uds is not None:
            return PooldClient(uds=self.uds, fd_socket=self.fd_socket, token=self.token)
        return PooldClient(self.url or DEFAULT_URL, fd_socket=self.fd_socket, token=self.token)

    def open(self, labels: dict[str, str]) -> ObjectStore:
        """An object store on a client of its own (closed with the store)."""
        client = self.client()
        try:
            kv = KVStore(client, block_size=self.block_bytes, budget_bytes=self.budget_bytes,
                         lease_bytes=self.lease_bytes, ttl_s=self.ttl_s,
                         idle_release_s=float(self.idle_release_s), pool=self.pool,
                         labels=labels, elastic=self.elastic,
                         grow_wait_s=float(self.grow_wait_s),
                         session_ttl_s=float(self.session_ttl_s))
        except BaseException:
            client.close()
            raise
        return ObjectStore(kv, client=client)
