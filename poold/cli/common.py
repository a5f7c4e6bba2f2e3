"""What every CLI command shares: settings from the flags, and a client for the running daemon.

A command that talks to the daemon authenticates with, first found: --token, $POOLD_TOKEN, the
admin credential the daemon wrote to <state_dir>/admin.token (readable by root and the daemon's
user only).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from poold.client.http import PooldClient
from poold.config import Settings, load_settings
from poold.security import ADMIN_TOKEN_FILE


def ledger_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML config file")
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--database-url", help="SQLAlchemy URL; default SQLite in --state-dir")


def api_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="daemon URL (default from the config's listen)")
    parser.add_argument("--config", type=Path, help="TOML config file")
    parser.add_argument("--state-dir", type=Path, help="where to find the admin credential")
    parser.add_argument("--token", help="bearer token (default $POOLD_TOKEN, else the admin "
                        "credential in the state directory)")


def load(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings as `serve` would have them, with the flags this command was given."""
    return load_settings(args.config, state_dir=getattr(args, "state_dir", None),
                         database_url=getattr(args, "database_url", None), **extra)


def client(args: argparse.Namespace) -> PooldClient:
    s = load(args)
    scheme = "https" if s.tls_certfile is not None else "http"
    url = args.url or f"{scheme}://{s.listen}"
    return PooldClient(url, token=_token(args, s))


def _token(args: argparse.Namespace, s: Settings) -> str | None:
    if args.token:
        return str(args.token)
    if os.environ.get("POOLD_TOKEN"):
        return os.environ["POOLD_TOKEN"]
    try:
        return (s.state_dir / ADMIN_TOKEN_FILE).read_text().strip() or None
    except OSError:  # absent, or not ours to read: go without
        return None
