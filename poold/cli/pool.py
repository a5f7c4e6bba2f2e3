"""`poold pool list|show|create|set|retire|move|rules|quota`: pools, their policy and which
devices they hold, administered in the ledger through the daemon's API (admin), the same on
every host of the ledger.

    poold pool create gpu-kv --max-ttl 3600 --allow team-a --allow team-b
    poold pool set gpu-kv --no-scrub --allow-everyone
    poold pool quota gpu-kv team-a --max-bytes 64GiB --max-leases 32
    poold pool move gpu-kv 7
    poold pool rules --set 'serial=0x4a*:gpu-kv' --set 'name=dax*:cxl'
    poold pool retire gpu-kv
"""

from __future__ import annotations

import argparse
from typing import Any

from poold.cli.common import api_options, client
from poold.cli.output import print_json
from poold.types import parse_size


def add_commands(sub: Any) -> None:
    pool = sub.add_parser("pool", help="pools and their policy (admin)").add_subparsers(
        required=True, metavar="ACTION")
    list_ = pool.add_parser("list", help="every pool with its policy and usage")
    list_.add_argument("--retired", action="store_true", help="retired pools too")
    _command(list_, lambda a: ("GET", "/v1/pools", None, {"retired": str(a.retired).lower()}))
    show = pool.add_parser("show", help="one pool")
    show.add_argument("name")
    _command(show, lambda a: ("GET", f"/v1/pools/{a.name}", None, None))
    create = pool.add_parser("create", help="a new pool (or a retired one brought back)")
    create.add_argument("name")
    _policy_options(create)
    _command(create, lambda a: ("POST", "/v1/pools", {"name": a.name, **_policy(a)}, None))
    set_ = pool.add_parser("set", help="change a pool's policy (only the options given)")
    set_.add_argument("name")
    _policy_options(set_)
    _command(set_, lambda a: ("PATCH", f"/v1/pools/{a.name}", _policy(a), None))
    retire = pool.add_parser("retire", help="retire an empty pool")
    retire.add_argument("name")
    _command(retire, lambda a: ("DELETE", f"/v1/pools/{a.name}", None, None))
    move = pool.add_parser("move", help="move a device into the pool (drain it first)")
    move.add_argument("name")
    move.add_argument("device_id", type=int, help="the device's id, as `poold list devices`")
    _command(move, lambda a: ("POST", f"/v1/pools/{a.name}/devices",
                              {"device_id": a.device_id}, None))
    rules = pool.add_parser("rules", help="placement rules: where devices go as they appear")
    rules.add_argument("--set", dest="rule", action="append", metavar="FIELD=GLOB:POOL",
                       type=_rule, help="replace the rules with these, in order (first match "
                       "wins); FIELD is device, name, identity, numa_node or serial, e.g. "
                       "name=dax1.*:cxl")
    rules.add_argument("--clear", action="store_true", help="no rules: every new device joins "
                       "its daemon's default_pool")
    _command(rules, lambda a: ("GET", "/v1/pool-rules", None, None) if not (a.rule or a.clear)
             else ("PUT", "/v1/pool-rules", {"rules": a.rule or []}, None))
    quota = pool.add_parser("quota", help="a tenant's quotas in the pool")
    quota.add_argument("name")
    quota.add_argument("tenant")
    quota.add_argument("--max-bytes", type=parse_size, help="e.g. 64GiB (default: unlimited)")
    quota.add_argument("--max-leases", type=int, help="live leases at once (default: unlimited)")
    quota.add_argument("--clear", action="store_true",
                       help="no quota of its own in the pool (its global ones still hold)")
    _command(quota, _quota)


def _rule(text: str) -> dict[str, str]:
    """FIELD=GLOB:POOL (the pool after the last colon: a glob may hold colons)."""
    field, sep, rest = text.partition("=")
    pattern, colon, name = rest.rpartition(":")
    if not (sep and colon and field and pattern and name):
        raise argparse.ArgumentTypeError(f"{text!r}: write FIELD=GLOB:POOL, e.g. name=dax1.*:cxl")
    return {"field": field, "pattern": pattern, "pool": name}


def _policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--description")
    parser.add_argument("--default-ttl", type=int, help="seconds a lease lives unless it asks")
    parser.add_argument("--max-ttl", type=int, help="longest TTL a lease may ask, seconds")
    parser.add_argument("--claim-slice", type=parse_size, help="e.g. 1GiB; 0: whole devices")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--max-lease-size", type=parse_size, help="largest lease, e.g. 16GiB")
    size.add_argument("--no-max-lease-size", action="store_true", help="no largest lease")
    scrub = parser.add_mutually_exclusive_group()
    scrub.add_argument("--scrub", dest="scrub", action="store_true", default=None,
                       help="zero released bytes before anyone else is granted them")
    scrub.add_argument("--no-scrub", dest="scrub", action="store_false")
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("--trusted", dest="trusted", action="store_true", default=None,
                       help="its tenants share devices handed out whole")
    trust.add_argument("--untrusted", dest="trusted", action="store_false")
    allow = parser.add_mutually_exclusive_group()
    allow.add_argument("--allow", action="append", metavar="TENANT",
                       help="a tenant that may lease from it (repeat; replaces the list)")
    allow.add_argument("--allow-everyone", action="store_true", help="every tenant may")


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    """The request body: only what the options say."""
    body: dict[str, Any] = {
        key: value for key, value in (
            ("description", args.description), ("default_ttl_s", args.default_ttl),
            ("max_ttl_s", args.max_ttl), ("claim_slice", args.claim_slice),
            ("max_lease_size", args.max_lease_size), ("scrub_on_release", args.scrub),
            ("trusted", args.trusted), ("allowed_tenants", args.allow),
        ) if value is not None}
    if args.no_max_lease_size:
        body["max_lease_size"] = None
    if args.allow_everyone:
        body["allowed_tenants"] = None
    return body


def _quota(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None, None]:
    path = f"/v1/pools/{args.name}/quotas/{args.tenant}"
    if args.clear:
        return "DELETE", path, None, None
    return "PUT", path, {"max_bytes": args.max_bytes, "max_leases": args.max_leases}, None


def _command(parser: argparse.ArgumentParser, request: Any) -> None:
    api_options(parser)

    def run(args: argparse.Namespace) -> int:
        method, path, body, params = request(args)
        with client(args) as api:
            answer = api.raw(method, path, json=body, params=params)
        print_json(answer)
        return 0

    parser.set_defaults(func=run)
