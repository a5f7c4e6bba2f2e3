"""Discovery on recorded real-kernel trees matches what cxl list, ndctl list and daxctl list
printed on that kernel, field by field. Expected values come from the recorded tool JSON, never
from numbers copied by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drivers.topology import scan
from poold.inventory.discovery import discover_json
from tests.sysfs_trees import TREES, extract, tool_json, walk

MEMDEV_KEYS = ("serial", "host", "pmem_size", "ram_size", "numa_node")
DECODER_KEYS = ("resource", "size", "interleave_ways", "interleave_granularity", "region", "mode",
                "dpa_resource", "dpa_size", "nr_targets", "state", "pmem_capable",
                "volatile_capable", "accelmem_capable")
REGION_KEYS = ("resource", "size", "interleave_ways", "interleave_granularity", "decode_state",
               "type", "uuid")
PORT_KEYS = ("host", "depth", "nr_dports")
DAX_REGION_KEYS = ("id", "size", "align", "available_size", "path")
DAX_DEVICE_KEYS = ("size", "target_node", "align", "mode", "state", "online_memblocks",
                   "total_memblocks", "movable", "mappings")
ND_REGION_KEYS = ("size", "align", "available_size", "max_available_extent", "type", "numa_node",
                  "target_node", "persistence_domain")
NAMESPACE_KEYS = ("mode", "map", "size", "uuid", "raw_uuid", "state", "numa_node", "target_node",
                  "align")


@pytest.fixture(scope="module", params=TREES)
def tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(request.param, tmp_path_factory.mktemp("sysfs"))


@pytest.fixture(scope="module")
def ours(tree: Path) -> dict[str, Any]:
    return discover_json(scan(tree / "sys"))


def same(ours: dict[str, Any], theirs: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    for key in keys:
        if key in theirs:
            assert ours.get(key) == theirs[key], f"{what}.{key}: ours {ours.get(key)!r}"


def by(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {str(item[key]): item for item in items}


def test_memdevs(tree: Path, ours: dict[str, Any]) -> None:
    theirs = [m for m in walk(tool_json(tree, "cxl"), "memdev")
              if isinstance(m["memdev"], str) and "serial" in m]
    mine = by(ours["memdevs"], "memdev")
    assert set(mine) == {m["memdev"] for m in theirs}
    for memdev in theirs:
        same(mine[memdev["memdev"]], memdev, MEMDEV_KEYS, memdev["memdev"])


def test_decoders_ports_and_regions(tree: Path, ours: dict[str, Any]) -> None:
    cxl = tool_json(tree, "cxl")
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


def test_dax_regions_and_devices(tree: Path, ours: dict[str, Any]) -> None:
    theirs = tool_json(tree, "daxctl")
    assert {r["id"] for r in ours["dax_regions"]} == {r["id"] for r in theirs}
    devices = by(ours["dax_devices"], "chardev")
    for region in theirs:
        mine = next(r for r in ours["dax_regions"] if r["id"] == region["id"])
        same(mine, region, DAX_REGION_KEYS, f"region{region['id']}")
        # A static (pmem) region has no available_size at all; a dynamic one always has it.
        assert ("available_size" in mine) == ("available_size" in region)
        assert sorted(mine["devices"]) == sorted(d["chardev"] for d in region["devices"])
        for device in region["devices"]:
            same(devices[device["chardev"]], device, DAX_DEVICE_KEYS, device["chardev"])


def test_nd_regions_and_namespaces(tree: Path, ours: dict[str, Any]) -> None:
    theirs = [r for r in walk(tool_json(tree, "ndctl"), "dev")
              if str(r["dev"]).startswith("region")]
    mine = by(ours["nd_regions"], "dev")
    assert set(mine) == {r["dev"] for r in theirs}
    for region in theirs:
        same(mine[region["dev"]], region, ND_REGION_KEYS, region["dev"])
        namespaces = by(mine[region["dev"]]["namespaces"], "dev")
        for namespace in region.get("namespaces", []):
            same(namespaces[namespace["dev"]], namespace, NAMESPACE_KEYS, namespace["dev"])


def test_cxl_dax_devices_name_their_backing_memdevs(tree: Path, ours: dict[str, Any]) -> None:
    """A dax device from a CXL region names that region and its memdevs (matched by resource,
    since the kernel does not link nd regions to CXL regions)."""
    cxl = tool_json(tree, "cxl")
    region_memdevs = {r["region"]: sorted(m["memdev"] for m in r["mappings"])
                      for r in walk(cxl, "decode_state")}
    for device in ours["dax_devices"]:
        if "cxl_region" in device:
            assert sorted(m["memdev"] for m in device["memdevs"]) == \
                region_memdevs[device["cxl_region"]]
    nd_from_cxl = {r["dev"] for r in ours["nd_regions"] if "cxl_region" in r}
    ndbus = [b for b in tool_json(tree, "ndctl") if b.get("provider") == "CXL"]
    assert nd_from_cxl == {r["dev"] for b in ndbus for r in b.get("regions", [])}


def test_verdicts(ours: dict[str, Any]) -> None:
    for device in ours["dax_devices"]:
        usable = device["mode"] == "devdax" and device["size"] > 0 and "state" not in device
        assert device["leasable"] is usable, device
        assert ("not_leasable_because" in device) is not usable


def test_numa_nodes(tree: Path, ours: dict[str, Any]) -> None:
    online = (tree / "sys/devices/system/node/online").read_text().strip()
    nodes = {n["node"]: n for n in ours["numa_nodes"]}
    assert ",".join(map(str, sorted(nodes))) in {online, online.replace("-", ",")}
    meminfo = (tree / "meta" / "meminfo").read_text()
    total_kib = int(next(line.split()[1] for line in meminfo.splitlines()
                         if line.startswith("MemTotal:")))
    assert sum(n["mem_total"] for n in nodes.values()) == total_kib * 1024
    for device in ours["dax_devices"]:
        if device["mode"] == "system-ram":
            node = nodes[device["target_node"]]
            assert not node["has_cpu"]
            assert node["mem_total"] == device["size"]
