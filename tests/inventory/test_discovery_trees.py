"""Discovery on recorded real-kernel trees matches what cxl list, ndctl list and daxctl list
printed on that kernel, field by field. Expected values come from the recorded tool JSON, never
from numbers copied by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drivers.topology import scan
from poold.inventory.discovery import discover_json
from tests import discovery_compare as compare
from tests.sysfs_trees import TREES, extract, tool_json


@pytest.fixture(scope="module", params=TREES)
def tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(request.param, tmp_path_factory.mktemp("sysfs"))


@pytest.fixture(scope="module")
def ours(tree: Path) -> dict[str, Any]:
    return discover_json(scan(tree / "sys"))


def test_memdevs(tree: Path, ours: dict[str, Any]) -> None:
    compare.compare_memdevs(ours, tool_json(tree, "cxl"))


def test_decoders_ports_and_regions(tree: Path, ours: dict[str, Any]) -> None:
    compare.compare_cxl_topology(ours, tool_json(tree, "cxl"))


def test_dax_regions_and_devices(tree: Path, ours: dict[str, Any]) -> None:
    compare.compare_dax(ours, tool_json(tree, "daxctl"))
    for region in tool_json(tree, "daxctl"):
        mine = next(r for r in ours["dax_regions"] if r["id"] == region["id"])
        # In these trees a dynamic region always has room left, so daxctl shows it.
        assert ("available_size" in mine) == ("available_size" in region)


def test_nd_regions_and_namespaces(tree: Path, ours: dict[str, Any]) -> None:
    compare.compare_nd(ours, tool_json(tree, "ndctl"))


def test_cxl_dax_devices_name_their_backing_memdevs(tree: Path, ours: dict[str, Any]) -> None:
    compare.compare_backing(ours, tool_json(tree, "cxl"), tool_json(tree, "ndctl"))


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
