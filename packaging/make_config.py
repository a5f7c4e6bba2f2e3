"""Write the example config, packaging/poold.toml, from the Settings field descriptions.

    python packaging/make_config.py > packaging/poold.toml

The file is generated so it cannot drift from poold/config.py: a test regenerates it and fails
on any difference, and on any Settings field missing from it. Each setting appears commented
out with its default, or with an example where the default is unset or depends on the machine.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from pydantic import BeforeValidator
from pydantic.fields import FieldInfo

from poold.config import Settings
from poold.types import format_size

WIDTH = 99
HEADER = """\
# poold configuration (TOML): what `poold serve --config FILE` reads, /etc/poold/poold.toml for the
# system service. Generated from poold/config.py by packaging/make_config.py; do not edit by hand.
#
# Every setting is shown commented out with its default (or an example, where the default is
# unset or depends on the machine): uncomment a line to change it. POOLD_<NAME> environment
# variables override this file, and `poold serve` flags override both. Sizes may be written
# "1GiB", "64MiB" or in bytes.
"""

# Settings whose default is unset or comes from the machine: (what the default is, an example).
EXAMPLES: dict[str, tuple[str, Any]] = {
    "state_dir": ("/var/lib/poold as root (the service's StateDirectory), else "
                  "~/.local/state/poold", "/var/lib/poold"),
    "database_url": ("unset", "postgresql+psycopg://poold@db.example.net/poold"),
    "runtime_dir": ("unset; the unit file sets POOLD_RUNTIME_DIR=/run/poold", "/run/poold"),
    "host_id": ("the contents of /etc/machine-id", "node-a1"),
    "host_name": ("this machine's host name", "node-a1"),
    "emulate_size": ("unset (no emulated device)", "1GiB"),
    "device_pools": ("no rules", {"dax*": "cxl"}),
    "peer_admins": ('["root"]', ["root", "poold-admin"]),
    "peer_tenants": ("none", {"vllm": "team-a", "1001": "team-b"}),
    "tls_certfile": ("unset (plain HTTP; keep listen on loopback)", "/etc/poold/tls/cert.pem"),
    "tls_keyfile": ("unset", "/etc/poold/tls/key.pem"),
    "unscrubbed_pools": ("none: every pool scrubs", ["scratch"]),
    "emulate_uid": ("unset (the device is this host's own)", "emulated:shared-emu0"),
    "shared_devices": ("none", ["cxl:serial:*"]),
    "manual_regions": ("none: every dynamic region is carved per lease", ["dax1"]),
    "trusted_pools": ("none: a device handed out whole serves one tenant at a time", ["lab"]),
    "default_tenant_max_bytes": ("unset (unlimited)", "64GiB"),
}


def render() -> str:
    blocks = [HEADER]
    for name, field in Settings.model_fields.items():
        blocks.append(_block(name, field))
    return "\n".join(blocks)


def _block(name: str, field: FieldInfo) -> str:
    if name in EXAMPLES:
        default, value = EXAMPLES[name]
    elif field.default_factory is not None or field.default is None:
        raise SystemExit(f"Settings.{name}: add its default and an example to EXAMPLES")
    else:
        default, value = "", field.default
    sizes = any(isinstance(m, BeforeValidator) for m in field.metadata)
    text = field.description or ""
    if default:
        text += f" Default: {default}."
    lines = textwrap.wrap(text, WIDTH - 2, break_on_hyphens=False)
    return "".join(f"# {line}\n" for line in lines) + f"#{name} = {_toml(value, sizes)}\n"


def _toml(value: Any, sizes: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and sizes:
        return _toml(format_size(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a TOML basic string: the same escapes as JSON
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


if __name__ == "__main__":
    sys.stdout.write(render())
