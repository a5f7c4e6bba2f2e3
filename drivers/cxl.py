"""The CXL bus: ports, decoders, memdevs, regions, nvdimm bridges and pmem, as `cxl list` sees it.

One frozen dataclass per kernel object with cxl-cli's names. memdevs are identified by serial and
PCI host, never by `memN`, which follows probe order. A region's mappings are derived the way
libcxl does: each targetN names an endpoint decoder, whose port's uport is the memdev.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drivers.errors import DriverFailure
from drivers.sysfs import Sysfs, children, link_name, read_int, read_node, read_text

_DECODER_KINDS = {
    "cxl_decoder_root": "root", "cxl_decoder_switch": "switch", "cxl_decoder_endpoint": "endpoint",
}


@dataclass(frozen=True, slots=True)
class CxlDport:
    dport: str  # the downstream device (a PCI port or an ACPI host bridge)
    id: int


@dataclass(frozen=True, slots=True)
class CxlPort:
    port: str  # root0, port1, endpoint2
    kind: str  # root, switch, endpoint
    host: str | None  # the uport: ACPI0017:00, ACPI0016:00, or the memdev of an endpoint
    depth: int
    parent: str | None
    dports: tuple[CxlDport, ...]


@dataclass(frozen=True, slots=True)
class CxlDecoder:
    decoder: str
    port: str
    kind: str  # root, switch, endpoint
    resource: int | None  # HPA start
    size: int
    interleave_ways: int | None
    interleave_granularity: int | None
    region: str | None
    mode: str | None  # endpoint decoders: ram, pmem, mixed, none
    dpa_resource: int | None
    dpa_size: int | None
    target_list: tuple[int, ...]
    pmem_capable: bool | None
    volatile_capable: bool | None
    accelmem_capable: bool | None
    locked: bool | None

    @property
    def state(self) -> str | None:
        """cxl list prints "disabled" for a decoder that decodes nothing."""
        return "disabled" if self.size == 0 else None


@dataclass(frozen=True, slots=True)
class CxlMemdev:
    memdev: str
    serial: int | None
    host: str  # PCI address of the device: a stable name, unlike memN
    ram_size: int
    pmem_size: int
    numa_node: int | None
    firmware_version: str | None
    endpoint: str | None  # the endpoint port this memdev is the uport of


@dataclass(frozen=True, slots=True)
class CxlRegionMapping:
    position: int
    memdev: str | None
    decoder: str


@dataclass(frozen=True, slots=True)
class CxlRegion:
    region: str
    decoder: str  # the root decoder it was created under
    resource: int | None
    size: int
    type: str | None  # pmem or ram
    interleave_ways: int | None
    interleave_granularity: int | None
    decode_state: str  # commit or reset
    uuid: str | None
    mappings: tuple[CxlRegionMapping, ...]


@dataclass(frozen=True, slots=True)
class CxlBus:
    ports: tuple[CxlPort, ...]
    decoders: tuple[CxlDecoder, ...]
    memdevs: tuple[CxlMemdev, ...]
    regions: tuple[CxlRegion, ...]
    nvdimm_bridges: tuple[str, ...]
    pmems: tuple[tuple[str, str], ...]  # (pmemN, memdev)


def scan_cxl(sysfs: Sysfs) -> CxlBus:
    devices = {path.name: path for path in sysfs.devices("cxl")}
    ports = [_port(name, path) for name, path in devices.items() if _is_port(name)]
    decoders = [_decoder(name, path) for name, path in devices.items()
                if name.startswith("decoder")]
    endpoint_of = {p.host: p.port for p in ports if p.kind == "endpoint"}
    memdevs = [_memdev(name, path, endpoint_of.get(name)) for name, path in devices.items()
               if name.startswith("mem")]
    memdev_of_port = {p.port: p.host for p in ports if p.kind == "endpoint"}
    port_of_decoder = {d.decoder: d.port for d in decoders}
    regions = [_region(name, path, port_of_decoder, memdev_of_port)
               for name, path in devices.items() if name.startswith("region")]
    return CxlBus(
        ports=tuple(ports), decoders=tuple(decoders), memdevs=tuple(memdevs),
        regions=tuple(regions),
        nvdimm_bridges=tuple(n for n in devices if n.startswith("nvdimm-bridge")),
        pmems=tuple((n, p.parent.name) for n, p in devices.items()
                    if n.startswith("pmem") and not n.startswith("pmem_region")),
    )


def _is_port(name: str) -> bool:
    return name.startswith(("root", "port", "endpoint"))


def _port(name: str, path: Path) -> CxlPort:
    kind = "root" if name.startswith("root") else (
        "endpoint" if name.startswith("endpoint") else "switch")
    ancestors = [p.name for p in path.parents if _is_port(p.name)]
    dports = []
    for link in path.iterdir():
        suffix = link.name.removeprefix("dport")
        if link.name.startswith("dport") and suffix.isdigit():
            dports.append(CxlDport(dport=link_name(link) or "", id=int(suffix)))
    return CxlPort(port=name, kind=kind, host=link_name(path / "uport"), depth=len(ancestors),
                   parent=ancestors[0] if ancestors else None,
                   dports=tuple(sorted(dports, key=lambda d: d.id)))


def _flag(path: Path) -> bool | None:
    value = read_int(path, base=10)
    return None if value is None else bool(value)


def _decoder(name: str, path: Path) -> CxlDecoder:
    devtype = read_text(path / "devtype") or ""
    kind = _DECODER_KINDS.get(devtype)
    if kind is None:
        raise DriverFailure(str(path / "devtype"), f"unknown decoder type {devtype!r}")
    targets = read_text(path / "target_list") or ""
    try:
        target_list = tuple(int(t) for t in targets.split(",") if t)
    except ValueError as exc:
        raise DriverFailure(str(path / "target_list"), f"bad target list {targets!r}") from exc
    return CxlDecoder(
        decoder=name, port=path.parent.name, kind=kind, resource=read_int(path / "start"),
        size=read_int(path / "size") or 0, interleave_ways=read_int(path / "interleave_ways"),
        interleave_granularity=read_int(path / "interleave_granularity"),
        region=read_text(path / "region") or None, mode=read_text(path / "mode"),
        dpa_resource=read_int(path / "dpa_resource"), dpa_size=read_int(path / "dpa_size"),
        target_list=target_list, pmem_capable=_flag(path / "cap_pmem"),
        volatile_capable=_flag(path / "cap_ram"), accelmem_capable=_flag(path / "cap_type2"),
        locked=_flag(path / "locked"),
    )


def _memdev(name: str, path: Path, endpoint: str | None) -> CxlMemdev:
    return CxlMemdev(
        memdev=name, serial=read_int(path / "serial"), host=path.parent.name,
        ram_size=read_int(path / "ram" / "size") or 0,
        pmem_size=read_int(path / "pmem" / "size") or 0,
        numa_node=read_node(path / "numa_node"),
        firmware_version=read_text(path / "firmware_version"), endpoint=endpoint,
    )


def _region(name: str, path: Path, port_of_decoder: dict[str, str],
            memdev_of_port: dict[str, str | None]) -> CxlRegion:
    mappings = []
    for attr in children(path, "target"):
        position = attr.name.removeprefix("target")
        decoder = read_text(attr)
        if not position.isdigit() or not decoder:
            continue
        port = port_of_decoder.get(decoder)
        memdev = memdev_of_port.get(port) if port else None
        mappings.append(CxlRegionMapping(position=int(position), memdev=memdev, decoder=decoder))
    return CxlRegion(
        region=name, decoder=path.parent.name, resource=read_int(path / "resource"),
        size=read_int(path / "size") or 0, type=_region_type(path),
        interleave_ways=read_int(path / "interleave_ways"),
        interleave_granularity=read_int(path / "interleave_granularity"),
        decode_state="commit" if read_int(path / "commit") == 1 else "reset",
        uuid=read_text(path / "uuid") or None, mappings=tuple(mappings),
    )


def _region_type(path: Path) -> str | None:
    """Newer kernels have a `mode` attribute; 6.1 shows the type by the child it creates."""
    mode = read_text(path / "mode")
    if mode:
        return {"ram": "ram", "pmem": "pmem"}.get(mode, mode)
    if children(path, "pmem_region"):
        return "pmem"
    if children(path, "dax_region"):
        return "ram"
    return None
