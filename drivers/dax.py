"""The DAX bus: dax regions and dax devices, as `daxctl list -RDMi` shows them.

One frozen dataclass per kernel object, fields named as daxctl names its JSON keys. A device's
mode follows its driver: device_dax -> devdax, kmem -> system-ram, none -> disabled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drivers.errors import DriverFailure
from drivers.numa import MemoryBlock
from drivers.sysfs import Sysfs, children, link_name, read_int, read_node

_MODES = {"device_dax": "devdax", "kmem": "system-ram"}


@dataclass(frozen=True, slots=True)
class DaxMapping:
    page_offset: int
    start: int
    end: int  # inclusive, as the kernel and daxctl report it

    @property
    def size(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True, slots=True)
class DaxDevice:
    chardev: str  # dax0.1; the character device is /dev/<chardev>
    region_id: int
    size: int
    align: int | None
    target_node: int | None
    numa_node: int | None
    driver: str | None
    resource: int | None
    mappings: tuple[DaxMapping, ...]
    online_memblocks: int | None  # system-ram only
    total_memblocks: int | None
    movable: bool | None

    @property
    def mode(self) -> str:
        """devdax, system-ram, or the driver's name; devdax when unbound (daxctl says so too)."""
        return _MODES.get(self.driver or "device_dax", self.driver or "devdax")

    @property
    def enabled(self) -> bool:
        return self.driver is not None

    @property
    def state(self) -> str | None:
        """daxctl prints "disabled" for an unbound device and nothing otherwise."""
        return None if self.enabled else "disabled"


@dataclass(frozen=True, slots=True)
class DaxRegion:
    id: int
    path: str  # the kernel device path of the region's parent, as daxctl prints it
    size: int
    align: int | None
    available_size: int | None  # None: a static region (pmem-backed), which cannot be subdivided
    devices: tuple[DaxDevice, ...]

    @property
    def start(self) -> int | None:
        """The region's first physical address: where its lowest range starts, or what a device
        without a range reports as its resource (the kernel shows the region's start there)."""
        found = [m.start for d in self.devices for m in d.mappings]
        found += [d.resource for d in self.devices if not d.mappings and d.resource is not None]
        return min(found, default=None)

    @property
    def dynamic(self) -> bool:
        """Whether devices can be created and deleted at run time (create/delete attributes)."""
        return self.available_size is not None


def scan_dax(sysfs: Sysfs, blocks: dict[int, MemoryBlock], block_size: int | None
             ) -> list[DaxRegion]:
    """Every dax region with its devices, in region id order."""
    by_parent: dict[Path, list[Path]] = {}
    for device in sysfs.devices("dax"):
        by_parent.setdefault(device.parent, []).append(device)
    regions = [_region(sysfs, parent, devs, blocks, block_size)
               for parent, devs in by_parent.items()]
    return sorted(regions, key=lambda r: r.id)


def _region(sysfs: Sysfs, parent: Path, devices: list[Path], blocks: dict[int, MemoryBlock],
            block_size: int | None) -> DaxRegion:
    attrs = parent / "dax_region"
    region_id = read_int(attrs / "id")
    size = read_int(attrs / "size")
    if region_id is None or size is None:
        raise DriverFailure(str(attrs), "dax region without id or size")
    return DaxRegion(
        id=region_id, path=sysfs.relative(parent), size=size, align=read_int(attrs / "align"),
        available_size=read_int(attrs / "available_size"),
        devices=tuple(_device(d, region_id, blocks, block_size) for d in devices),
    )


def _device(path: Path, region_id: int, blocks: dict[int, MemoryBlock],
            block_size: int | None) -> DaxDevice:
    size = read_int(path / "size")
    if size is None:
        raise DriverFailure(str(path / "size"), "dax device without size")
    driver = link_name(path / "driver")
    mappings = tuple(_mapping(m) for m in children(path, "mapping"))
    online = total = None
    movable: bool | None = None
    if driver == "kmem" and block_size:
        mine = [blocks[i] for m in mappings
                for i in range(m.start // block_size, m.end // block_size + 1) if i in blocks]
        total = len(mine)
        online = sum(1 for b in mine if b.state == "online")
        movable = bool(mine) and all(b.zone == "Movable" for b in mine if b.state == "online")
    return DaxDevice(
        chardev=path.name, region_id=region_id, size=size, align=read_int(path / "align"),
        target_node=read_node(path / "target_node"), numa_node=read_node(path / "numa_node"),
        driver=driver, resource=read_int(path / "resource"),
        mappings=mappings, online_memblocks=online, total_memblocks=total, movable=movable,
    )


def _mapping(path: Path) -> DaxMapping:
    values = [read_int(path / name) for name in ("page_offset", "start", "end")]
    if any(v is None for v in values):
        raise DriverFailure(str(path), "incomplete mapping")
    page_offset, start, end = (int(v) for v in values if v is not None)
    return DaxMapping(page_offset=page_offset, start=start, end=end)


def chardev_path(device: DaxDevice) -> str:
    return f"/dev/{device.chardev}"
