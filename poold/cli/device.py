"""`poold device`: change dax devices at run time through the running daemon (admin only).

    poold device create --region 0 --size 256MiB [--align 2MiB]
    poold device destroy dax0.2
    poold device resize dax0.1 512MiB
    poold device reconfigure dax0.1 --mode system-ram|devdax
    poold device drain dax0.1 / poold device undrain dax0.1
    poold device unbind-tenant dax1.0

Each prints the API's answer (the device as the ledger and the kernel have it after the change) as
JSON; a refusal prints `{"error", "detail"}` on stderr and exits 1, like every other command.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from poold.cli.output import print_json
from poold.client.http import PooldClient
from poold.types import parse_size

Options = Callable[[argparse.ArgumentParser], None]
ClientFor = Callable[[argparse.Namespace], PooldClient]


def add_commands(sub: Any, api_options: Options, client: ClientFor) -> None:
    """Register `device ACTION` on the top-level subparsers; `api_options` adds the flags that
    find the daemon, `client` builds a client from them."""
    actions = sub.add_parser("device", help="create, destroy, resize, reconfigure, drain dax "
                             "devices (admin)").add_subparsers(required=True, metavar="ACTION")

    def command(name: str, helptext: str, call: Callable[[argparse.Namespace], tuple[
            str, str, dict[str, Any] | None]]) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=helptext)
        api_options(parser)

        def run(args: argparse.Namespace) -> int:
            method, path, body = call(args)
            with client(args) as api:
                print_json(api.raw(method, path, json=body))
            return 0

        parser.set_defaults(func=run)
        return parser

    create = command("create", "a new device in a dynamic dax region, leasable at once",
                     lambda a: ("POST", "/v1/devices",
                                {"region": a.region, "size": a.size, "align": a.align}))
    create.add_argument("--region", type=int, required=True, help="dax region id (daxctl -r)")
    create.add_argument("--size", type=parse_size, required=True, help="e.g. 256MiB")
    create.add_argument("--align", type=parse_size, help="default: the region's (2MiB)")

    destroy = command("destroy", "unbind, shrink to 0 and delete a device (no live leases)",
                      lambda a: ("DELETE", f"/v1/devices/{a.dev}", None))
    resize = command("resize", "grow or shrink a device (no live leases)",
                     lambda a: ("POST", f"/v1/devices/{a.dev}/resize", {"size": a.size}))
    reconfigure = command("reconfigure", "online as system-ram (a NUMA node) or back to devdax",
                          lambda a: ("POST", f"/v1/devices/{a.dev}/reconfigure",
                                     {"mode": a.mode}))
    drain = command("drain", "no new leases; live ones run on",
                    lambda a: ("POST", f"/v1/devices/{a.dev}/drain", None))
    undrain = command("undrain", "leasable again",
                      lambda a: ("POST", f"/v1/devices/{a.dev}/undrain", None))
    unbind = command("unbind-tenant", "free a device handed out whole from the tenant it serves "
                     "(none of its leases left)",
                     lambda a: ("DELETE", f"/v1/devices/{a.dev}/tenant", None))
    for parser in (destroy, resize, reconfigure, drain, undrain, unbind):
        parser.add_argument("dev", help="dax device, e.g. dax0.1")
    resize.add_argument("size", type=parse_size, help="new size, e.g. 512MiB (0 empties it)")
    reconfigure.add_argument("--mode", choices=["system-ram", "devdax"], required=True)
