"""Sysfs parsers on damaged trees: missing optional attributes are None, garbage is a
DriverFailure naming the attribute's path, never a crash of another kind."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers import DriverFailure
from drivers.topology import scan
from tests.sysfs_trees import extract

ATTRIBUTES = [
    "bus/dax/devices/dax0.1/size", "bus/dax/devices/dax0.1/target_node",
    "bus/dax/devices/dax0.1/mapping0/start", "devices/platform/hmem.0/dax_region/available_size",
    "devices/system/node/online", "devices/system/memory/block_size_bytes",
    "devices/system/memory/memory32/state", "devices/system/node/node1/meminfo",
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract("sysfs-e-hmem-kmem", tmp_path_factory.mktemp("tree")) / "sys"


def damaged(pristine: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(pristine, into, symlinks=True)
    return into


def test_missing_optional_attributes_read_as_none(pristine: Path, tmp_path: Path) -> None:
    root = damaged(pristine, tmp_path / "sys")
    (root / "devices/platform/hmem.0/dax0.1/target_node").unlink()
    (root / "devices/platform/hmem.0/dax_region/available_size").unlink()
    topology = scan(root)
    (region,) = topology.dax_regions
    assert region.available_size is None and not region.dynamic
    assert next(d for d in region.devices if d.chardev == "dax0.1").target_node is None


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attribute=st.sampled_from(ATTRIBUTES),
       content=st.binary(min_size=1, max_size=40).filter(lambda b: not b.strip().isdigit()))
def test_garbage_attributes_fail_cleanly(pristine: Path, tmp_path: Path, attribute: str,
                                         content: bytes) -> None:
    root = damaged(pristine, tmp_path / "fuzz")
    target = (root / attribute).resolve()
    target.write_bytes(content)
    try:
        scan(root)
    except DriverFailure as exc:
        assert str(target) in str(exc) or target.name in str(exc)


TREES = ["sysfs-a-cxl1-before-region", "sysfs-b-cxl1-region-devdax",
         "sysfs-c-legacy-pmem-devdax", "sysfs-d-hmem-subdivided", "sysfs-e-hmem-kmem"]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Every recorded tree with every attribute file in it (symlinks and directories aside)."""
    found = {}
    for name in TREES:
        root = extract(name, tmp_path_factory.mktemp(name)) / "sys"
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                       if p.is_file() and not p.is_symlink())
        found[name] = (root, files)
    return found


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), content=st.one_of(
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: f"{n}\n".encode()),
    st.sampled_from([b"", b"\n", b"0x", b"-1", b"18446744073709551616", b"1e9", b" 12 ",
                     b"\x00", b"online\x00", b"[unknown]"]),
))
def test_any_attribute_of_any_tree_garbled_fails_cleanly(
        trees: dict[str, tuple[Path, list[str]]], data: st.DataObject,
        content: bytes) -> None:
    """Garbage in any attribute of any recorded tree: discovery and the inventory built on it
    give a result or a DriverFailure, never another exception."""
    from poold.inventory import specs_from_topology

    root, files = trees[data.draw(st.sampled_from(TREES))]
    target = root / data.draw(st.sampled_from(files))
    original = target.read_bytes()
    target.write_bytes(content)  # garbled in place, restored after: one tree per module
    try:
        with contextlib.suppress(DriverFailure):
            specs_from_topology(scan(root))
    finally:
        target.write_bytes(original)
