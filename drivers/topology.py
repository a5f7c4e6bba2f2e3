"""One consistent snapshot of everything the drivers read: `scan(sysfs)`.

Inventory and `poold discover` work on this snapshot; nothing else walks sysfs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drivers.cxl import CxlBus, scan_cxl
from drivers.dax import DaxRegion, scan_dax
from drivers.nd import NdRegion, scan_nd
from drivers.numa import MemoryBlock, NumaNode, scan_memory_blocks, scan_nodes
from drivers.sysfs import Sysfs


@dataclass(frozen=True, slots=True)
class Topology:
    cxl: CxlBus
    nd_regions: tuple[NdRegion, ...]
    dax_regions: tuple[DaxRegion, ...]
    numa_nodes: tuple[NumaNode, ...]
    memory_blocks: tuple[MemoryBlock, ...]
    memory_block_size: int | None


def scan(root: Path | str = "/sys") -> Topology:
    sysfs = Sysfs(root)
    cxl = scan_cxl(sysfs)
    blocks, block_size = scan_memory_blocks(sysfs)
    resources = {r.resource: r.region for r in cxl.regions if r.resource is not None}
    return Topology(
        cxl=cxl,
        nd_regions=tuple(scan_nd(sysfs, resources)),
        dax_regions=tuple(scan_dax(sysfs, blocks, block_size)),
        numa_nodes=tuple(scan_nodes(sysfs, blocks)),
        memory_blocks=tuple(blocks[i] for i in sorted(blocks)),
        memory_block_size=block_size,
    )
