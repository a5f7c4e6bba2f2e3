"""poold.kv: a KV-cache block store over leased memory, for inference offload tiers.

    with PooldClient(url) as client, KVStore(client, block_size=64 * KiB,
                                              budget_bytes=GiB, lease_bytes=64 * MiB) as store:
        keys = prefix_keys(token_ids, block_tokens=16)
        store.put_many(keys, blocks)            # or put_async(...) -> Future
        hits = store.get_many_into(keys, out)   # or get_many_views(keys): zero-copy

Imports only the client SDK (and numpy lazily, for get_array).
"""

from poold.kv.eviction import LRUK
from poold.kv.keys import KEY_BYTES, chain_hash, prefix_keys
from poold.kv.sessions import SessionTable
from poold.kv.slab import Slab
from poold.kv.stats import BlockLocation, KVStats, LostLease
from poold.kv.store import DEFAULT_PRIORITIES, KVStore

__all__ = [
    "DEFAULT_PRIORITIES",
    "KEY_BYTES",
    "LRUK",
    "BlockLocation",
    "KVStats",
    "KVStore",
    "LostLease",
    "SessionTable",
    "Slab",
    "chain_hash",
    "prefix_keys",
]
