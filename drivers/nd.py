"""libnvdimm: nd regions and namespaces, as `ndctl list -RN` shows them.

CXL pmem reaches dax through libnvdimm, but the kernel does not link a CXL region to the nd
region it becomes: they are matched by their physical `resource` (what ndctl users do by hand).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drivers.sysfs import Sysfs, children, link_name, read_int, read_node, read_text

# The namespace `mode` attribute uses the kernel's old names; ndctl prints the new ones.
_NAMESPACE_MODES = {"dax": "devdax", "memory": "fsdax", "safe": "sector", "raw": "raw"}
NIL_UUID = "00000000-0000-0000-0000-000000000000"
_REGION_TYPES = {"nd_pmem": "pmem", "nd_blk": "blk", "nd_volatile": "volatile"}


@dataclass(frozen=True, slots=True)
class NdNamespace:
    dev: str
    region: str
    mode: str
    size: int  # usable bytes: for devdax, the dax region's size (after the pfn metadata)
    uuid: str | None  # the holder's uuid when claimed (what ndctl prints), else its own
    raw_uuid: str | None  # the namespace's own uuid, when claimed
    map: str | None  # where a claimed namespace keeps its page map: mem or dev
    align: int | None
    resource: int | None
    holder: str | None
    numa_node: int | None
    target_node: int | None
    enabled: bool

    @property
    def state(self) -> str | None:
        return None if self.enabled else "disabled"


@dataclass(frozen=True, slots=True)
class NdRegion:
    dev: str
    bus: str
    provider: str | None
    type: str | None
    size: int
    align: int | None
    available_size: int | None
    max_available_extent: int | None
    resource: int | None
    numa_node: int | None
    target_node: int | None
    persistence_domain: str | None
    cxl_region: str | None  # matched by resource
    namespaces: tuple[NdNamespace, ...]


def scan_nd(sysfs: Sysfs, cxl_resources: dict[int, str]) -> list[NdRegion]:
    regions = []
    for path in sysfs.devices("nd"):
        if not path.name.startswith("region"):
            continue
        resource = read_int(path / "resource")
        regions.append(NdRegion(
            dev=path.name, bus=path.parent.name, provider=read_text(path.parent / "provider"),
            type=_REGION_TYPES.get(read_text(path / "devtype") or ""),
            size=read_int(path / "size") or 0, align=read_int(path / "align"),
            available_size=read_int(path / "available_size"),
            max_available_extent=read_int(path / "max_available_extent"),
            resource=resource, numa_node=read_node(path / "numa_node"),
            target_node=read_node(path / "target_node"),
            persistence_domain=read_text(path / "persistence_domain"),
            cxl_region=cxl_resources.get(resource) if resource is not None else None,
            namespaces=tuple(_namespace(n, path.name) for n in children(path, "namespace")),
        ))
    return regions


def _namespace(path: Path, region: str) -> NdNamespace:
    holder = read_text(path / "holder") or None
    mode = _NAMESPACE_MODES.get(read_text(path / "mode") or "raw", "raw")
    size = read_int(path / "size") or 0
    own_uuid = read_text(path / "uuid")
    if own_uuid == "":  # a pmem namespace not yet configured: ndctl shows the nil uuid
        own_uuid = NIL_UUID
    uuid, raw_uuid, page_map, align = own_uuid, None, None, None
    if holder is not None:
        claim = path.parent / holder
        uuid, raw_uuid = read_text(claim / "uuid") or None, own_uuid
        page_map = {"ram": "mem", "pmem": "dev"}.get(read_text(claim / "mode") or "")
        align = read_int(claim / "align")
        if mode == "devdax":
            size = read_int(claim / "dax_region" / "size") or size
    bound = link_name(path / "driver") is not None
    return NdNamespace(
        dev=path.name, region=region, mode=mode, size=size, uuid=uuid, raw_uuid=raw_uuid,
        map=page_map, align=align, resource=read_int(path / "resource"),
        holder=holder, numa_node=read_node(path / "numa_node"),
        target_node=read_node(path / "target_node"), enabled=bound or holder is not None,
    )
