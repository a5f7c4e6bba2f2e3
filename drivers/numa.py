"""NUMA nodes and memory blocks (`/sys/devices/system/{node,memory}`).

A dax device onlined through kmem becomes a CPU-less node made of memory blocks; these are what
poold reads to report that memory and to tell which blocks are online.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from drivers.errors import DriverFailure
from drivers.sysfs import Sysfs, children, read_int, read_text


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    id: int
    state: str | None  # online, offline, going-offline
    zone: str | None  # valid_zones when online: Normal, Movable, ...
    node: int | None
    removable: bool | None


@dataclass(frozen=True, slots=True)
class NumaNode:
    node: int
    cpulist: str
    has_cpu: bool
    mem_total: int | None  # bytes, from the node's meminfo
    mem_free: int | None
    memory_blocks: tuple[int, ...]
    memory_tier: int | None


def scan_memory_blocks(sysfs: Sysfs) -> tuple[dict[int, MemoryBlock], int | None]:
    """Every memory block by id, and the block size in bytes."""
    base = sysfs.path("devices", "system", "memory")
    block_size = read_int(base / "block_size_bytes", base=16)
    blocks = {}
    for path in children(base, "memory"):
        index = int(path.name.removeprefix("memory"))
        nodes = [n for n in _listdir(path) if n.startswith("node") and n[4:].isdigit()]
        removable = read_int(path / "removable", base=10)
        blocks[index] = MemoryBlock(
            id=index, state=read_text(path / "state"), zone=read_text(path / "valid_zones"),
            node=int(nodes[0][4:]) if nodes else None,
            removable=None if removable is None else bool(removable),
        )
    return blocks, block_size


def scan_nodes(sysfs: Sysfs, blocks: dict[int, MemoryBlock]) -> list[NumaNode]:
    base = sysfs.path("devices", "system", "node")
    online = read_list(base / "online")
    with_cpu = read_list(base / "has_cpu")
    tiers = _memory_tiers(sysfs)
    nodes = []
    for path in children(base, "node"):
        suffix = path.name.removeprefix("node")
        if not suffix.isdigit() or int(suffix) not in online:
            continue
        node = int(suffix)
        total, free = _meminfo(path / "meminfo")
        nodes.append(NumaNode(
            node=node, cpulist=read_text(path / "cpulist") or "", has_cpu=node in with_cpu,
            mem_total=total, mem_free=free,
            memory_blocks=tuple(sorted(i for i, b in blocks.items() if b.node == node)),
            memory_tier=tiers.get(node),
        ))
    return nodes


def _meminfo(path: Path) -> tuple[int | None, int | None]:
    """MemTotal and MemFree of a node's meminfo ("Node 1 MemTotal: 262144 kB") in bytes."""
    text = read_text(path)
    if text is None:
        return None, None
    values: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("MemTotal:", "MemFree:"):
            try:
                values[fields[2]] = int(fields[3]) * 1024
            except ValueError as exc:
                raise DriverFailure(str(path), f"bad line {line[:60]!r}") from exc
    return values.get("MemTotal:"), values.get("MemFree:")


def _memory_tiers(sysfs: Sysfs) -> dict[int, int]:
    """Node -> memory tier, where the kernel has memory tiering (6.1+ with tiers configured)."""
    base = sysfs.path("devices", "virtual", "memory_tiering")
    tiers = {}
    for path in children(base, "memory_tier"):
        tier = int(path.name.removeprefix("memory_tier"))
        for node in read_list(path / "nodelist"):
            tiers[node] = tier
    return tiers


def read_list(path: Path) -> set[int]:
    try:
        return parse_list(read_text(path) or "")
    except ValueError as exc:
        raise DriverFailure(str(path), "not a node or cpu list") from exc


def parse_list(text: str) -> set[int]:
    """A kernel cpulist/nodelist such as "0-3,8" as a set; garbage raises ValueError."""
    values: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        low, _, high = part.partition("-")
        values.update(range(int(low), int(high or low) + 1))
    return values


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
