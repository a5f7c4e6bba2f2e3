"""Block keys: content hashes chained over the token prefix.

A block's key covers every token before it, so two sequences share a key exactly when they share
the whole prefix up to the end of that block; this is how vLLM and SGLang key prefix-cache blocks,
so an engine can hand its own chain to the store. This module owns hashing only; what a key maps
to is the store's business.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Sequence

KEY_BYTES = 16

# Distinct from every 16-byte parent, so a first block never collides with a chained one.
_NO_PARENT = b"\x00"
_PERSON = b"poold.kv.v1"  # domain separation: these hashes mean nothing elsewhere


def _token_bytes(tokens: Sequence[int]) -> bytes:
    # Fixed-width little-endian so keys are equal across hosts (they may share a pool).
    packed = array("q", tokens)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def chain_hash(parent: bytes | None, tokens: Sequence[int], extra: bytes = b"") -> bytes:
    """blake2b-16 over the parent key, the block's token ids and `extra`.

    `extra` carries whatever else changes the KV for the same tokens (a LoRA id, multimodal
    content hashes), as engines add "extra keys"; every field is length-prefixed so no two
    different inputs share a byte string.
    """
    if any(t < 0 for t in tokens):
        raise ValueError("token ids are non-negative")
    h = hashlib.blake2b(digest_size=KEY_BYTES, person=_PERSON)
    if parent is None:
        h.update(_NO_PARENT)
    else:
        h.update(b"\x01" + struct.pack("<I", len(parent)) + parent)
    h.update(struct.pack("<I", len(tokens)) + _token_bytes(tokens))
    h.update(struct.pack("<I", len(extra)) + extra)
    return h.digest()


def prefix_keys(tokens: Sequence[int], block_tokens: int, *, parent: bytes | None = None,
                extra: bytes = b"") -> list[bytes]:
    """The chained key of every full block of `tokens`; a trailing partial block has no key,
    because its KV is not final until the block fills (engines do not cache it either)."""
    if block_tokens <= 0:
        raise ValueError("block_tokens must be positive")
    keys: list[bytes] = []
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = chain_hash(parent, tokens[start:start + block_tokens], extra)
        keys.append(parent)
    return keys
