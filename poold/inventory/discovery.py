"""What poold makes of a topology: which dax devices can be leased (and why not), what backs
each one, and the `poold discover` JSON, whose keys and integers are those of `cxl list` and
`daxctl list` (never their human-readable forms)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

from drivers.cxl import CxlMemdev, CxlRegion
from drivers.dax import DaxDevice, DaxRegion
from drivers.topology import Topology


@dataclass(frozen=True, slots=True)
class Backing:
    cxl_region: CxlRegion | None
    memdevs: tuple[CxlMemdev, ...]  # in interleave position order
    nd_region: str | None
    # Where each memdev's part of the region starts in its own address space (its endpoint
    # decoder's dpa_resource), in the same order; None where the decoder does not say.
    dpa_bases: tuple[int | None, ...] = ()
    # No other memdev on this host has the serial of one of these (emulators and some early
    # devices report 0 for all), so the serials can name the device beyond this host.
    serials_unique: bool = False


def verdict(device: DaxDevice) -> str | None:
    """None when poold can lease the device by mapping its chardev; else the reason why not."""
    if not device.enabled:
        return "disabled: no driver bound"
    if device.size == 0:
        return "size 0"
    if device.mode == "system-ram":
        return "onlined as system-ram (kmem): its memory belongs to a NUMA node, not the chardev"
    if device.mode != "devdax":
        return f"mode {device.mode} is not leasable"
    if not device.align:
        return "no alignment reported"
    return None


def backing(topology: Topology, region: DaxRegion) -> Backing:
    """The CXL region and memdevs behind a dax region, found through its kernel path.

    pmem: .../ndbusN/regionM/daxM.K -> nd region -> CXL region by physical resource.
    ram (kernels with CXL ram regions): .../decoderX.Y/regionM/dax_regionM -> CXL region by name.
    """
    parts = region.path.strip("/").split("/")
    cxl_by_name = {r.region: r for r in topology.cxl.regions}
    cxl_region: CxlRegion | None = None
    nd_name: str | None = None
    for before, part in itertools.pairwise(parts):
        if before.startswith("ndbus"):
            nd = next((r for r in topology.nd_regions if r.dev == part and r.bus == before), None)
            if nd is not None:
                nd_name = nd.dev
                cxl_region = cxl_by_name.get(nd.cxl_region or "")
        elif before.startswith("decoder") and part in cxl_by_name:
            cxl_region = cxl_by_name[part]
    if cxl_region is None:
        return Backing(cxl_region=None, memdevs=(), nd_region=nd_name)
    by_name = {m.memdev: m for m in topology.cxl.memdevs}
    dpa = {d.decoder: d.dpa_resource for d in topology.cxl.decoders}
    targets = sorted(((m, by_name[m.memdev]) for m in cxl_region.mappings
                      if m.memdev is not None and m.memdev in by_name),
                     key=lambda pair: pair[0].position)
    memdevs = tuple(memdev for _m, memdev in targets)
    serials = Counter(m.serial for m in topology.cxl.memdevs)
    return Backing(cxl_region=cxl_region, memdevs=memdevs, nd_region=nd_name,
                   dpa_bases=tuple(dpa.get(m.decoder) for m, _memdev in targets),
                   serials_unique=all(m.serial is not None and serials[m.serial] == 1
                                      for m in memdevs))


def identity(region: DaxRegion, device: DaxDevice, back: Backing) -> str:
    """A device's ledger identity, stable across restarts and `daxN.M` renumbering.

    CXL-backed: the memdevs' serials, where each one's part starts in its own (device physical)
    address space, and the device's offset in the region:
    `cxl:<serial>/<dpa>[,<serial>/<dpa>...]+<offset>`. None of that depends on the host, so
    several hosts reaching one multi-headed or switch-attached device, each through its own PCI
    address and host physical address map, name it alike: one ledger device they share
    (`shared_devices`). Else (hmem, legacy pmem, which no other host reaches, or a CXL device
    whose serial is not unique here or whose decoders do not say where it starts): the region's
    kernel path and the device's physical address."""
    start = device.mappings[0].start if device.mappings else device.resource
    cxl = back.cxl_region
    known = (back.memdevs and back.serials_unique and start is not None and cxl is not None
             and cxl.resource is not None and all(dpa is not None for dpa in back.dpa_bases))
    if known:
        assert start is not None and cxl is not None and cxl.resource is not None
        heads = ",".join(f"{m.serial:#x}/{dpa:#x}"
                         for m, dpa in zip(back.memdevs, back.dpa_bases, strict=True))
        return f"cxl:{heads}+{start - cxl.resource:#x}"
    # Without all of that, a name only this host uses: never two devices under one name.
    origin = "dax:" + region.path
    return f"{origin}:{start:#x}" if start is not None else f"{origin}:{device.chardev}"


def region_identity(region: DaxRegion, back: Backing) -> str:
    """A dynamic region's ledger identity when it is carved per lease: as `identity` names a
    device, without the offset (the region is the device): the CXL memdevs' serials and where
    each one's part starts, else the region's kernel path (this host's name only)."""
    cxl = back.cxl_region
    if back.memdevs and back.serials_unique and cxl is not None and all(
            dpa is not None for dpa in back.dpa_bases):
        heads = ",".join(f"{m.serial:#x}/{dpa:#x}"
                         for m, dpa in zip(back.memdevs, back.dpa_bases, strict=True))
        return f"cxl:{heads}"
    return f"dax:{region.path}"


