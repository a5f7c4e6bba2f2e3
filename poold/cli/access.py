"""`poold token create|list|revoke` and `poold tenant set|list`: who may use the daemon."""

from __future__ import annotations

import argparse
from typing import Any

from poold.cli.common import api_options, client
from poold.cli.output import print_json
from poold.types import Role, parse_size


def add_commands(sub: Any) -> None:
    token = sub.add_parser("token", help="bearer tokens (admin)").add_subparsers(
        required=True, metavar="ACTION")
    create = token.add_parser("create", help="create a token and print it once")
    create.add_argument("name", help="who or what will use it, e.g. vllm-node-3")
    create.add_argument("--role", choices=[r.value for r in Role], default=Role.TENANT.value)
    create.add_argument("--tenant", help="the tenant a tenant token acts as")
    api_options(create)
    create.set_defaults(func=_create)
    list_ = token.add_parser("list", help="every token, revoked ones included (no secrets)")
    api_options(list_)
    list_.set_defaults(func=_list)
    revoke = token.add_parser("revoke", help="refuse a token from now on")
    revoke.add_argument("id")
    api_options(revoke)
    revoke.set_defaults(func=_revoke)

    tenant = sub.add_parser("tenant", help="tenants and their quotas (admin)").add_subparsers(
        required=True, metavar="ACTION")
    set_ = tenant.add_parser("set", help="create a tenant or replace its quotas")
    set_.add_argument("name")
    set_.add_argument("--max-bytes", type=parse_size, help="e.g. 64GiB (default: unlimited)")
    set_.add_argument("--max-leases", type=int, help="live leases at once (default: unlimited)")
    api_options(set_)
    set_.set_defaults(func=_set_tenant)
    tenants = tenant.add_parser("list", help="tenants with quotas and what they hold")
    api_options(tenants)
    tenants.set_defaults(func=_list_tenants)


def _create(args: argparse.Namespace) -> int:
    body = {"name": args.name, "role": args.role, "tenant": args.tenant}
    with client(args) as api:
        print_json(api.raw("POST", "/v1/tokens", json=body))
    return 0


def _list(args: argparse.Namespace) -> int:
    with client(args) as api:
        print_json(api.raw("GET", "/v1/tokens"))
    return 0


def _revoke(args: argparse.Namespace) -> int:
    with client(args) as api:
        print_json(api.raw("DELETE", f"/v1/tokens/{args.id}"))
    return 0


def _set_tenant(args: argparse.Namespace) -> int:
    body = {"max_bytes": args.max_bytes, "max_leases": args.max_leases}
    with client(args) as api:
        print_json(api.raw("PUT", f"/v1/tenants/{args.name}", json=body))
    return 0


def _list_tenants(args: argparse.Namespace) -> int:
    with client(args) as api:
        print_json(api.raw("GET", "/v1/tenants"))
    return 0
