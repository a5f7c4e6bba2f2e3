"""Secrets this host keeps: the key that signs lease tokens, and bearer tokens.

A lease token proves its bearer was handed the lease at grant time: it is an HMAC of the lease id
under a key that never leaves this host, so nothing needs storing per lease and a replayed
(idempotent) grant gets the same token. The daemon asks for it before passing a lease's file
descriptor over its UNIX socket.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_BYTES = 32
# The admin credential the daemon writes on first start, in its state directory (0600); the CLI
# on the same host reads it from there.
ADMIN_TOKEN_FILE = "admin.token"


def load_or_create_key(path: Path) -> bytes:
    """Read the key, creating it (0600, atomically) on first start."""
    try:
        key = path.read_bytes()
        if len(key) >= KEY_BYTES:
            return key
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # first writer wins; a concurrent start reads the winner's key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def lease_token(key: bytes, lease_id: str) -> str:
    return hmac.new(key, lease_id.encode(), hashlib.sha256).hexdigest()[:32]


def token_matches(key: bytes, lease_id: str, token: str) -> bool:
    return hmac.compare_digest(lease_token(key, lease_id), token)


# --- bearer tokens ---------------------------------------------------------------------------
# `pd_<id>_<secret>`: the id finds the row, the secret is checked against its SHA-256.

TOKEN_PREFIX = "pd_"


def new_token() -> tuple[str, str, str]:
    """(id, secret, the bearer string to hand out once)."""
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return token_id, secret, f"{TOKEN_PREFIX}{token_id}_{secret}"


def split_token(bearer: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed bearer string, else None."""
    if not bearer.startswith(TOKEN_PREFIX):
        return None
    token_id, sep, secret = bearer[len(TOKEN_PREFIX):].partition("_")
    if not sep or len(token_id) != 16 or not 20 <= len(secret) <= 128:
        return None
    return token_id, secret


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, digest: str) -> bool:
    return hmac.compare_digest(secret_digest(secret), digest)


def write_private(path: Path, text: str) -> None:
    """Write a secret file 0600, atomically: readers never see it half written or too open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