def is_global(uid: str) -> bool:
    """Whether an identity names the same memory on every host that sees it (see identity)."""
    return uid.startswith("cxl:")


def discover_json(topology: Topology) -> dict[str, Any]:
    cxl = topology.cxl
    dax_devices = []
    for region in topology.dax_regions:
        back = backing(topology, region)
        for device in region.devices:
            dax_devices.append(_dax_device(device, back, verdict(device)))
    return {
        "memdevs": [_drop_none({
            "memdev": m.memdev, "serial": m.serial, "host": m.host, "ram_size": m.ram_size,
            "pmem_size": m.pmem_size, "numa_node": m.numa_node,
            "firmware_version": m.firmware_version, "endpoint": m.endpoint,
        }) for m in cxl.memdevs],
        "ports": [_drop_none({
            "port": p.port, "kind": p.kind, "host": p.host, "depth": p.depth, "parent": p.parent,
            "nr_dports": len(p.dports),
            "dports": [{"dport": d.dport, "id": d.id} for d in p.dports],
        }) for p in cxl.ports],
        "decoders": [_drop_none({
            "decoder": d.decoder, "port": d.port, "kind": d.kind,
            "resource": d.resource if d.size else None, "size": d.size or None,
            "interleave_ways": d.interleave_ways,
            "interleave_granularity": d.interleave_granularity, "region": d.region,
            "mode": d.mode, "dpa_resource": d.dpa_resource if d.size else None,
            "dpa_size": d.dpa_size if d.size else None,
            "nr_targets": len(d.target_list) if d.kind != "endpoint" else None,
            "pmem_capable": d.pmem_capable, "volatile_capable": d.volatile_capable,
            "accelmem_capable": d.accelmem_capable, "state": d.state,
        }) for d in cxl.decoders],
        "regions": [_drop_none({
            "region": r.region, "decoder": r.decoder, "resource": r.resource, "size": r.size,
            "type": r.type, "interleave_ways": r.interleave_ways,
            "interleave_granularity": r.interleave_granularity,
            "decode_state": r.decode_state, "uuid": r.uuid,
            "mappings": [{"position": m.position, "memdev": m.memdev, "decoder": m.decoder}
                         for m in r.mappings],
        }) for r in cxl.regions],
        "nvdimm_bridges": list(cxl.nvdimm_bridges),
        "nd_regions": [_drop_none({
            "dev": r.dev, "bus": r.bus, "type": r.type, "size": r.size, "align": r.align,
            # Legacy (e820) regions hide these; ndctl then prints 0 and "unknown".
            "available_size": r.available_size or 0,
            "max_available_extent": r.max_available_extent,
            "resource": r.resource, "numa_node": r.numa_node, "target_node": r.target_node,
            "persistence_domain": r.persistence_domain or "unknown", "cxl_region": r.cxl_region,
            "namespaces": [_drop_none({
                "dev": n.dev, "mode": n.mode, "map": n.map, "size": n.size, "uuid": n.uuid,
                "raw_uuid": n.raw_uuid, "align": n.align,
                "numa_node": n.numa_node, "target_node": n.target_node, "state": n.state,
                "holder": n.holder,
            }) for n in r.namespaces],
        }) for r in topology.nd_regions],
        "dax_regions": [_drop_none({
            "id": r.id, "path": r.path, "size": r.size, "align": r.align,
            "available_size": r.available_size, "dynamic": r.dynamic,
            "devices": [d.chardev for d in r.devices],
        }) for r in topology.dax_regions],
        "dax_devices": dax_devices,
        "numa_nodes": [_drop_none({
            "node": n.node, "cpulist": n.cpulist, "has_cpu": n.has_cpu,
            "mem_total": n.mem_total, "mem_free": n.mem_free,
            "memory_blocks": list(n.memory_blocks), "memory_tier": n.memory_tier,
        }) for n in topology.numa_nodes],
        "memory_block_size": topology.memory_block_size,
    }


def _dax_device(device: DaxDevice, back: Backing, why_not: str | None) -> dict[str, Any]:
    return _drop_none({
        "chardev": device.chardev, "region_id": device.region_id, "size": device.size,
        "target_node": device.target_node, "numa_node": device.numa_node, "align": device.align,
        "mode": device.mode, "state": device.state,
        "online_memblocks": device.online_memblocks, "total_memblocks": device.total_memblocks,
        "movable": device.movable,
        "mappings": [{"page_offset": m.page_offset, "start": m.start, "end": m.end,
                      "size": m.size} for m in device.mappings] or None,
        "cxl_region": back.cxl_region.region if back.cxl_region else None,
        "memdevs": [{"memdev": m.memdev, "serial": m.serial, "host": m.host}
                    for m in back.memdevs] or None,
        "nd_region": back.nd_region,
        "leasable": why_not is None, "not_leasable_because": why_not,
    })


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    """Like cxl-cli and daxctl: an attribute the kernel does not have is left out."""
    return {k: v for k, v in values.items() if v is not None}
