"""How the CLI prints: JSON with the API's keys by default, aligned tables with --human."""

from __future__ import annotations

import json
import sys
from typing import Any

from poold.types import format_size

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
