"""Who may use this daemon: the admin credential written on first start, and the UNIX-socket
peer policy built from config."""

from __future__ import annotations

import logging
import os
import pwd
from functools import partial
from pathlib import Path

from api.auth import PeerPolicy
from poold.ledger import tenants
from poold.ledger.ledger import Ledger
from poold.security import ADMIN_TOKEN_FILE, split_token, write_private
from poold.types import Role

log = logging.getLogger(__name__)


def ensure_admin_credential(ledger: Ledger, state_dir: Path, host_name: str) -> Path:
    """<state_dir>/admin.token (0600) holds a valid admin bearer; created when missing, or when
    the one it holds was revoked or belongs to another ledger. Whoever can read it (root, the
    daemon's user) is an admin, which they are on this host anyway."""
    path = state_dir / ADMIN_TOKEN_FILE
    if _valid_admin(ledger, path):
        return path
    command = partial(tenants.create_token, name=f"admin@{host_name}", role=Role.ADMIN,
                      tenant=None, actor="daemon")
    view, bearer = ledger.run(command)
    write_private(path, bearer + "\n")
    log.info("auth.admin_credential_created token=%s path=%s", view.id, path)
    return path


def _valid_admin(ledger: Ledger, path: Path) -> bool:
    try:
        parts = split_token(path.read_text().strip())
    except FileNotFoundError:
        return False
    if parts is None:
        return False
    found = ledger.read(lambda s, _now: tenants.lookup(s, parts[0]))
    return found is not None and found.role is Role.ADMIN and not found.revoked


def peer_policy(admins: list[str], tenant_of: dict[str, str]) -> PeerPolicy:
    """Config names users by name or uid; the kernel reports uids."""
    admin_uids = {_uid(user) for user in admins} | {os.geteuid()}
    return PeerPolicy(admins=frozenset(admin_uids),
                      tenants={_uid(user): tenant for user, tenant in tenant_of.items()})


def _uid(user: str) -> int:
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"no user {user!r} on this host (peer_admins / peer_tenants)") from None
