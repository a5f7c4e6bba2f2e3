"""poold on a real Linux 6.1 kernel: discovery agrees with the kernel's own tools, the daemon
follows a region created and destroyed under it (kernel uevents, no restart), and a lease on a
real /dev/dax0.0 round-trips bytes that land in the emulated CXL device's backing file at the
offset the topology predicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import discovery_compare as compare
from tests.kernel import qemu
from tests.kernel.qemu import MiB

GUEST_TIMEOUT_S = 600  # a daemon and several Python starts under TCG, on a busy 2-core host
TOOLS = """cxl list -vvv > "$OUT/cxl.json"
ndctl list -BDRNiv > "$OUT/ndctl.json"
daxctl list -RDMi > "$OUT/daxctl.json"
poold discover > "$OUT/discover.json"
"""
# The guest boots with lo down; only kernel uevents (no periodic rescan) may show new devices.
DAEMON = """ip link set lo up 2>/dev/null || busybox ip link set lo up
export POOLD_RESCAN_INTERVAL_S=3600
poold serve --state-dir /tmp/poold --listen 127.0.0.1:7077 --host-id guest \\
    > "$OUT/daemon.log" 2>&1 &
python3 -m tests.kernel.guest_client health
"""


def load(result: qemu.GuestResult, name: str) -> Any:
    text = (result.out_dir / name).read_text()
    return json.loads(text) if text.strip() else []


def run(scenario: str, script: str, tmp_path: Path, kernel: qemu.Kernel) -> qemu.GuestResult:
    result = qemu.run_guest(scenario, "set -e\n" + script, GUEST_TIMEOUT_S, tmp_path,
                            kernel=kernel)
    log = result.out_dir / "daemon.log"
    assert result.returncode == 0, (result.stderr[-3000:],
                                    log.read_text()[-3000:] if log.exists() else "")
    return result


def compare_with_tools(result: qemu.GuestResult) -> dict[str, Any]:
    ours = load(result, "discover.json")
    compare.compare_all(ours, load(result, "cxl.json"), load(result, "ndctl.json"),
                        load(result, "daxctl.json"))
    return dict(ours)


def test_cxl_region_hotplug_lease_and_bytes_in_backing_file(guest_kernel: qemu.Kernel,
                                                            tmp_path: Path) -> None:
    script = DAEMON + """
cxl create-region -m -d decoder0.0 -w 1 -t pmem mem0
ndctl create-namespace -m devdax -M mem -r region0
python3 -m tests.kernel.guest_client lease dax0.0 8388608 poold-was-here > "$OUT/lease.json"
""" + TOOLS + """
ndctl destroy-namespace -f namespace0.0
lease_id=$(sed 's/.*"lease": {"id": "\\([0-9a-f]*\\)".*/\\1/' "$OUT/lease.json")
python3 -m tests.kernel.guest_client gone dax0.0 "$lease_id" > "$OUT/gone.json"
poold fsck --state-dir /tmp/poold > "$OUT/fsck.json"
"""
    result = run("cxl1", script, tmp_path, guest_kernel)
    ours = compare_with_tools(result)
    leased = load(result, "lease.json")
    lease, device = leased["lease"], leased["device"]
    assert lease["chardev"] == "/dev/dax0.0" and leased["readback"] == "poold-was-here"
    assert device["size"] == next(d["size"] for d in ours["dax_devices"])
    # Where the lease's bytes must be in the device's backing file: the dax device's physical
    # start, relative to its 1-way region, plus the endpoint decoder's DPA base, plus the offset.
    dax = next(d for d in ours["dax_devices"] if d["chardev"] == "dax0.0")
    region = next(r for r in ours["regions"] if r["region"] == dax["cxl_region"])
    endpoint = next(d for d in ours["decoders"] if d["decoder"] == region["mappings"][0]["decoder"])
    at = dax["mappings"][0]["start"] - region["resource"] + endpoint["dpa_resource"] \
        + lease["offset"]
    with open(result.backing_dir / "cxl-mem0.raw", "rb") as backing:
        backing.seek(at)
        assert backing.read(14) == b"poold-was-here"
        backing.seek(at + lease["length"] - 14)
        assert backing.read(14) == b"poold-was-here"
    gone = load(result, "gone.json")
    assert (gone["device"]["state"], gone["lease"]["state"]) == ("missing", "lost")
    assert load(result, "fsck.json")["clean"]


def test_dynamic_region_subdivided_and_onlined_as_system_ram(guest_kernel: qemu.Kernel,
                                                            tmp_path: Path) -> None:
    script = """
daxctl disable-device dax0.0
daxctl destroy-device dax0.0 || true   # the first device can only shrink to 0 (exits busy)
daxctl create-device -r 0 -s 256M
daxctl create-device -r 0 -s 256M
daxctl reconfigure-device -m system-ram dax0.2
""" + TOOLS
    ours = compare_with_tools(run("hmem", script, tmp_path, guest_kernel))
    devices = {d["chardev"]: d for d in ours["dax_devices"]}
    assert devices["dax0.1"]["leasable"] and not devices["dax0.2"]["leasable"]
    assert devices["dax0.2"]["mode"] == "system-ram"
    assert devices["dax0.2"]["online_memblocks"] == devices["dax0.2"]["total_memblocks"] > 0
    node = next(n for n in ours["numa_nodes"] if n["node"] == devices["dax0.2"]["target_node"])
    assert not node["has_cpu"] and node["mem_total"] == 256 * MiB


@pytest.mark.parametrize("scenario", ["legacy-pmem", "cxl-interleave"])
def test_discovery_matches_the_kernel_tools(guest_kernel: qemu.Kernel, tmp_path: Path,
                                            scenario: str) -> None:
    setup = {
        "legacy-pmem": "ndctl create-namespace -f -e namespace0.0 -m devdax\n",
        "cxl-interleave": "cxl create-region -m -d decoder0.0 -w 2 -t pmem mem0 mem1\n"
                          "ndctl create-namespace -m devdax -M mem -r region0\n",
    }[scenario]
    ours = compare_with_tools(run(scenario, setup + TOOLS, tmp_path, guest_kernel))
    assert [d["chardev"] for d in ours["dax_devices"] if d["leasable"]] == ["dax0.0"]
    if scenario == "cxl-interleave":
        (dax,) = ours["dax_devices"]
        assert len({m["serial"] for m in dax["memdevs"]}) == 2
