"""`poold`: serve, list, lease, discover, fsck, db. Subcommands print JSON with the API's keys.

Commands that act on a running daemon (list, lease) talk to its API; commands that act on the
ledger itself (fsck, db) open it directly with the same settings as `serve`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from drivers import DriverFailure
from drivers.topology import scan
from poold import errors
from poold.cli import access, device, pool
from poold.cli.common import api_options, client, ledger_options, load
from poold.cli.output import print_json, print_table, wait_for_scrub
from poold.inventory.discovery import discover_json
from poold.types import LeaseState, parse_size

# The ledger's modules (SQLAlchemy, Alembic) and the daemon's (uvicorn) are imported by the
# commands that use them: half a second of start-up that `poold list` or `poold lease` would
# pay for nothing.


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except errors.PooldError as exc:
        json.dump({"error": type(exc).__name__, "detail": exc.detail}, sys.stderr)
        sys.stderr.write("\n")
        return 1
    except (ValueError, FileNotFoundError) as exc:
        print(f"poold: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `poold discover | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poold", description=__doc__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the daemon")
    ledger_options(serve)
    serve.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:7077)")
    serve.add_argument("--emulate", type=parse_size, metavar="SIZE",
                       help="add an emulated device of SIZE (e.g. 1GiB)")
    serve.add_argument("--host-id", help="this host's id in the ledger")
    serve.add_argument("--log-format", choices=["text", "json"],
                       help="text lines (default) or JSON lines with key=value context as fields")
    serve.set_defaults(func=_serve)

    list_ = sub.add_parser("list", help="list devices, pools or leases")
    list_.add_argument("what", choices=["devices", "pools", "leases"])
    list_.add_argument("--state", help="leases only: active, released, expired, revoked, lost")
    list_.add_argument("--pool", help="leases only: in this pool")
    api_options(list_)
    list_.add_argument("--human", action="store_true", help="a table instead of JSON")
    list_.set_defaults(func=_list)

    lease = sub.add_parser("lease", help="acquire or release a lease").add_subparsers(
        required=True, metavar="ACTION")
    acquire = lease.add_parser("acquire", help="grant a lease and print it")
    acquire.add_argument("size", type=parse_size, help="bytes or e.g. 64MiB")
    acquire.add_argument("--ttl", type=int, help="seconds without keepalive before expiry")
    acquire.add_argument("--pool")
    api_options(acquire)
    acquire.set_defaults(func=_acquire)
    for action, helptext in (("release", "release a lease"), ("keepalive", "renew a lease")):
        cmd = lease.add_parser(action, help=helptext)
        cmd.add_argument("id")
        api_options(cmd)
        if action == "release":
            cmd.add_argument("--no-wait", action="store_true",
                             help="return at once while the lease's bytes are still being "
                             "zeroed (default: wait, with a progress bar on stderr)")
        cmd.set_defaults(func=_lease_action, action=action)

    device.add_commands(sub, api_options, client)

    discover = sub.add_parser("discover", help="print the CXL/DAX topology this host has, and "
                              "which dax devices poold can lease")
    discover.add_argument("--sysfs-root", type=Path, default=Path("/sys"),
                          help="a sysfs tree (default /sys; a recorded tree for tests)")
    discover.set_defaults(func=_discover)

    check = sub.add_parser("fsck", help="check the ledger's invariants; exit 1 on a violation")
    ledger_options(check)
    check.set_defaults(func=_fsck)

    access.add_commands(sub)
    pool.add_commands(sub)

    database = sub.add_parser("db", help="ledger schema").add_subparsers(required=True,
                                                                        metavar="ACTION")
    upgrade = database.add_parser("upgrade", help="migrate the ledger to the newest schema")
    ledger_options(upgrade)
    upgrade.set_defaults(func=_db_upgrade)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from poold.daemon import Daemon
    from poold.daemon.logs import configure_logging

    settings = load(args, listen=args.listen, emulate_size=args.emulate,
                         host_id=args.host_id, log_format=args.log_format)
    configure_logging(settings.log_level, settings.log_format)
    Daemon(settings).serve()
    return 0


def _list(args: argparse.Namespace) -> int:
    with client(args) as api:
        if args.what == "leases":
            params = {k: v for k, v in (("state", args.state), ("pool", args.pool)) if v}
            rows = api.raw("GET", "/v1/leases", params=params)
        else:
            rows = api.raw("GET", f"/v1/{args.what}")
    if args.human:
        print_table(args.what, rows)
    else:
        print_json(rows)
    return 0


def _acquire(args: argparse.Namespace) -> int:
    with client(args) as api:
        print_json(api.grant(args.size, ttl_s=args.ttl, pool=args.pool).model_dump(mode="json"))
    return 0


def _lease_action(args: argparse.Namespace) -> int:
    with client(args) as api:
        info = api.release(args.id) if args.action == "release" else api.keepalive(args.id)
        if info.state == LeaseState.SCRUBBING and not args.no_wait:
            info = wait_for_scrub(api, info)
        print_json(info.model_dump(mode="json"))
    return 0


def _discover(args: argparse.Namespace) -> int:
    if not (args.sysfs_root / "devices").is_dir():
        raise ValueError(f"{args.sysfs_root} is not a sysfs tree (no devices/ in it)")
    try:
        topology = scan(args.sysfs_root)
    except DriverFailure as exc:
        raise errors.DriverError(str(exc)) from exc
    print_json(discover_json(topology))
    return 0


def _fsck(args: argparse.Namespace) -> int:
    from sqlalchemy.orm import Session

    from poold import db
    from poold.ledger.clock import DatabaseClock
    from poold.ledger.fsck import fsck

    settings = load(args)
    engine = db.make_engine(settings.ledger_url, writer=False)
    try:
        with Session(engine) as session, session.begin():
            report = fsck(session, DatabaseClock().now(session))
    finally:
        engine.dispose()
    print_json({"clean": report.clean, "violations": report.violations,
                "warnings": report.warnings, "devices": report.devices,
                "claims": report.claims, "leases": report.leases})
    return 0 if report.clean else 1


def _db_upgrade(args: argparse.Namespace) -> int:
    from poold import db

    settings = load(args)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.ledger_url)
    print_json({"upgraded": True, "ledger": settings.ledger_url.split("@")[-1]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
