"""Field-by-field comparison of `poold discover` JSON with what cxl list, ndctl list and daxctl
list printed on the same kernel. Shared by the recorded-tree tests and the real-kernel tier."""

from __future__ import annotations

from typing import Any

from tests.sysfs_trees import walk

MEMDEV_KEYS = ("serial", "host", "pmem_size", "ram_size", "numa_node")
DECODER_KEYS = ("resource", "size", "interleave_ways", "interleave_granularity", "region", "mode",
                "dpa_resource", "dpa_size", "nr_targets", "state", "pmem_capable",
                "volatile_capable", "accelmem_capable")
REGION_KEYS = ("resource", "size", "interleave_ways", "interleave_granularity", "decode_state",
               "type", "uuid")
PORT_KEYS = ("host", "depth", "nr_dports")
DAX_REGION_KEYS = ("id", "size", "align", "path")
DAX_DEVICE_KEYS = ("size", "target_node", "align", "mode", "state", "online_memblocks",
                   "total_memblocks", "movable", "mappings")
ND_REGION_KEYS = ("size", "align", "available_size", "max_available_extent", "type", "numa_node",
                  "target_node", "persistence_domain")
NAMESPACE_KEYS = ("mode", "map", "size", "uuid", "raw_uuid", "state", "numa_node", "target_node",
                  "align")


def same(ours: dict[str, Any], theirs: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    for key in keys:
        if key in theirs:
            assert ours.get(key) == theirs[key], f"{what}.{key}: ours {ours.get(key)!r}"


def by(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {str(item[key]): item for item in items}


def compare_memdevs(ours: dict[str, Any], cxl: Any) -> None:
    theirs = [m for m in walk(cxl, "memdev") if isinstance(m["memdev"], str) and "serial" in m]
    mine = by(ours["memdevs"], "memdev")
    assert set(mine) == {m["memdev"] for m in theirs}
    for memdev in theirs:
        same(mine[memdev["memdev"]], memdev, MEMDEV_KEYS, memdev["memdev"])


def compare_cxl_topology(ours: dict[str, Any], cxl: Any) -> None:
    """Decoders, ports (and the root's dports) and regions with their mappings."""
    decoders = [d for d in walk(cxl, "decoder") if "position" not in d]
    assert set(by(ours["decoders"], "decoder")) == {d["decoder"] for d in decoders}
    for decoder in decoders:
        same(by(ours["decoders"], "decoder")[decoder["decoder"]], decoder, DECODER_KEYS,
             decoder["decoder"])
    ports = walk(cxl, "port") + [e for e in walk(cxl, "endpoint") if isinstance(e["endpoint"], str)]
    mine = by(ours["ports"], "port")
    for port in ports:
        name = port.get("port") or port["endpoint"]
        same(mine[name], port, PORT_KEYS, name)
        if "dports" in port:
            assert [(d["dport"], d["id"]) for d in mine[name]["dports"]] == \
                [(d["dport"], d["id"]) for d in port["dports"]]
    for bus in walk(cxl, "bus"):
        assert [(d["dport"], d["id"]) for d in mine[bus["bus"]]["dports"]] == \
            [(d["dport"], d["id"]) for d in bus["dports"]]
    regions = walk(cxl, "decode_state")
    assert set(by(ours["regions"], "region")) == {r["region"] for r in regions}
    for region in regions:
        mine_region = by(ours["regions"], "region")[region["region"]]
        same(mine_region, region, REGION_KEYS, region["region"])
        assert sorted(map(str, mine_region["mappings"])) == sorted(map(str, region["mappings"]))


def compare_dax(ours: dict[str, Any], daxctl: Any) -> None:
    assert {r["id"] for r in ours["dax_regions"]} == {r["id"] for r in daxctl}
    devices = by(ours["dax_devices"], "chardev")
    for region in daxctl:
        mine = next(r for r in ours["dax_regions"] if r["id"] == region["id"])
        same(mine, region, DAX_REGION_KEYS, f"region{region['id']}")
        # daxctl prints available_size only for a dynamic region, and not when it is 0.
        if "available_size" in region:
            assert mine.get("available_size") == region["available_size"]
        else:
            assert mine.get("available_size") in (None, 0)
        assert sorted(mine["devices"]) == sorted(d["chardev"] for d in region["devices"])
        for device in region["devices"]:
            same(devices[device["chardev"]], device, DAX_DEVICE_KEYS, device["chardev"])


def compare_nd(ours: dict[str, Any], ndctl: Any) -> None:
    theirs = [r for r in walk(ndctl, "dev") if str(r["dev"]).startswith("region")]
    mine = by(ours["nd_regions"], "dev")
    assert set(mine) == {r["dev"] for r in theirs}
    for region in theirs:
        same(mine[region["dev"]], region, ND_REGION_KEYS, region["dev"])
        namespaces = by(mine[region["dev"]]["namespaces"], "dev")
        for namespace in region.get("namespaces", []):
            same(namespaces[namespace["dev"]], namespace, NAMESPACE_KEYS, namespace["dev"])


def compare_backing(ours: dict[str, Any], cxl: Any, ndctl: Any) -> None:
    """A dax device from a CXL region names that region and its memdevs (matched by resource,
    since the kernel does not link nd regions to CXL regions)."""
    region_memdevs = {r["region"]: sorted(m["memdev"] for m in r["mappings"])
                      for r in walk(cxl, "decode_state")}
    for device in ours["dax_devices"]:
        if "cxl_region" in device:
            assert sorted(m["memdev"] for m in device["memdevs"]) == \
                region_memdevs[device["cxl_region"]]
    nd_from_cxl = {r["dev"] for r in ours["nd_regions"] if "cxl_region" in r}
    ndbus = [b for b in ndctl if b.get("provider") == "CXL"]
    assert nd_from_cxl == {r["dev"] for b in ndbus for r in b.get("regions", [])}


def compare_all(ours: dict[str, Any], cxl: Any, ndctl: Any, daxctl: Any) -> None:
    compare_memdevs(ours, cxl)
    compare_cxl_topology(ours, cxl)
    compare_dax(ours, daxctl)
    compare_nd(ours, ndctl)
    compare_backing(ours, cxl, ndctl)
