"""How the CLI prints: JSON with the API's keys by default, aligned tables with --human."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from poold.client.http import PooldClient
from poold.types import LeaseState, format_size

if TYPE_CHECKING:
    from api.schemas import Lease

BAR_WIDTH = 30
SCRUB_POLL_S = 0.2

# Columns shown by --human, per listing; byte columns are printed with binary units.
HUMAN_COLUMNS = {
    "devices": ["id", "devname", "kind", "pool", "state", "size", "claimed_bytes",
                "leased_bytes", "free_bytes", "live_leases", "chardev"],
    "pools": ["name", "devices", "size", "leased_bytes", "available_bytes", "free_bytes",
              "live_leases"],
    "leases": ["id", "pool", "device", "offset", "length", "generation", "state", "expires_at"],
}
BYTE_COLUMNS = {"size", "claimed_bytes", "leased_bytes", "free_bytes", "available_bytes",
                "length", "offset"}


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_table(kind: str, rows: list[dict[str, Any]]) -> None:
    columns = HUMAN_COLUMNS[kind]
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    if not rows:
        print(f"(no {kind})")


def _cell(column: str, value: Any) -> str:
    if column in BYTE_COLUMNS and isinstance(value, int):
        return format_size(value) if value else "0"
    return "-" if value is None else str(value)


def wait_for_scrub(api: PooldClient, info: Lease) -> Lease:
    """Poll a released lease until its bytes are zeroed, drawing progress on stderr (a bar
    redrawn in place on a terminal, a line per step otherwise)."""
    tty = sys.stderr.isatty()
    shown = -1
    while info.state == LeaseState.SCRUBBING:
        percent = 100 * info.scrubbed_bytes // max(info.length, 1)
        if percent != shown:
            _draw(info.scrubbed_bytes, info.length, tty)
            shown = percent
        time.sleep(SCRUB_POLL_S)
        info = api.get_lease(info.id)
    _draw(info.length, info.length, tty)
    sys.stderr.write("\n" if tty else "")
    return info


def _draw(done: int, total: int, tty: bool) -> None:
    filled = BAR_WIDTH * done // max(total, 1)
    line = (f"scrubbing [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{100 * done // max(total, 1):3d}% {format_size(done)} of {format_size(total)}")
    sys.stderr.write(f"\r{line}" if tty else f"{line}\n")
    sys.stderr.flush()
