"""Recorded sysfs trees of a real Linux 6.1 kernel (tests/fixtures/sysfs/*.tar.gz), each with the
JSON that `cxl list -vvv`, `ndctl list -BDRNiv` and `daxctl list -RDMi` printed at that moment."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
TREES = sorted(p.name.removesuffix(".tar.gz") for p in FIXTURES.glob("*.tar.gz"))


def extract(name: str, into: Path) -> Path:
    """Unpack a tree (symlinks kept as symlinks) and return the directory holding sys/ and meta/."""
    target = into / name
    if not target.exists():
        with tarfile.open(FIXTURES / f"{name}.tar.gz") as archive:
            archive.extractall(target, filter="tar")
    return target


def tool_json(tree: Path, tool: str) -> Any:
    """A tool's recorded JSON. The files start with the command line and its exit status and may
    end with what the tool printed on stderr ("Warning: no matching devices found")."""
    text = (tree / "meta" / f"{tool}-list.json").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith(("$", "#")))
    if not body.strip():
        return []
    value, _end = json.JSONDecoder().raw_decode(body.strip())
    return value


def walk(value: Any, key: str) -> list[dict[str, Any]]:
    """Every dict in a nested tool listing that carries `key` (cxl list nests by topology)."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if key in value:
            found.append(value)
        for child in value.values():
            found.extend(walk(child, key))
    elif isinstance(value, list):
        for child in value:
            found.extend(walk(child, key))
    return found
