"""First real-kernel tests: each scenario boots, the kernel's CXL/DAX objects appear as expected,
and bytes written through /dev/dax0.0 reach the emulated device's backing file.

The guest's own tools (cxl, ndctl, daxctl) are the ground truth here; exit codes are not trusted
(QEMU 7.2 and Linux 6.1 can "succeed" while writes go nowhere), so every check reads state back.
"""

from __future__ import annotations

import json
import mmap
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.kernel import qemu
from tests.kernel.qemu import GiB, MiB

GUEST_TIMEOUT_S = 240  # a TCG guest takes 20-90 s; leave room for a slow, shared machine


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in a tool's output, however deeply the tool nested it."""
    if isinstance(node, dict):
        yield node
        node = list(node.values())
    if isinstance(node, list):
        for child in node:
            yield from walk(child)


def load(result: qemu.GuestResult, name: str) -> Any:
    return json.loads((result.out_dir / name).read_text())


def find_one(objects: Iterator[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    found = [o for o in objects if o.get(key) == value]
    assert found, f"no object with {key}={value}"
    return found[0]


def cxl_regions(listing: Any) -> dict[str, dict[str, Any]]:
    """Region objects of `cxl list`; decoders also carry a "region" key, regions a decode_state."""
    return {o["region"]: o for o in walk(listing) if "decode_state" in o}


def run(scenario: str, script: str, tmp_path: Path, kernel: qemu.Kernel) -> qemu.GuestResult:
    result = qemu.run_guest(scenario, script, GUEST_TIMEOUT_S, tmp_path, kernel=kernel)
    print(f"{scenario}: guest ran {result.wall_s:.1f}s")
    assert result.returncode == 0, f"{result.stderr}\nconsole: {result.console_log}"
    return result


MMAP_CHECK = """
import mmap, os, sys
MiB = 1 << 20
pattern = sys.argv[1].encode() * 64
fd = os.open("/dev/dax0.0", os.O_RDWR)
# devdax only maps MAP_SHARED at multiples of its 2 MiB align.
with mmap.mmap(fd, 2 * MiB, mmap.MAP_SHARED, offset=2 * MiB) as m:
    m[:len(pattern)] = pattern  # no m.flush(): msync on device-dax fails with EINVAL
os.close(fd)
fd = os.open("/dev/dax0.0", os.O_RDONLY)
with mmap.mmap(fd, 2 * MiB, mmap.MAP_SHARED, mmap.PROT_READ, offset=2 * MiB) as m:
    assert m[:len(pattern)] == pattern, "read back differs"
print("mmap ok")
"""

CXL1_SCRIPT = """set -e
cxl create-region -m -d decoder0.0 -w 1 -t pmem mem0
ndctl create-namespace -m devdax -M mem -r region0
cxl list -vvv > "$OUT/cxl-list.json"
daxctl list -RDMi > "$OUT/daxctl-list.json"
cat > "$OUT/mmap_check.py" <<'EOF'
{mmap_check}
EOF
python3 "$OUT/mmap_check.py" {token}
"""


def test_cxl1_region_devdax_reaches_backing_file(guest_kernel: qemu.Kernel,
                                                  tmp_path: Path) -> None:
    token = f"POOLD-KERNEL-{secrets.token_hex(8)}-"
    script = CXL1_SCRIPT.format(mmap_check=MMAP_CHECK, token=token)
    result = run("cxl1", script, tmp_path, guest_kernel)
    assert "mmap ok" in result.stdout

    region = cxl_regions(load(result, "cxl-list.json"))["region0"]
    assert region["size"] == 256 * MiB and region["decode_state"] == "commit"
    dax = find_one(walk(load(result, "daxctl-list.json")), "chardev", "dax0.0")
    assert dax["size"] == 254 * MiB  # 2 MiB of the region hold the namespace's info block

    # Not assuming DPA == file offset: find the pattern wherever QEMU put it.
    with (result.backing_dir / "cxl-mem0.raw").open("rb") as f, \
            mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as raw:
        offset = raw.find(token.encode() * 64)
    assert offset >= 0, "pattern written through /dev/dax0.0 never reached cxl-mem0.raw"
    print(f"cxl1: pattern at backing-file offset {offset:#x} ({offset / MiB:g} MiB)")


HMEM_SCRIPT = """set -e
daxctl list -RDMi > "$OUT/daxctl-list.json"
# dax0.0 fills the region, so available_size is 0 and daxctl leaves it out: read sysfs itself.
region=/sys/bus/dax/devices/dax0.0/../dax_region
ls $region > "$OUT/dax_region-attrs"
cat $region/available_size > "$OUT/available_size"
daxctl disable-device dax0.0
# The region's first device cannot be deleted, only shrunk to 0: daxctl says EBUSY, exits 240.
daxctl destroy-device dax0.0 || true
daxctl create-device -s 256M > "$OUT/create-device.json"
daxctl list -RDMi > "$OUT/daxctl-list-after.json"
"""


def test_hmem_dynamic_dax_region(guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    result = run("hmem", HMEM_SCRIPT, tmp_path, guest_kernel)

    dax = find_one(walk(load(result, "daxctl-list.json")), "chardev", "dax0.0")
    assert dax["size"] == 1 * GiB
    attrs = (result.out_dir / "dax_region-attrs").read_text().split()
    assert {"available_size", "create", "delete", "seed"} <= set(attrs)  # dynamic, unlike pmem
    assert int((result.out_dir / "available_size").read_text()) == 0

    after = load(result, "daxctl-list-after.json")
    (region,) = [o for o in walk(after) if "devices" in o]
    assert region["available_size"] == 1 * GiB - 256 * MiB
    assert find_one(walk(after), "chardev", "dax0.1")["size"] == 256 * MiB


def test_legacy_pmem_devdax(guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    script = """set -e
ndctl create-namespace -f -e namespace0.0 -m devdax
daxctl list -RDMi > "$OUT/daxctl-list.json"
"""
    result = run("legacy-pmem", script, tmp_path, guest_kernel)
    dax = find_one(walk(load(result, "daxctl-list.json")), "chardev", "dax0.0")
    assert 1000 * MiB <= dax["size"] < 1 * GiB


def test_cxl_interleave_two_way_region(guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    script = """set -e
cxl create-region -m -d decoder0.0 -w 2 -t pmem mem0 mem1
cxl list -vvv > "$OUT/cxl-list.json"
"""
    listing = load(run("cxl-interleave", script, tmp_path, guest_kernel), "cxl-list.json")
    assert len({o["serial"] for o in walk(listing) if "serial" in o}) == 2  # distinct sn=
    region = cxl_regions(listing)["region0"]
    assert region["interleave_ways"] == 2 and region["size"] == 512 * MiB


# memN follows probe order, not topology: ask each root decoder which memdev sits below it.
CXL2_SCRIPT = """set -e
for d in decoder0.0 decoder0.1; do
  mem=$(cxl list -M -d $d | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["memdev"])')
  cxl create-region -m -d $d -w 1 -t pmem $mem
done
cxl list -vvv > "$OUT/cxl-list.json"
"""


def test_cxl2_bridges_two_regions(guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    listing = load(run("cxl2-bridges", CXL2_SCRIPT, tmp_path, guest_kernel), "cxl-list.json")
    assert len({o["serial"] for o in walk(listing) if "serial" in o}) == 2
    regions = cxl_regions(listing)
    assert sorted(regions) == ["region0", "region1"]
    assert all(r["size"] == 256 * MiB for r in regions.values())
